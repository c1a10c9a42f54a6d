"""Reading an answer job's events from a route: streamed as they come, with heartbeats while the
question waits for its first token, and the job cancelled as soon as its reader goes away."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request

from server.jobs import AnswerJob

POLL_S = 0.25  # how often a non-streaming request checks that its client is still there


async def events(job: AnswerJob, heartbeat_s: float) -> AsyncIterator[tuple[str, Any]]:
    """``job``'s events up to ``done`` or ``error``, and ``("heartbeat", None)`` every ``heartbeat_s``
    while no token has come yet (queued, or prefilling). Closing the iterator (the client went away)
    cancels the job, wherever it is: waiting, prefilling or decoding."""
    started = False
    try:
        while True:
            if started:
                kind, data = await job.events.get()
            else:
                try:
                    kind, data = await asyncio.wait_for(job.events.get(), heartbeat_s)
                except TimeoutError:
                    yield "heartbeat", None
                    continue
            started = started or kind == "token"
            yield kind, data
            if kind in ("done", "error"):
                return
    finally:
        job.cancel()


async def cancel_on_disconnect(request: Request, job: AnswerJob) -> None:
    """A non-streaming client that hangs up cancels its job (polled; Starlette gives no callback)."""
    while not job.cancelled.is_set():
        if await request.is_disconnected():
            job.cancel()
            return
        await asyncio.sleep(POLL_S)
