"""POST /v1/documents/{id}/answers: JSON, or Server-Sent Events when ``stream`` is true."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from server.api.answering import answer_params, check_answerable, collect, events, submit
from server.api.deps import EngineDep, SettingsDep, StoreDep, existing_document
from server.api.schemas import AnswerRequest, AnswerResponse
from server.config.errors import payload
from server.config.settings import Settings
from server.engine.events import AnswerStream, EventKind

router = APIRouter(prefix="/v1")
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _sse(kind: str, data: dict) -> str:
    return f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


async def _sse_frames(stream: AnswerStream, position: int, heartbeat_s: float) -> AsyncIterator[str]:
    """SSE frames: ``queued`` at once (with the jobs ahead), comment heartbeats until the first token,
    then the stream's events until done or error. Closing the generator (client gone) cancels it."""
    yield _sse(EventKind.QUEUED, {"position": position})
    async for event in events(stream, heartbeat_s):
        if event.kind is EventKind.HEARTBEAT:
            yield ": keep-alive\n\n"
        else:
            yield _sse(event.kind, payload(event.data) if event.kind is EventKind.ERROR else event.data)


@router.post("/documents/{doc_id}/answers", response_model=AnswerResponse)
async def answer(
    doc_id: str, req: AnswerRequest, request: Request, store: StoreDep, engine: EngineDep, settings: SettingsDep
):
    doc = existing_document(store, doc_id)
    check_answerable(doc, engine)
    params = answer_params(req, settings, engine)
    stream, position = await submit(engine, store, settings, doc, req.question, params)
    return await respond(stream, position, req, request, settings)


async def respond(
    stream: AnswerStream, position: int, req: AnswerRequest, request: Request, settings: Settings
) -> StreamingResponse | AnswerResponse:
    """A queued answer as the response ``req`` asks for: Server-Sent Events, or the whole answer as
    JSON (also a collection's answers, server/api/routes/collections.py)."""
    if req.stream:  # headers and a first event go out now, however long the queue
        frames = _sse_frames(stream, position, settings.sse_heartbeat_s)
        return StreamingResponse(frames, media_type="text/event-stream", headers=SSE_HEADERS)
    answer = await collect(stream, request)
    return AnswerResponse(
        answer=answer.text,
        citations=answer.citations,
        stats=answer.stats,
        mode="quote" if answer.quote is not None else "direct",
        quote=answer.quote,
        answers=answer.answers,
    )
