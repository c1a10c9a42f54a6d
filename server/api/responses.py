"""A queued answer as the response its request asks for, for every question route (a document's, a
collection's): Server-Sent Events (``queued`` at once, heartbeats until the first token, then the
answer's events), or the whole answer as JSON. The OpenAI chat route has its own encoding
(server/api/routes/openai.py) and shares :data:`SSE_HEADERS`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import asdict

from fastapi import Request
from fastapi.responses import StreamingResponse

from server.api.answering import collect, events
from server.api.schemas import AnswerRequest, AnswerResponse
from server.config.errors import payload
from server.config.settings import Settings
from server.engine.events import AnswerStream, Event, Failed, Heartbeat, Queued, Segment, Stats

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse(event: Event) -> str:
    """One event as an SSE frame: its kind, and its fields as JSON (a heartbeat is a comment)."""
    match event:
        case Heartbeat():
            return ": keep-alive\n\n"
        case Failed(error=error):
            data = payload(error)
        case Stats(values=values):
            data = values
        case Segment(where=where):
            data = where
        case _:
            data = asdict(event)
    return f"event: {event.kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


async def sse_frames(stream: AnswerStream, position: int, heartbeat_s: float) -> AsyncIterator[str]:
    """SSE frames: ``queued`` at once (with the jobs ahead), comment heartbeats until the first token,
    then the stream's events until done or error. Closing the generator (client gone) cancels it."""
    yield sse(Queued(position))
    async for event in events(stream, heartbeat_s):
        yield sse(event)


async def respond(
    stream: AnswerStream, position: int, req: AnswerRequest, request: Request | None, settings: Settings
) -> StreamingResponse | AnswerResponse:
    """A queued answer as the response ``req`` asks for: Server-Sent Events, or the whole answer as
    JSON (a document's question, server/api/routes/documents.py, and a collection's,
    server/api/routes/collections.py; ``request`` None: asked in-process, server/api/mcp_local.py)."""
    if req.stream:  # headers and a first event go out now, however long the queue
        frames = sse_frames(stream, position, settings.sse_heartbeat_s)
        return StreamingResponse(frames, media_type="text/event-stream", headers=SSE_HEADERS)
    answer = await collect(stream, request)
    return AnswerResponse(
        answer=answer.text,
        citations=answer.citations,
        stats=answer.stats,
        mode="quote" if answer.quote is not None else "direct",
        quote=answer.quote,
        answers=answer.answers,
        partial=answer.partial,
    )
