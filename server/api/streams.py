"""Reading an answer stream (server/engine/events.py) from a route: streamed as it comes, with
heartbeats while the question waits for its first token, and the job cancelled as soon as its reader
goes away."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from starlette.requests import Request

from server.engine.events import FINAL, AnswerStream, Event, EventKind

POLL_S = 0.25  # how often a non-streaming request checks that its client is still there


async def events(stream: AnswerStream, heartbeat_s: float) -> AsyncIterator[Event]:
    """``stream``'s events up to DONE or ERROR, and a HEARTBEAT every ``heartbeat_s`` while no token
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
                    yield Event(EventKind.HEARTBEAT)
                    continue
            started = started or event.kind is EventKind.TOKEN
            yield event
            if event.kind in FINAL:
                return
    finally:
        stream.cancel()


async def cancel_on_disconnect(request: Request, stream: AnswerStream) -> None:
    """A non-streaming client that hangs up cancels its job (polled; Starlette gives no callback)."""
    while not stream.cancelled.is_set():
        if await request.is_disconnected():
            stream.cancel()
            return
        await asyncio.sleep(POLL_S)
