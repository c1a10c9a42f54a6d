"""A real PostgreSQL server for the tests: Debian's binaries, initdb in a temporary directory, a free
port on 127.0.0.1, trust authentication. initdb refuses to run as root, so as root the server runs
as the ``postgres`` user the Debian package creates (``runuser``)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def pg_bin() -> Path | None:
    """The newest installed PostgreSQL's bin directory, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Postgres:
    """A PostgreSQL server in a temporary directory on a free port, which a test may stop and start
    again (an outage) while a docqa server uses it."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="docqa-pg-"))
        self.prefix: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self.prefix = ["runuser", "-u", "postgres", "--"]
        self.data, self.port = self.root / "data", _free_port()
        subprocess.run(
            [
                *self.prefix,
                str(bin_dir / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
            ],
            check=True,
            capture_output=True,
        )
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _ctl(self, *args: str, check: bool = True) -> None:
        subprocess.run(
            [*self.prefix, str(self.bin_dir / "pg_ctl"), "-D", str(self.data), *args], check=check, capture_output=True
        )

    def start(self) -> Postgres:
        options = f"-k {self.root} -p {self.port} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._ctl("-o", options, "-l", str(self.root / "log"), "-w", "start")
        return self

    def stop(self) -> None:
        self._ctl("-m", "immediate", "stop", check=False)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@contextmanager
def postgres_server(bin_dir: Path) -> Iterator[str]:
    """Start a server, yield its URL (superuser ``postgres``, database ``postgres``), stop it."""
    server = Postgres(bin_dir)
    try:
        yield server.start().url
    finally:
        server.remove()


def fresh_database(server_url: str) -> str:
    """A new empty database on the server; its URL."""
    import psycopg

    name = f"t{time.time_ns()}"
    with psycopg.connect(server_url, autocommit=True) as db:
        db.execute(f"CREATE DATABASE {name}")
    return server_url.rsplit("/", 1)[0] + f"/{name}"
