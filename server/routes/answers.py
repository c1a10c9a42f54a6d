"""POST /v1/documents/{id}/answers: JSON, or Server-Sent Events when ``stream`` is true."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from ingest.store import FAILED, INGESTING, DocRecord
from server import segmented, streams
from server.deps import EngineDep, SettingsDep, StoreDep
from server.engine import Engine
from server.errors import DocumentFailed, DocumentIngesting, GenerationFailed, InvalidRequest, payload
from server.jobs import AnswerJob
from server.routes.documents import _get
from server.schemas import AnswerRequest, AnswerResponse, AnswerStatsPublic, CitationPublic, SegmentAnswerPublic
from server.settings import Settings
from spec.limits import MAX_WINDOW
from spec.loop import AnswerParams
from spec.sampling import SamplingParams

router = APIRouter(prefix="/v1")
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def answer_params(req: AnswerRequest, settings: Settings) -> AnswerParams:
    """Request -> decoding parameters. verify16 wins over draft_tokens; neither = server's choice."""
    if req.verify16:
        window: int | None = MAX_WINDOW
    elif req.draft_tokens is not None:
        window = req.draft_tokens
    else:
        window = settings.default_draft_tokens  # None: adaptive
    try:
        seed = req.seed if req.seed is not None and req.seed >= 0 else None  # -1: unseeded (llama-server, vLLM)
        sampling = SamplingParams(temperature=req.temperature, top_k=req.top_k, top_p=req.top_p, seed=seed)
        return AnswerParams(
            max_tokens=req.max_tokens or settings.default_max_tokens,
            sampling=sampling,
            window=window,
            stops=tuple(req.stop) if req.stop is not None else None,
            sources=("mtp", "lookup") if req.draft_source == "both" else (req.draft_source,),
            n_mtp=settings.mtp_draft_tokens,
        )
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from exc


def _sse(kind: str, data: dict) -> str:
    return f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


async def _sse_frames(job: AnswerJob, position: int, heartbeat_s: float) -> AsyncIterator[str]:
    """SSE frames: ``queued`` at once (with the jobs ahead), comment heartbeats until the first token,
    then the job's events until done or error. Closing the generator (client gone) cancels the job."""
    yield _sse("queued", {"position": position})
    async for kind, data in streams.events(job, heartbeat_s):
        if kind == "heartbeat":
            yield ": keep-alive\n\n"
        else:
            yield _sse(kind, payload(data) if kind == "error" else data)


@router.post("/documents/{doc_id}/answers", response_model=AnswerResponse)
async def answer(
    doc_id: str, req: AnswerRequest, request: Request, store: StoreDep, engine: EngineDep, settings: SettingsDep
):
    doc = _get(store, doc_id)
    check_answerable(doc, engine)
    job, position = await submit(engine, store, settings, doc, req.question, answer_params(req, settings))
    if req.stream:  # headers and a first event go out now, however long the queue
        frames = _sse_frames(job, position, settings.sse_heartbeat_s)
        return StreamingResponse(frames, media_type="text/event-stream", headers=SSE_HEADERS)
    answer = await collect(job, request)
    return AnswerResponse(answer=answer.text, citations=answer.citations, stats=answer.stats, answers=answer.answers)


async def submit(
    engine: Engine,
    store,
    settings: Settings,
    doc: DocRecord,
    question: str,
    params: AnswerParams,
    history: tuple[tuple[str, str], ...] = (),
):
    """Queue the question: one job, or for a segmented document the jobs of the segments it ranks
    best for (server/segmented.py), read as one. Returns (job, jobs waiting ahead of it)."""
    loop = asyncio.get_running_loop()
    planned = await asyncio.to_thread(segmented.plan, store, doc, question, settings.segment_close_ratio)
    if planned is None:
        job = AnswerJob(doc.id, question, params, loop, history=history)
        return job, engine.submit_answer(job)
    return segmented.submit(
        engine, planned, lambda i: AnswerJob(doc.id, question, params, loop, history=history, segment=i)
    )


def check_answerable(doc: DocRecord, engine: Engine) -> None:
    """Raise a 409 naming the reason when ``doc`` cannot be asked about yet (or at all)."""
    if doc.status == INGESTING:
        pct = engine.progress.get(doc.id, 0.0) * 100
        raise DocumentIngesting(f"document {doc.id} is still being ingested ({pct:.0f}%); retry soon")
    if doc.status == FAILED:
        raise DocumentFailed(f"document {doc.id} failed to ingest: {doc.error}; upload it again")


@dataclass
class Collected:
    text: str
    citations: list[CitationPublic]
    stats: AnswerStatsPublic
    answers: list[SegmentAnswerPublic] | None = None


async def collect(job: AnswerJob, request: Request) -> Collected:
    """Read a queued job's events to the end: the whole answer, its citations and stats; an engine
    error is raised. The job is cancelled if the client disconnects meanwhile, queued or not."""
    parts: list[str] = []
    citations: list[CitationPublic] = []
    stats: AnswerStatsPublic | None = None
    answers: list[SegmentAnswerPublic] | None = None
    watcher = asyncio.create_task(streams.cancel_on_disconnect(request, job))
    try:
        while True:
            kind, data = await job.events.get()
            if kind == "token":
                parts.append(data["text"])
            elif kind == "citations":
                citations = [CitationPublic(**c) for c in data["citations"]]
            elif kind == "answers":
                answers = [SegmentAnswerPublic(**a) for a in data["answers"]]
            elif kind == "stats":
                stats = AnswerStatsPublic(**data)
            elif kind == "error":
                raise data
            elif kind == "done":
                break
    finally:
        watcher.cancel()
        job.cancel()
    if stats is None:
        raise GenerationFailed("the engine finished without stats")
    return Collected("".join(parts), citations, stats, answers)
