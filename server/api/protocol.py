"""uvicorn's h11 protocol with a time limit on request headers.

uvicorn times out only idle keep-alive connections, and only until their first byte: a client that
sends part of a request line and then nothing holds its connection (and a task) forever, so a few
hundred such clients exhaust the server. Here a connection must deliver a request's complete headers
within DOCQA_HEADER_TIMEOUT_S of opening, or of its previous response; otherwise it gets a 408 and is
closed. (The size of the headers is bounded by uvicorn's h11_max_incomplete_event_size; the body's
timeout and size are server/api/guard.py's.)
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

_TIMEOUT_RESPONSE = b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"


def with_header_timeout(seconds: float) -> type[H11Protocol]:
    """An H11Protocol class (uvicorn.Config's ``http``) that closes connections slower than ``seconds``
    to send a request's headers."""

    class HeaderTimeoutProtocol(H11Protocol):
        header_timeout_s = seconds

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            self._header_timer: asyncio.TimerHandle | None = None
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:  # a whole request line and headers are in
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()  # the next request's headers get the same time

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._expire)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _expire(self) -> None:
            self._header_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.write(_TIMEOUT_RESPONSE)
                self.transport.close()

    return HeaderTimeoutProtocol
