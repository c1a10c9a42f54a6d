"""Answering a question, as both question routes do it (POST /v1/documents/{id}/answers and the
OpenAI chat route): the request's decoding parameters, the checks a document must pass, the question
tokenized off the event loop and checked against the context before it queues, the job (or, for a
segmented document, one job per chosen segment read as one stream), and its answer stream read back:
event by event with heartbeats while no token has come (a streamed response), or collected whole.
Whichever way, the job is cancelled as soon as its reader goes away.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import numpy as np
from fastapi import Request

from ingest.errors import DocumentFilesDamaged
from server.api import collection, refit, segmented
from server.api.schemas import AnswerRequest, AnswerStatsPublic, CitationPublic, QuotePublic, SegmentAnswerPublic
from server.config.errors import (
    ClientGone,
    DocumentFailed,
    DocumentIngesting,
    GenerationFailed,
    InvalidRequest,
    QuestionTooLong,
    damaged,
)
from server.config.settings import Settings
from server.engine.engine import Engine
from server.engine.events import (
    FINAL,
    Answers,
    AnswerStream,
    Citations,
    Done,
    Event,
    Failed,
    Heartbeat,
    Quote,
    Stats,
    Token,
)
from server.engine.jobs import AnswerJob
from spec import sources
from spec.limits import MAX_WINDOW
from spec.loop import AnswerParams
from spec.quote import QuoteConstraint, QuoteParams
from spec.sampling import SamplingParams
from store.collection_index import MemberDamaged
from store.docstore import FAILED, INGESTING, DocRecord, DocStore


def answer_params(req: AnswerRequest, settings: Settings, engine: Engine, stop_adds: bool = False) -> AnswerParams:
    """Request -> decoding parameters. verify16 wins over draft_tokens; neither = the server's choice.
    ``stop`` replaces the prompt layout's stop strings (the loaded model's), or with ``stop_adds`` (the
    OpenAI route: a client's stop adds to the end of the turn) comes after them; unset keeps them."""
    layout_stops = engine.layout.stops
    if stop_adds and req.stop is not None:
        req = req.model_copy(update={"stop": [*layout_stops, *req.stop]})
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
            stops=tuple(req.stop) if req.stop is not None else layout_stops,
            sources=sources.NAMES if req.draft_source in ("all", "both") else (req.draft_source,),
            quote=QuoteParams(threshold=settings.quote_support, answer_first=settings.quote_answer_first)
            if answer_mode(req, settings) == "quote"
            else None,
            reject_drafts=settings.debug_reject_drafts,
            accept_drafts=settings.debug_accept_drafts,
        )
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from exc


def answer_mode(req: AnswerRequest, settings: Settings) -> str:
    """``quote`` or ``direct``: the request's ``mode``, else the server's (``DOCQA_ANSWER_MODE``;
    ``auto`` picks per model, server/config/model.py ``answer_mode_for_model``)."""
    return req.mode or settings.answer_mode_for_model()


def check_answerable(doc: DocRecord, engine: Engine) -> None:
    """Raise a 409 naming the reason when ``doc`` cannot be asked about yet (or at all)."""
    if doc.status == INGESTING:
        pct = engine.progress.get(doc.id, 0.0) * 100
        raise DocumentIngesting(f"document {doc.id} is still being ingested ({pct:.0f}%); retry soon")
    if doc.status == FAILED:
        raise DocumentFailed(f"document {doc.id} failed to ingest: {doc.error}; upload it again")
    if (why := engine.unfit.get(doc.id)) is not None:  # read for a larger context (server/api/refit.py)
        raise refit.refuse(doc.id, why)


async def submit(
    engine: Engine,
    store: DocStore,
    settings: Settings,
    doc: DocRecord,
    question: str,
    params: AnswerParams,
    history: tuple[tuple[str, str], ...] = (),
) -> tuple[AnswerStream, int]:
    """Tokenize the question (off the event loop and the engine thread: tokenizer calls are read-only
    and thread-safe), refuse it with 413 if it cannot fit the context next to its document, and queue
    it: one job, or for a segmented document the jobs of the segments it ranks best for
    (server/api/segmented.py), read as one stream. Returns (stream, jobs waiting ahead of it)."""
    close = settings.segment_close_ratio
    try:
        planned, (suffix, n_constrained), earlier = await _tokenized(
            engine, question, history, params, lambda: segmented.plan(engine.repairs, doc, question, close, history)
        )
    except DocumentFilesDamaged as exc:  # its segment list or index, beyond repair
        raise damaged(exc, doc.id) from None
    if planned is None:
        _check_fits(engine, suffix, doc.tokens, "the document")
        loop = asyncio.get_running_loop()
        extra = {"history": history, "earlier": earlier, "n_constrained": n_constrained}
        job = AnswerJob(doc.id, question, params, loop, suffix, doc.tokens, **extra)
        return job, engine.submit_answer(job)

    def part(s: segmented.Source) -> str:
        return f"the part it is answered from (pages {s.where['pages'][0]}-{s.where['pages'][1]})"

    return _queue(engine, planned, part, suffix, n_constrained, earlier, question, params, history)


async def submit_collection(
    engine: Engine,
    store: DocStore,
    settings: Settings,
    collection_id: str,
    docs: list[DocRecord],
    question: str,
    params: AnswerParams,
    history: tuple[tuple[str, str], ...] = (),
) -> tuple[AnswerStream, int]:
    """:func:`submit` for a question to a collection whose documents are ``docs`` (all ready): they
    are ranked as one long document's segments (server/api/collection.py) and the jobs of the best
    one or two documents (or segments) are read as one stream, each checked against the context
    first. Returns (stream, jobs waiting ahead of it)."""
    close = settings.segment_close_ratio
    try:
        planned, (suffix, n_constrained), earlier = await _tokenized(
            engine,
            question,
            history,
            params,
            lambda: collection.plan(engine.repairs, collection_id, docs, question, close, history),
        )
    except MemberDamaged as exc:  # a document's text or segment list, beyond repair
        raise damaged(exc.error, exc.doc_id) from None

    def member(s: segmented.Source) -> str:
        return f"the document it is answered from ({s.where['label']})"

    return _queue(engine, planned, member, suffix, n_constrained, earlier, question, params, history)


async def _tokenized(engine: Engine, question: str, history, params: AnswerParams, plan):
    """(``plan()``, (the question's suffix, a quote-first answer's scaffolding after its quote), the
    earlier turns' token ids), each in a worker thread, at once."""
    return await asyncio.gather(
        asyncio.to_thread(plan),
        asyncio.to_thread(_suffix, engine, question, history, params),
        asyncio.to_thread(_earlier_turns, engine, history),
    )


def _suffix(engine: Engine, question: str, history, params: AnswerParams) -> tuple[np.ndarray, int]:
    """The question's suffix ids, and the most tokens a quote-first answer decodes before its answer:
    its quote, the judgment (the question and the passage again, ingest/prompt.py ``quote_judge``, and
    the reply) and the scaffolding (``quote_answer``)."""
    quote, layout, model = params.quote, engine.layout, engine.model
    suffix = layout.question_suffix(model, question, history, quote=quote is not None and not quote.answer_first)
    if quote is None:
        return suffix, 0
    scaffold = layout.quote_after(model) if quote.answer_first else layout.quote_answer(model, quote.judged)
    n = QuoteConstraint.MAX_LEAD + quote.max_tokens + 1 + len(scaffold)
    if quote.judged:  # the passage: a header row, the quote and up to 40 tokens of its sentence on each side
        passage = QuoteConstraint.MAX_HEADER + quote.max_tokens + 80
        n += len(layout.quote_judge(model, question, "")) + passage + 1
    return suffix, n


def _queue(
    engine: Engine, planned, what, suffix, n_constrained, earlier, question, params, history
) -> tuple[AnswerStream, int]:
    """Check each planned source against the context (``what(source)``: what the 413 calls it), then
    queue a job for each, read as one stream (server/api/segmented.py ``submit``)."""
    loop = asyncio.get_running_loop()
    for s in planned.sources:
        _check_fits(engine, suffix, s.n_tokens, what(s))
    extra = {"history": history, "earlier": earlier, "n_constrained": n_constrained}
    return segmented.submit(
        engine,
        planned,
        lambda s: AnswerJob(s.doc_id, question, params, loop, suffix, s.n_tokens, segment=s.segment, **extra),
    )


def _earlier_turns(engine: Engine, history: tuple[tuple[str, str], ...]) -> tuple[np.ndarray, ...]:
    """A conversation's earlier turns as token ids, each its question with the scaffolding an answer
    follows, then its answer: history for this request's answer (spec/history.py)."""
    layout, model = engine.layout, engine.model
    return tuple(
        np.concatenate(
            [layout.question_suffix(model, q), model.tokenize(layout.answer_lead + a.strip(), parse_special=False)]
        ).astype(np.int32)
        for q, a in history
        if a.strip()
    )


def _check_fits(engine: Engine, suffix: np.ndarray, n_prefix: int, what: str) -> None:
    """QuestionTooLong (413) unless the prefix, the suffix and the first answer token fit n_ctx."""
    n_ctx = engine.n_ctx
    if n_prefix + len(suffix) + 1 > n_ctx:
        raise QuestionTooLong(
            f"the question (with the conversation before it) is {len(suffix)} tokens; with {what} "
            f"({n_prefix} tokens) that exceeds the context of {n_ctx} tokens; ask a shorter question, "
            f"or start a new conversation"
        )


@dataclass
class Collected:
    text: str
    citations: list[CitationPublic]
    stats: AnswerStatsPublic
    answers: list[SegmentAnswerPublic] | None = None
    quote: QuotePublic | None = None
    #: What was said, in order: ``("quote", text)`` for each quote event (a quote-first answer's quote, as
    #: a stream sends it), ``("token", text)`` for each piece of the answer; a non-streamed response built
    #: from these says what a stream of the same events said (server/api/routes/openai.py).
    said: list[tuple[str, str]] = field(default_factory=list)


async def collect(stream: AnswerStream, request: Request) -> Collected:
    """Read a queued answer's events to the end: the whole answer, its citations and stats; an engine
    error is raised. The job is cancelled if the client disconnects meanwhile, queued or not, and
    ClientGone (499, which nobody reads) is raised."""
    parts: list[str] = []
    citations: list[CitationPublic] = []
    stats: AnswerStatsPublic | None = None
    answers: list[SegmentAnswerPublic] | None = None
    quote: QuotePublic | None = None
    said: list[tuple[str, str]] = []
    watcher = asyncio.create_task(cancel_on_disconnect(request, stream))
    try:
        while True:
            match await stream.events.get():
                case Quote(text=text):
                    said.append(("quote", text))
                case Token(text=text):
                    parts.append(text)
                    said.append(("token", text))
                case Citations(citations=cited, quote=quoted):
                    citations = [CitationPublic(**c) for c in cited]
                    quote = QuotePublic(**quoted) if quoted is not None else None
                case Answers(answers=each):
                    answers = [SegmentAnswerPublic(**a) for a in each]
                case Stats(values=values):
                    stats = AnswerStatsPublic(**values)
                case Failed(error=error):
                    raise error
                case Done():
                    break
    finally:
        watcher.cancel()
        stream.cancel()
    if stats is None:
        raise GenerationFailed("the engine finished without stats")
    return Collected("".join(parts), citations, stats, answers, quote, said)


POLL_S = 0.25  # how often a non-streaming request checks that its client is still there


async def events(stream: AnswerStream, heartbeat_s: float) -> AsyncIterator[Event]:
    """``stream``'s events up to Done or Failed, and a Heartbeat every ``heartbeat_s`` while no token
    has come yet (queued, or prefilling). Closing the iterator (the client went away) cancels the
    job, wherever it is: waiting, prefilling or decoding."""
    started = False
    try:
        while True:
            if started:
                event = await stream.events.get()
            else:
                try:
                    event = await asyncio.wait_for(stream.events.get(), heartbeat_s)
                except TimeoutError:
                    yield Heartbeat()
                    continue
            started = started or isinstance(event, Token | Quote)
            yield event
            if isinstance(event, FINAL):
                return
    finally:
        stream.cancel()


async def cancel_on_disconnect(request: Request, stream: AnswerStream) -> None:
    """A non-streaming client that hangs up cancels its job (polled; Starlette gives no callback), and
    ends its reader at once with ClientGone, wherever the job was: a job dropped from the queue sends
    no more events (its reader waited for ever, and held the server's shutdown), and a running one's
    last events are nobody's."""
    while not stream.cancelled.is_set():
        if await request.is_disconnected():
            stream.cancel()
            stream.events.put_nowait(Failed(ClientGone("the client hung up before its answer")))
            return
        await asyncio.sleep(POLL_S)
