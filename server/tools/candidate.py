"""A docqa server process (``python -m server``) with one candidate's settings, for ``docqa tune``.

Each candidate gets a data directory of its own (its documents are prefilled with its KV types), and
its settings go where the real server would read tuned settings from: that directory's
``settings.json`` (server/config/tuned.py), below the environment. The ``DOCQA_*`` variables of the
candidate's own keys are removed from its environment, so the environment of ``docqa tune`` cannot
hide the setting being measured.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from server.config.tuned import settings_path, write_tuned
from server.engine.traffic import LOG_FILE, TrafficRecord, read_log

ROOT = Path(__file__).resolve().parents[2]  # where `python -m server` finds this same code
#: Files of a data directory that hold per-machine measurements keyed by model, build and settings:
#: copied into a candidate's directory, so it does not measure again what the real server knows.
CACHES = ("selftest.json", "calibration.json")


class CandidateFailed(RuntimeError):
    """The candidate's server did not start, or stopped; the message ends with its log's last lines."""


def stop_process(proc: subprocess.Popen, sig: int = signal.SIGINT, timeout_s: float = 30) -> None:
    """Send ``sig`` (SIGINT: the server's graceful shutdown) and wait; SIGKILL after ``timeout_s``."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CandidateServer:
    """``python -m server`` in ``data_dir`` with ``settings`` (tunable settings) in its settings file.

    ``model``: the GGUF file; ``source_dir``: the real data directory, whose caches are copied.
    """

    def __init__(self, data_dir: Path, model: Path, settings: dict[str, Any], source_dir: Path) -> None:
        self.data_dir = data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        for name in CACHES:
            if (source_dir / name).is_file():
                shutil.copyfile(source_dir / name, data_dir / name)
        write_tuned(settings_path(data_dir), settings)
        self.port = _free_port()
        mine = {f"DOCQA_{name.upper()}" for name in settings}
        env = {k: v for k, v in os.environ.items() if k.upper() not in mine and k.upper() != "DOCQA_API_KEY"}
        env.update(
            DOCQA_DATA_DIR=str(data_dir),
            DOCQA_MODEL_PATH=str(model),
            DOCQA_HOST="127.0.0.1",
            DOCQA_PORT=str(self.port),
            DOCQA_TRAFFIC_LOG="true",  # the replayed concurrency is read back from it
        )
        self.env = env
        self.log_path = data_dir / "server.log"
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float) -> CandidateServer:
        """Start the process and wait until /health says ok; raise CandidateFailed otherwise."""
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "server"], cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/health", timeout=5).json().get("status") == "ok":
                    return self
            except (httpx.HTTPError, ValueError):
                pass
            if self.proc.poll() is not None:
                raise CandidateFailed(f"the server exited with {self.proc.returncode}:\n{self.log_tail()}")
            time.sleep(0.2)
        self.stop()
        raise CandidateFailed(f"the server was not ready within {timeout_s:.0f} s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None

    def traffic(self) -> list[TrafficRecord]:
        """What this server logged about the answers it gave (its own traffic log)."""
        return read_log(self.data_dir / LOG_FILE)

    def log_tail(self, n_lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n_lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> CandidateServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
