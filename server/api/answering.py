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
from dataclasses import asdict, dataclass, field

from fastapi import Request

from server.api.schemas import (
    AnswerRequest,
    AnswerStatsPublic,
    CitationPublic,
    PartialPublic,
    QuotePublic,
    SegmentAnswerPublic,
)
from server.config.errors import (
    ClientGone,
    GenerationFailed,
    InvalidRequest,
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
    Partial,
    Quote,
    Stats,
    Token,
    read_so_far,
)
from spec import sources
from spec.limits import MAX_WINDOW
from spec.loop import AnswerParams
from spec.quote import QuoteParams
from spec.sampling import SamplingParams
from spec.support import lists_options


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
            quote=QuoteParams(threshold=settings.quote_support) if answer_mode(req, settings) == "quote" else None,
            reject_drafts=settings.debug_reject_drafts,
            accept_drafts=settings.debug_accept_drafts,
        )
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from exc


def answer_mode(req: AnswerRequest, settings: Settings) -> str:
    """``quote`` or ``direct``: the request's ``mode``, else the server's (``DOCQA_ANSWER_MODE``;
    ``auto`` picks per model, server/config/model.py ``answer_mode_for_model``), except that a question
    giving its own options is answered directly (spec/support.py ``lists_options``)."""
    if req.mode:
        return req.mode
    mode = settings.answer_mode_for_model()
    return "direct" if mode == "quote" and lists_options(req.question) else mode


@dataclass
class Collected:
    text: str
    citations: list[CitationPublic]
    stats: AnswerStatsPublic
    answers: list[SegmentAnswerPublic] | None = None
    quote: QuotePublic | None = None
    partial: PartialPublic | None = None  # answered from the part of the document read so far
    #: What was said, in order: ``("quote", text)`` for each quote event (a quote-first answer's quote, as
    #: a stream sends it), ``("token", text)`` for each piece of the answer; a non-streamed response built
    #: from these says what a stream of the same events said (server/api/routes/openai.py).
    said: list[tuple[str, str]] = field(default_factory=list)


async def collect(stream: AnswerStream, request: Request | None) -> Collected:
    """Read a queued answer's events to the end: the whole answer, its citations and stats; an engine
    error is raised. The job is cancelled if the client disconnects meanwhile, queued or not, and
    ClientGone (499, which nobody reads) is raised. ``request`` None (an MCP tool in-process,
    server/api/mcp_local.py): no disconnect is watched for; the job is cancelled when its caller is."""
    parts: list[str] = []
    citations: list[CitationPublic] = []
    stats: AnswerStatsPublic | None = None
    answers: list[SegmentAnswerPublic] | None = None
    quote: QuotePublic | None = None
    said: list[tuple[str, str]] = []
    partial: PartialPublic | None = None
    watcher = asyncio.create_task(cancel_on_disconnect(request, stream)) if request is not None else None
    try:
        while True:
            match await stream.events.get():
                case Partial() as read:
                    partial = PartialPublic(**asdict(read))
                    said.append(("partial", read_so_far(asdict(read))))
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
        if watcher is not None:
            watcher.cancel()
        stream.cancel()
    if stats is None:
        raise GenerationFailed("the engine finished without stats")
    text = "".join(parts)
    if quote is not None and quote.verified and not text.strip():  # the quote is the answer (quotes.py)
        text = quote.text
    return Collected(text, citations, stats, answers, quote, partial, said)


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
