"""The ``Host`` names this server answers to: the DNS-rebinding guard.

A page on ``rebind.attacker.example`` can make its name resolve to 127.0.0.1 after it has loaded;
the browser then sends the page's requests to this server as same-origin, with that name in the
``Host`` header. Bound to a loopback address, the server therefore answers only to loopback names
(``127.0.0.1``, ``localhost``, ``[::1]``) and to DOCQA_ALLOWED_HOSTS. Bound to another address, it
answers to DOCQA_ALLOWED_HOSTS when set, else to any name (it cannot know the names it is reached by).

The matching is Starlette's TrustedHostMiddleware (its ``*.example.org`` wildcards and IPv6 parsing);
its plain-text 400 is replaced by this API's JSON 403, ``host_not_allowed``.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from server.api.guard import refuse
from server.config.errors import HostNotAllowed
from server.config.settings import Settings

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
_PASSED = "docqa.host_allowed"


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
