"""MCP over streamable HTTP at ``/mcp`` on the running server (DOCQA_MCP_HTTP, on by default): the tools
of server/api/mcp_tools.py, calling this app's service layer in-process (server/api/mcp_local.py: the
functions the routes call), so a tool does what the same HTTP request would, without a second pass
through the middleware and the request metrics.

The route sits behind the middleware of every route (server/api/app.py): the Host check, the API key
(``Authorization: Bearer``), the Origin check and the body limits (DOCQA_MAX_JSON_BYTES bounds a
request, so an ``ingest_file`` over HTTP carries at most that much base64). The SDK's own DNS-rebinding
check is off: docqa's Host check is the same, with DOCQA_ALLOWED_HOSTS. The SDK (about 1 s to import)
and its session manager start at the first request, not with the server.
"""

from __future__ import annotations

import asyncio

from starlette.types import Receive, Scope, Send

PATH = "/mcp"


class McpEndpoint:
    """The ASGI app of ``/mcp`` for ``app`` (whose services the tools call)."""

    def __init__(self, app) -> None:
        self.app = app
        self._asgi = None
        self._lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._asgi is None:
            await self._start()
        await self._asgi(scope, receive, send)

    async def _start(self) -> None:
        async with self._lock:
            if self._asgi is not None:
                return
            from mcp.server.transport_security import TransportSecuritySettings

            from server.api.mcp_local import LocalApi
            from server.api.mcp_tools import build

            server = build(LocalApi(self.app), read_paths=False)
            security = TransportSecuritySettings(enable_dns_rebinding_protection=False)  # ours: server/api/guard.py
            asgi = server.streamable_http_app(streamable_http_path=PATH, transport_security=security)
            started = asyncio.Event()

            async def run() -> None:
                async with server.session_manager.run():
                    started.set()
                    await self._stop.wait()

            self._task = asyncio.create_task(run())
            await started.wait()
            self._asgi = asgi

    async def close(self) -> None:
        """Stop the session manager (its open sessions end) at shutdown."""
        self._stop.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
