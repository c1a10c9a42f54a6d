"""The listening socket, bound before the self-test and the model load, so that a port in use is one
line naming the port and the settings that choose it, not a uvicorn traceback after a minute of
loading. The socket is then handed to uvicorn (``uvicorn.Server.run(sockets=[...])``): nothing can
take the port between the check and the serving.
"""

from __future__ import annotations

import errno
import socket

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
        raise CannotListen(_message(exc, host, port)) from None
    return sock


def _message(exc: OSError, host: str, port: int) -> str:
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
