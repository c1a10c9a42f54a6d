"""The fault loop's laboratory: a real server process (testkit/live.py, the embedded Gemma) whose data
directory is a small tmpfs that outlives it, optionally on a PostgreSQL store that can be stopped, and
the faults applied to it (issue 37).

The tmpfs is mounted by a holder process in a mount namespace of its own (tests/smallfs.py needs
root, as CI runs); each server start joins that namespace with ``nsenter``, so a killed server's files
are there for the next one, and the test reads them through ``/proc/<holder>/root``.

Faults besides the kills: a full disk (the tmpfs filled to a few hundred KiB free, emptied again before
the restart), a store outage (PostgreSQL stopped for 0.5-2 s, or until the restart), and a slow disk:
the server stopped and continued every 20-40 ms while it works (SIGSTOP/SIGCONT), which stretches
every write and rename as a stalling disk does (a device-mapper delay needs a block device that a
tmpfs in a container lacks; this is the honest stand-in, named as such in bench/results/faults.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from runtime.model import model_fingerprint
from server.config.memory import context_config
from server.config.settings import Settings
from server.tools.candidate import stop_process
from testkit.live import Live
from tests import smallfs

MIB = 1024**2
#: The longest a start may take before it counts as "did not start again": a start that measures verify
#: costs again (the stored ones no longer agree with a one-row decode, as under a changing load) took
#: 183-198 s on 2 cores at load average 9 from other work, past the 180 s this was.
START_S = 420
COSTS = re.compile(r"verify cost per step: ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms \(windows 0/1/4/16\)")


class Lab:
    """A data directory on a ``size``-byte tmpfs, servers started on it one after another."""

    def __init__(self, root: Path, model: Path, size: int, postgres=None, **env: str) -> None:
        smallfs.require()
        self.mnt = root / "mnt"
        self.mnt.mkdir(parents=True, exist_ok=True)
        self.holder = subprocess.Popen(smallfs.command(size, self.mnt, ["sleep", "infinity"]))
        self.view = smallfs.inside(self.holder.pid, self.mnt)
        deadline = time.monotonic() + 10
        while not (self.view.is_dir() and shutil.disk_usage(self.view).total <= 2 * size):
            assert time.monotonic() < deadline and self.holder.poll() is None, "the tmpfs was not mounted"
            time.sleep(0.02)
        (self.view / "data").mkdir(exist_ok=True)
        self.data = self.view / "data"  # as the test sees it
        self.model, self.postgres, self.env = model, postgres, env
        if postgres is not None:
            self.env["DOCQA_DATABASE_URL"] = postgres.url
        self.calibration = root / "calibration.json"
        self.env["DOCQA_CALIBRATION_FILE"] = str(self.calibration)
        self.server: Live | None = None
        self.starts = 0

    def start(self) -> Live:
        server = Live(self.mnt / "data", self.model, **self.env)
        # --wdns: entering a mount namespace moves the working directory to its root, and `python -m server`
        # from "/" imported the installed package, not this checkout (a worktree tested its main's code).
        server.argv = [
            "nsenter", f"--mount=/proc/{self.holder.pid}/ns/mnt", f"--wdns={server.root}", "--",
            sys.executable, "-m", "server",
        ]  # fmt: skip
        self.server = server.start(timeout=START_S)
        self.starts += 1
        if self.starts == 1 and not self.calibration.is_file():
            self._keep_calibration()
        return self.server

    def _keep_calibration(self) -> None:
        """Store the verify costs the first start measured, also when it measured them under load (the
        server keeps those for its run only): every later start reuses them instead of measuring
        again (~10 s on a loaded machine). They only price draft windows, and in invariant mode an
        answer does not depend on its window."""
        found = COSTS.search(self.server.log.read_text(errors="replace"))
        if found is None:
            return
        known = dict(zip((0, 1, 4, 16), (float(v) / 1000 for v in found.groups()), strict=True))
        points = sorted(known)
        verify = []
        for k in range(17):  # piecewise linear between the logged windows
            lo = max(p for p in points if p <= k)
            hi = min(p for p in points if p >= k)
            verify.append(known[lo] if lo == hi else known[lo] + (known[hi] - known[lo]) * (k - lo) / (hi - lo))
        fields = {k[6:].lower(): v for k, v in self.server.env.items() if k.startswith("DOCQA_") and k[6:].isupper()}
        settings = Settings(**{k: v for k, v in fields.items() if k in Settings.model_fields})
        cfg = context_config(settings, False)
        key = "/".join(
            map(str, (model_fingerprint(self.model), cfg.n_threads, cfg.type_k, cfg.type_v, cfg.flash_attn, "-"))
        )
        entry = {"verify": verify, "drafts": {}, "measured_at": time.time()}
        self.calibration.write_text(json.dumps({key: entry}))

    def kill(self, sig: int) -> None:
        """``sig`` to the server (SIGKILL, or SIGTERM: its graceful shutdown), SIGKILL after 20 s."""
        if self.server is not None and self.server.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.server.proc.pid, signal.SIGCONT)  # a slow-disk stall must not outlast it
            stop_process(self.server.proc, sig, timeout_s=20)
            self.server.proc = None

    def log_tail(self, n: int = 3000) -> str:
        return self.server.log.read_text(errors="replace")[-n:] if self.server is not None else ""

    def close(self) -> None:
        self.kill(signal.SIGKILL)
        self.holder.kill()
        self.holder.wait()


class Fault:
    """A storage fault applied from :meth:`begin` until :meth:`end` (after the kill, before the restart)."""

    def __init__(self, kind: str, lab: Lab, rng: random.Random) -> None:
        self.kind, self.lab, self.rng = kind, lab, rng
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._filler: Path | None = None

    def begin(self) -> None:
        if self.kind == "full_disk":
            self._filler = smallfs.fill(self.lab.view, leave=self.rng.randrange(64 * 1024, 2 * MIB))
        elif self.kind == "slow_disk":
            self._thread = threading.Thread(target=self._stall, args=(self.lab.server.proc.pid,), daemon=True)
            self._thread.start()
        elif self.kind == "store_outage":
            delay, length = self.rng.uniform(0, 1.5), self.rng.uniform(0.5, 2.0)
            self._thread = threading.Thread(target=self._outage, args=(delay, length), daemon=True)
            self._thread.start()

    def end(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        if self._filler is not None:
            self._filler.unlink(missing_ok=True)
        if self.kind == "store_outage":
            with contextlib.suppress(subprocess.CalledProcessError):  # it runs already
                self.lab.postgres.start()

    def _stall(self, pid: int) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                time.sleep(self.rng.uniform(0.02, 0.04))
                os.kill(pid, signal.SIGCONT)
            time.sleep(self.rng.uniform(0.02, 0.04))

    def _outage(self, delay: float, length: float) -> None:
        if self._stop.wait(delay):
            return
        self.lab.postgres.stop()
        self._stop.wait(length)
        if not self._stop.is_set():
            with contextlib.suppress(subprocess.CalledProcessError):
                self.lab.postgres.start()
