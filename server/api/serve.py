"""Serving: read settings from the environment, bind the port, run the start-up self-test, and serve
the app with uvicorn on 127.0.0.1:8000 by default (``python -m server``, ``docqa serve``, ``make serve``).

The address is logged ("serving on http://127.0.0.1:8000") only once the port accepts connections:
after the model is loaded and the verify costs are measured (a minute on a loaded 2-core machine),
when uvicorn listens; the line before the load says that it follows.

The port is bound before the self-test and the model load (:func:`bind`), so that a port in use is
one line naming the port and the settings that choose it, not a uvicorn traceback after a minute of
loading; the socket is then handed to uvicorn (``uvicorn.Server.run(sockets=[...])``): nothing can
take the port between the check and the serving.

uvicorn serves with h11 and a time limit on request headers (:func:`with_header_timeout`): it times
out only idle keep-alive connections, and only until their first byte, so a client that sends part of
a request line and then nothing held its connection (and a task) forever, and a few hundred such
clients exhausted the server. A connection must deliver a request's complete headers within
DOCQA_HEADER_TIMEOUT_S of opening, or of its previous response; otherwise it gets a 408 and is
closed. (The size of the headers is bounded by uvicorn's h11_max_incomplete_event_size; the body's
timeout and size are server/api/guard.py's.)

Start-up fails with one line and exit status 1, before the model is loaded, on invalid settings, an
unusable data directory, a port in use or a self-test crash. A shutdown asked for by a signal (Ctrl-C,
SIGTERM) that completes is a clean exit, status 0, with nothing printed after the log: not a
KeyboardInterrupt traceback, and not a death by the signal that ``make`` reports as "Interrupt" or
"Terminated"."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

import h11
import uvicorn
from pydantic import ValidationError
from uvicorn.protocols.http.h11_impl import H11Protocol

from server.config.settings import Settings, deprecated_in


def main() -> None:
    began = time.monotonic()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from ingest.errors import DataDirUnusable
    from server.api.app import create_app, open_store
    from server.config.memory import with_preset
    from server.config.tuned import SETTINGS_FILE, describe
    from server.engine import selftest

    try:
        settings = with_preset(Settings())
    except (ValidationError, ValueError) as exc:
        sys.exit(f"docqa: invalid settings (DOCQA_* environment variables, DATA_DIR/{SETTINGS_FILE}):\n{exc}")
    if tuned := describe(settings.data_dir, Settings.model_fields):
        logging.getLogger("docqa").info("%s", tuned)
    for line in deprecated_in():
        logging.getLogger("docqa").warning("%s", line)

    try:
        # A missing or read-only data directory (or an unreachable database): one line naming it.
        open_store(settings.data_dir, settings.database_url, sweep=False).close()
    except DataDirUnusable as exc:
        sys.exit(f"docqa: {exc}")
    if not settings.loopback and not settings.allowed_hosts:
        logging.getLogger("docqa").warning(
            "bound to %s without DOCQA_ALLOWED_HOSTS: any Host header is accepted (a DNS-rebinding page could "
            "reach this server); set DOCQA_ALLOWED_HOSTS to the names it is reached by",
            settings.host,
        )
    try:
        # Before the self-test and the model load: a port in use is known in a second, not a minute.
        sock = bind(settings.host, settings.port)
    except CannotListen as exc:
        sys.exit(str(exc))
    try:
        result = selftest.check(settings)
    except selftest.SelfTestFailed as exc:
        sys.exit(str(exc))
    settings = with_layout(settings, result, _reader_room(settings))
    from runtime.omp import described

    logging.getLogger("docqa").info("llama.cpp threads wait with %s (docs/tuning.md)", described())
    layout = f"; weight layout: {result.layout.note}" if result.layout is not None else ""
    logging.getLogger("docqa").info(
        "self-test %s%s; loading the model (its address is logged once it accepts connections)",
        result.status,
        layout,
    )
    app = create_app(settings, result)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level="info",
        http=with_header_timeout(settings.header_timeout_s),
        # Connections still open this long after SIGTERM (a reader that stopped reading) are closed.
        timeout_graceful_shutdown=settings.shutdown_timeout_s + GRACE_S,
    )
    GracefulServer(config, app, address(settings.host, settings.port), began).run(sockets=[sock])


Room = Callable[[], "tuple[int, int] | None"]  # (the reader's bytes, the bytes available), or None: not known


def with_layout(settings: Settings, result, reader_room: Room = lambda: None) -> Settings:
    """``settings`` with the self-test's layout (server/engine/selftest.py ``SelfTest``, now or cached)
    where ``DOCQA_CPU_REPACK`` is auto: off after a fallback or where the plain weights won, pair where
    they read faster and answer slower (server/engine/layout.py), unless the reader would take more
    than half of the memory available (``reader_room()``: (the reader's bytes, the bytes available),
    None: not known); else as they are. Flash attention off where it was measured slower and
    ``DOCQA_FLASH_ATTN`` is auto (server/engine/layout.py ``choose_attention``); a document saved with it
    on is then prefilled again at its first question (ingest/manifest.py ``SnapshotStale``)."""
    if settings.flash_attn == "auto" and result.layout is not None and result.layout.flash_attn == "off":
        settings = settings.model_copy(update={"flash_attn": "off"})  # on is what auto gives a CPU already
    if settings.cpu_repack != "auto":
        return settings
    if result.extra_bufts is False:
        return settings.model_copy(update={"cpu_repack": "off"})
    if result.layout is None or not result.layout.pair:
        return settings
    if (room := reader_room()) is not None and room[0] > room[1] / 2:
        logging.getLogger("docqa").warning(
            "the reader of plain weights would read faster but needs %.1f GiB, more than half of the %.1f GiB "
            "available: reading with the answering weights (DOCQA_CPU_REPACK=pair forces it)",
            room[0] / 2**30,
            room[1] / 2**30,
        )
        return settings
    return settings.model_copy(update={"cpu_repack": "pair"})


def _reader_room(settings: Settings) -> Room:
    """What the reader of ``settings`` would take, and the memory available now, in bytes; None where
    either is not known (the model file cannot be found: the engine's load says why)."""

    def room() -> tuple[int, int] | None:
        from runtime.models import ModelUnavailable
        from runtime.models import model_path as embedded_path
        from runtime.system import memory_available
        from server.config.memory import reader_cost

        available = memory_available()
        try:
            path = Path(settings.model_path or embedded_path(settings.model, settings.data_dir))
            need = sum(reader_cost(settings, path))
        except (ModelUnavailable, OSError, ValueError):
            return None
        return None if available is None else (need, available)

    return room


def address(host: str, port: int) -> str:
    """The page's address: ``http://127.0.0.1:8000``, ``http://[::1]:8000``."""
    plain = host.strip("[]")
    return f"http://[{plain}]:{port}" if ":" in plain else f"http://{plain}:{port}"


#: Seconds past DOCQA_SHUTDOWN_TIMEOUT_S for the last events of cut-off answers to reach their clients.
GRACE_S = 2.0


class GracefulServer(uvicorn.Server):
    """uvicorn, telling the engine when it shuts down (on a signal): it stops admitting, lets the answers
    in flight finish for DOCQA_SHUTDOWN_TIMEOUT_S, then ends them with an error event, while uvicorn
    waits for their connections to close (and closes the rest after GRACE_S more)."""

    def __init__(self, config: uvicorn.Config, app, url: str = "", began: float | None = None) -> None:
        super().__init__(config)
        self.app, self.url, self.began = app, url, began

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        if self.started:  # listening: a connection made now is accepted
            took = f" (started in {time.monotonic() - self.began:.0f} s)" if self.began is not None else ""
            logging.getLogger("docqa").info("serving on %s%s", self.url, took)

    async def _serve(self, sockets=None) -> None:
        await super()._serve(sockets)
        # uvicorn raises the signal that asked for the shutdown again once it is done, so that the
        # process dies by it (a KeyboardInterrupt traceback, make's "Interrupt" / "Terminated"). The
        # shutdown was graceful: exit normally instead.
        self._captured_signals.clear()

    # uvicorn's handle_exit, the signal handler, only sets flags, and so must anything added to it: a
    # handler runs between two bytecodes of the main thread, which may hold a lock at that moment (the
    # engine's job queue inside a put, or a first signal's handler inside its own). Telling the engine
    # there hung the server for good on two SIGTERMs in a row. It is told here, on the event loop, when
    # uvicorn's loop sees the flag (within its 0.1 s tick).
    async def shutdown(self, sockets=None) -> None:
        from server.api.deps import services_of

        services = services_of(self.app)
        if services is not None:
            services.engine.begin_shutdown(services.settings.shutdown_timeout_s)
        await super().shutdown(sockets)


#: Where the port comes from, named in the message (README "Port and start-up").
PORT_SETTINGS = "DOCQA_PORT=..., `docqa serve --port ...` or `make serve PORT=...`"
HOST_SETTINGS = "DOCQA_HOST=..., `docqa serve --host ...` or `make serve HOST=...`"


class CannotListen(Exception):
    """The address cannot be bound; the message is the one line the server exits with."""


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` (not yet listening: uvicorn calls listen), like uvicorn's
    own (``SO_REUSEADDR``, IPv6 for an address with a colon). Raises CannotListen: the port is in use,
    the address is not this machine's, or binding it is not allowed (a port below 1024 as a user)."""
    plain = host.strip("[]")
    family = socket.AF_INET6 if ":" in plain else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((plain, port))
    except OSError as exc:
        sock.close()
        raise CannotListen(_cannot_listen(exc, host, port)) from None
    return sock


def _cannot_listen(exc: OSError, host: str, port: int) -> str:
    where = f"{host}:{port}"
    if exc.errno == errno.EADDRINUSE:
        return (
            f"docqa: port {port} is already in use on {host} (another docqa, or another program); "
            f"stop it, or choose another port with {PORT_SETTINGS}"
        )
    if exc.errno == errno.EACCES:
        return (
            f"docqa: not allowed to listen on {where} ({exc.strerror}); choose a port above 1023 with {PORT_SETTINGS}"
        )
    if exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
        return (
            f"docqa: cannot listen on {where}: {host!r} is not an address of this machine "
            f"({exc.strerror or exc}); choose another with {HOST_SETTINGS}"
        )
    return f"docqa: cannot listen on {where} ({exc.strerror or exc}); check {HOST_SETTINGS} and {PORT_SETTINGS}"


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
