"""Upload size limit enforced while the body streams in (before multipart parsing buffers it).

A declared Content-Length over the limit is refused before any body byte is read; a chunked body is
counted as it arrives and refused as soon as it passes the limit.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.errors import UploadTooLarge, payload, status_of

MULTIPART_SLACK = 64 * 1024  # boundaries and part headers around the file


class _TooLarge(Exception):
    pass


class UploadLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes + MULTIPART_SLACK
        self.message = (
            f"the upload is larger than the limit of {max_bytes} bytes; upload a smaller file or raise "
            "DOCQA_MAX_UPLOAD_BYTES"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        seen = 0
        exceeded = False
        started = False

        async def counting_receive() -> Message:
            nonlocal seen, exceeded
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    exceeded = True
                    raise _TooLarge
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if exceeded and not started:
                return  # the app's reaction to the cut-off body is replaced by our 413 below
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, guarded_send)
        except _TooLarge:
            pass
        if exceeded and not started:
            await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        error = UploadTooLarge(self.message)
        data = json.dumps(payload(error)).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status_of(error)[0],
                "headers": [(b"content-type", b"application/json"), (b"connection", b"close")],
            }
        )
        await send({"type": "http.response.body", "body": data})
