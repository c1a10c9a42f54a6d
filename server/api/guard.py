"""What every request passes before routing and body parsing (pure ASGI): the Host check
(:class:`TrustedHosts`), then (:class:`Guard`) a request id, the Origin check, the API key, the body
size and the body read timeouts.

FastAPI reads and parses a body before a route's dependencies run, so a key checked there came
after an unauthenticated 57 MB JSON body had been parsed. Here nothing of the body is read until
the key, the ``Origin`` and a declared ``Content-Length`` have passed, so a refused request costs
O(1) memory; a body is then counted as it streams in (uploads up to DOCQA_MAX_UPLOAD_BYTES, every
other body up to DOCQA_MAX_JSON_BYTES) and a client that stops sending it for DOCQA_BODY_TIMEOUT_S,
or has not sent all of it DOCQA_BODY_DEADLINE_S after the app asked for its first part (a byte
trickled before each timeout kept a connection open for as long as it trickled), gets a 408. A
refusal closes the connection (``Connection: close``), so an unread body is never read and thrown
away.

* **Origin.** A page on another site can make a browser POST a form here without a CORS preflight
  (multipart, urlencoded and text/plain bodies need none). A state-changing request (POST, PUT,
  PATCH, DELETE) whose ``Origin`` is neither this server (the ``Host`` it was sent to) nor one of
  DOCQA_CORS_ORIGINS is refused (403); so is one a browser marks ``Sec-Fetch-Site: cross-site``.
  Clients that are not browsers send no ``Origin`` and pass.
* **API key.** With DOCQA_API_KEY, every path but the page (``/``, ``/static/``), ``/health`` and the
  formats it reads (``/v1/formats``) needs ``Authorization: Bearer <key>``: ``/v1``, ``/metrics``
  (unless DOCQA_PUBLIC_METRICS), ``/docs`` and ``/openapi.json``. CORS preflights (OPTIONS) carry no
  credentials and pass.
* **Request id.** Every response carries ``X-Request-ID``; a 500's body names it, and so does the
  log line with the trace (server/config/errors.py).
* **Host** (the DNS-rebinding guard). A page on ``rebind.attacker.example`` can make its name resolve
  to 127.0.0.1 after it has loaded; the browser then sends the page's requests to this server as
  same-origin, with that name in the ``Host`` header. Bound to a loopback address, the server
  therefore answers only to loopback names (``127.0.0.1``, ``localhost``, ``[::1]``) and to
  DOCQA_ALLOWED_HOSTS. Bound to another address, it answers to DOCQA_ALLOWED_HOSTS when set, else to
  any name (it cannot know the names it is reached by). The matching is Starlette's
  TrustedHostMiddleware (its ``*.example.org`` wildcards and IPv6 parsing); its plain-text 400 is
  replaced by this API's JSON 403, ``host_not_allowed``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
import uuid
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.api.handlers import REQUEST_ID
from server.config.errors import (
    ApiError,
    BodyTimeout,
    HostNotAllowed,
    OriginNotAllowed,
    Unauthorized,
    UploadTooLarge,
    payload,
    status_of,
)
from server.config.settings import Settings
from server.service.uploads import MULTIPART_SLACK

UPLOAD_PATHS = ("/v1/documents",)  # multipart uploads: DOCQA_MAX_UPLOAD_BYTES; other bodies: the JSON limit
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
PUBLIC_PATHS = frozenset({"/", "/health", "/v1/formats"})
PUBLIC_PREFIXES = ("/static/",)
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
_PASSED = "docqa.host_allowed"


class _Refused(Exception):
    """Raised out of the app's ``receive`` to stop it; the guard then answers with its error."""


class Guard:
    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.key = settings.api_key.encode() if settings.api_key else None
        self.public = PUBLIC_PATHS | ({"/metrics"} if settings.public_metrics else set())
        self.origins = {o.lower().rstrip("/") for o in settings.cors_origins}
        self.upload_limit = settings.max_upload_bytes
        self.json_limit = settings.max_json_bytes
        self.body_timeout_s = settings.body_timeout_s
        self.body_deadline_s = settings.body_deadline_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = scope[REQUEST_ID] = uuid.uuid4().hex[:16]
        send = _tagged(send, rid)
        headers = Headers(scope=scope)
        refusal = self._origin(scope, headers) or self._auth(scope, headers) or self._declared(scope, headers)
        if refusal is not None:
            await refuse(send, refusal)
            return
        await self._run(scope, receive, send)

    async def _run(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The app, with the body counted and timed as it streams in."""
        limit, what = self._limit(scope)
        seen, done, started = 0, False, False
        deadline: float | None = None  # monotonic: the whole body by then
        error: ApiError | None = None

        async def guarded_receive() -> Message:
            nonlocal seen, done, error, deadline
            if done:  # after the body: waiting for a disconnect has no time limit
                return await receive()
            now = time.monotonic()
            deadline = deadline or now + self.body_deadline_s
            last_chance = deadline - now <= self.body_timeout_s
            try:
                message = await asyncio.wait_for(receive(), max(0.0, min(self.body_timeout_s, deadline - now)))
            except TimeoutError:
                error = BodyTimeout(self._late(seen) if last_chance else self._stalled())
                raise _Refused from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                done = not message.get("more_body", False)
                if seen > limit:
                    error = _too_large(what, limit)
                    raise _Refused
            else:
                done = True
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if error is not None and not started:
                return  # the app's reaction to the cut-off body is replaced by our error below
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, guarded_receive, guarded_send)
        except _Refused:
            pass
        except Exception:
            if error is None:
                raise
        if error is not None and not started:
            await refuse(send, error)

    def _stalled(self) -> str:
        return (
            f"no part of the request body arrived for {self.body_timeout_s:.0f} s; send the whole body at once "
            "(DOCQA_BODY_TIMEOUT_S is the limit)"
        )

    def _late(self, seen: int) -> str:
        return (
            f"the request body did not arrive in {self.body_deadline_s:.0f} s ({seen} bytes came); send it faster, "
            "or raise DOCQA_BODY_DEADLINE_S for large uploads over slow links"
        )

    def _limit(self, scope: Scope) -> tuple[int, str]:
        if scope["method"] == "POST" and scope["path"].rstrip("/") in UPLOAD_PATHS:
            return self.upload_limit + MULTIPART_SLACK, "upload"
        return self.json_limit, "request body"

    def _declared(self, scope: Scope, headers: Headers) -> ApiError | None:
        """A Content-Length over the limit: refused before any body byte is read."""
        declared = headers.get("content-length", "")
        limit, what = self._limit(scope)
        return _too_large(what, limit) if declared.isdigit() and int(declared) > limit else None

    def _auth(self, scope: Scope, headers: Headers) -> ApiError | None:
        path = scope["path"]
        if self.key is None or scope["method"] == "OPTIONS" or path in self.public or path.startswith(PUBLIC_PREFIXES):
            return None
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self.key):
            return None
        return Unauthorized(
            "this server needs an API key: send `Authorization: Bearer <key>`", {"WWW-Authenticate": "Bearer"}
        )

    def _origin(self, scope: Scope, headers: Headers) -> ApiError | None:
        if scope["method"] not in STATE_CHANGING:
            return None
        origin = headers.get("origin")
        if origin is None:
            cross = headers.get("sec-fetch-site") == "cross-site"
            return OriginNotAllowed(_CROSS_SITE.format(origin="another site")) if cross else None
        own = headers.get("host", "").lower()
        if urlsplit(origin.lower()).netloc == own or origin.lower().rstrip("/") in self.origins:
            return None
        return OriginNotAllowed(_CROSS_SITE.format(origin=origin[:200]))


_CROSS_SITE = (
    "a request that changes documents, sent by a page on {origin}, is refused: this server takes them from its own "
    "page, from clients that are not browsers, and from the origins in DOCQA_CORS_ORIGINS (add it there to allow it)"
)


def _too_large(what: str, limit: int) -> UploadTooLarge:
    if what == "upload":
        return UploadTooLarge(
            f"the upload is larger than the limit of {limit - MULTIPART_SLACK} bytes; upload a smaller file, a part "
            "of it, or raise DOCQA_MAX_UPLOAD_BYTES"
        )
    return UploadTooLarge(
        f"the request body is larger than the limit of {limit} bytes for requests other than uploads; send less "
        "(a shorter conversation), or raise DOCQA_MAX_JSON_BYTES"
    )


def _tagged(send: Send, rid: str) -> Send:
    async def tagged(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", rid.encode())]}
        await send(message)

    return tagged


async def refuse(send: Send, error: ApiError) -> None:
    """Answer with ``error`` as JSON and close the connection (any unread body is never read)."""
    data = json.dumps(payload(error)).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(data)),
        (b"connection", b"close"),
    ]
    headers += [(k.lower().encode(), v.encode()) for k, v in error.headers.items()]
    await send({"type": "http.response.start", "status": status_of(error)[0], "headers": headers})
    await send({"type": "http.response.body", "body": data})


def allowed_hosts(settings: Settings) -> list[str]:
    """The Host names (without ports) the server answers to; ``["*"]``: any."""
    if settings.loopback:
        return [*LOOPBACK_HOSTS, *settings.allowed_hosts]
    return list(settings.allowed_hosts) or ["*"]


class TrustedHosts:
    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.hosts = allowed_hosts(settings)
        self.check = TrustedHostMiddleware(_mark, allowed_hosts=self.hosts, www_redirect=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or "*" in self.hosts:
            await self.app(scope, receive, send)
            return

        async def swallow(_message) -> None:  # Starlette's own refusal; ours follows
            pass

        await self.check(scope, receive, swallow)
        if scope.pop(_PASSED, False):
            await self.app(scope, receive, send)
            return
        host = Headers(scope=scope).get("host", "")[:200]
        await refuse(
            send,
            HostNotAllowed(
                f"this server does not answer to the host name {host!r} (a DNS-rebinding page?); it answers to "
                f"{', '.join(self.hosts)}: add a name to DOCQA_ALLOWED_HOSTS to serve it"
            ),
        )


async def _mark(scope: Scope, _receive: Receive, _send: Send) -> None:
    scope[_PASSED] = True
