"""Run one HTTP request through an ASGI app in this process, its response as a stream of parts.

A reader replica answers the ingress's requests with the single-machine FastAPI app itself
(server/api/app.py), so every route, error and stream behaves as it does on one machine. The first part
is ``{"status", "headers"}``, then the body's chunks (bytes) as the app sends them. Closing the stream
early (the client hung up) tells the app ``http.disconnect``, which cancels a question wherever it is.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

_DONE = object()
WIND_DOWN_S = 5.0  # how long a closed request's app task may take to finish before it is cancelled


@dataclass(frozen=True, slots=True)
class ProxiedRequest:
    """What the ingress forwards: the request as received, body read in full (the guard bounded it)."""

    method: str
    path: str
    query: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""


async def call(app, req: ProxiedRequest) -> AsyncIterator[dict | bytes]:
    """``req`` through ``app``: yields ``{"status", "headers"}``, then the body's chunks."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": req.method,
        "scheme": "http",
        "path": req.path,
        "raw_path": req.path.encode(),
        "query_string": req.query,
        "root_path": "",
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in req.headers],
        "client": ("127.0.0.1", 0),
        "server": ("127.0.0.1", 80),
    }
    sent: asyncio.Queue = asyncio.Queue()
    hung_up = asyncio.Event()
    body_given = False

    async def receive() -> dict:
        nonlocal body_given
        if not body_given:
            body_given = True
            return {"type": "http.request", "body": req.body, "more_body": False}
        await hung_up.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        await sent.put(message)

    task = asyncio.create_task(app(scope, receive, send))
    task.add_done_callback(lambda _: sent.put_nowait(_DONE))
    try:
        while (message := await sent.get()) is not _DONE:
            if message["type"] == "http.response.start":
                headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", [])]
                yield {"status": message["status"], "headers": headers}
            elif message["type"] == "http.response.body":
                if message.get("body"):
                    yield bytes(message["body"])
                if not message.get("more_body"):
                    break
        if task.done() and task.exception() is not None:
            raise task.exception()
    finally:
        hung_up.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), WIND_DOWN_S)
        except (TimeoutError, asyncio.CancelledError):
            task.cancel()
        except Exception:  # the app's own failure was reported above, or the response already went out
            pass
