"""HEAD on every GET route, and a complete ``Allow`` on every 405 (RFC 9110 §9.3.2, §15.5.6).

FastAPI routes answer only the methods they declare, so uptime monitors and load balancers, which
send HEAD, got 405. This ASGI layer runs a HEAD request as a GET and drops the body. Starlette's 405
names the methods of the first route that matched the path only; the ``Allow`` header here lists
every method of every route on that path, HEAD included where GET is.
"""

from __future__ import annotations

from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HeadAsGet:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] != "HEAD":
            await self.app(scope, receive, _allow(scope, send))
            return

        async def headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                if not message.get("more_body", False):
                    await send({"type": "http.response.body", "body": b""})
                return
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, _allow(scope, headers_only))


METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def allowed_methods(scope: Scope) -> list[str]:
    """Every method some route of the app answers on this path (HEAD wherever GET is), found by
    asking each route whether it would fully match the request with that method."""
    routes = getattr(scope.get("app"), "routes", [])
    methods = {m for m in METHODS if any(r.matches({**scope, "method": m})[0] == Match.FULL for r in routes)}
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)


def _allow(scope: Scope, send: Send) -> Send:
    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] == 405:
            headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"allow"]
            headers.append((b"allow", ", ".join(allowed_methods(scope)).encode()))
            message = {**message, "headers": headers}
        await send(message)

    return wrapped
