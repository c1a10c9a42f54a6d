"""A real docqa server process (``python -m server``), for the tests that need sockets, signals or RSS and
for the benchmarks that compare checkouts."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from server.tools.candidate import stop_process

ROOT = Path(__file__).resolve().parent.parent
#: Base URL of in-process TestClients: a loopback Host, which the server answers to (server/api/guard.py).
LOCAL = "http://127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Live:
    """``python -m server`` from ``root`` (default: this checkout) on a free port."""

    def __init__(self, data_dir: Path, model: Path, root: Path = ROOT, **env: str | None) -> None:
        self.root = root
        self.port = free_port()
        # ``env`` overrides them. No answer history unless asked for: its drafts change a repeated
        # question's verify row counts, and so on a quantized model possibly its text (docs/internals.md,
        # Lossless), which tests that compare repeated answers must not meet by chance.
        # No start-up self-test either: it loads the model in a child process and decodes once per new
        # data directory, a model process more per server; tests/server/engine/test_selftest.py tests
        # it, and tests/server/api/test_serve.py starts a server with it.
        defaults = {
            "DOCQA_N_CTX": "8192", "DOCQA_N_THREADS": "2", "DOCQA_ANSWER_HISTORY": "false", "DOCQA_SELFTEST": "false",
        }  # fmt: skip
        self.env = {
            **os.environ,
            **defaults,
            "DOCQA_DATA_DIR": str(data_dir),
            "DOCQA_MODEL_PATH": str(model),
            "DOCQA_PORT": str(self.port),
            **env,
        }
        for name in [k for k, v in env.items() if v is None]:  # ``NAME=None``: not set for this server
            del self.env[name]
        self.log = data_dir.with_suffix(".log")
        self.argv = [sys.executable, "-m", "server"]  # how the server is started (tests may start it otherwise)
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 120) -> Live:
        self.proc = subprocess.Popen(
            self.argv,
            cwd=self.root,
            env=self.env,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.get("/health")[1].get("status") == "ok":
                    return self
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log.read_text()[-2000:]}")
            time.sleep(0.2)
        self.stop()  # leave no server behind: the caller never gets it to stop
        raise TimeoutError(f"server did not start within {timeout:.0f} s: {self.log.read_text()[-2000:]}")

    def stop(self, sig: int = signal.SIGINT) -> None:
        if self.proc is not None:
            stop_process(self.proc, sig)
            self.proc = None

    def conn(self, timeout: float = 120) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def get(self, path: str) -> tuple[int, dict]:
        c = self.conn(10)
        c.request("GET", path)
        r = c.getresponse()
        return r.status, json.loads(r.read() or b"{}")

    def post_json(self, path: str, body: dict, timeout: float = 300) -> tuple[int, dict]:
        c = self.conn(timeout)
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, json.loads(r.read() or b"{}")

    def upload(self, name: str, data: bytes) -> tuple[int, dict]:
        boundary = uuid.uuid4().hex
        body = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n\r\n'.encode()
            + data
            + f"\r\n--{boundary}--\r\n".encode()
        )
        c = self.conn()
        c.request("POST", "/v1/documents", body, {"Content-Type": f"multipart/form-data; boundary={boundary}"})
        r = c.getresponse()
        return r.status, json.loads(r.read())

    def ingest(self, name: str, data: bytes) -> str:
        """Upload and wait until ready; returns the document id."""
        status, doc = self.upload(name, data)
        assert status in (200, 202), doc
        assert self.wait_ready(doc["id"])["status"] == "ready"
        return doc["id"]

    def wait_ready(self, doc_id: str, timeout: float = 300) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            doc = self.get(f"/v1/documents/{doc_id}")[1]
            if doc["status"] != "ingesting":
                return doc
            time.sleep(0.1)
        raise TimeoutError(doc_id)

    def rss_kib(self) -> int:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def cpu_seconds(self) -> float:
        assert self.proc is not None
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
