"""Text extraction in a separate, bounded process.

A hostile file (a PDF flate bomb, a ZIP bomb in a DOCX or EPUB, a deep recursion, a page-tree
cycle) must cost the server at most a 4xx: extraction runs in a spawned worker process with an
address-space limit (RLIMIT_AS) and a wall-clock timeout. On a timeout or a crash the worker is
killed and replaced; the server process never holds the inflated data.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import threading
from concurrent.futures.process import BrokenProcessPool

from ingest.errors import UnreadableDocument, UnreadablePdf
from ingest.extract import ExtractedText, extract
from ingest.normalize import KNOWN_RULES, TEXT_RULES


def _init_worker(max_bytes: int) -> None:
    """Runs in the worker: cap its address space, and have the kernel kill it if the server dies
    (SIGKILL included), so no orphaned worker outlives a crashed server (Linux prctl)."""
    import ctypes
    import resource
    import signal
    import sys

    resource.setrlimit(resource.RLIMIT_AS, (max_bytes, max_bytes))
    # Ctrl-C in a terminal signals the whole process group: the server shuts the pool down itself,
    # so the worker ignores SIGINT instead of dying with a KeyboardInterrupt traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _unreadable(data: bytes) -> type[UnreadableDocument]:
    """UnreadablePdf for a PDF (its HTTP error type says so), UnreadableDocument for the rest."""
    return UnreadablePdf if b"%PDF-" in data[:1024] else UnreadableDocument


def _extract_in_worker(data: bytes, password: str | None, rules: int) -> ExtractedText:
    try:
        return extract(data, password, rules)
    except MemoryError as exc:
        raise _unreadable(data)(
            "the document needs more memory to extract than the limit allows (a decompression bomb?); "
            "upload a smaller or repaired file"
        ) from exc
    except RecursionError as exc:
        raise _unreadable(data)(
            "the document's structure is nested too deeply to read; repair or re-export it"
        ) from exc


class ExtractionWorker:
    """One spawned worker process at a time; thread-safe. ``rules``: the text rules version it
    extracts with (ingest/normalize.py)."""

    def __init__(self, timeout_s: float, memory_bytes: int, rules: int = TEXT_RULES) -> None:
        if rules not in KNOWN_RULES:
            raise ValueError(f"unknown text rules version {rules}; known: {KNOWN_RULES}")
        self.timeout_s, self.memory_bytes, self.rules = timeout_s, memory_bytes, rules
        self._lock = threading.Lock()
        self._pool: cf.ProcessPoolExecutor | None = None

    def _executor(self) -> cf.ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = cf.ProcessPoolExecutor(
                    max_workers=1,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_init_worker,
                    initargs=(self.memory_bytes,),
                )
            return self._pool

    def _discard(self, pool: cf.ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is pool:
                self._pool = None
        for proc in list(getattr(pool, "_processes", {}).values()):
            proc.kill()
        pool.shutdown(wait=False, cancel_futures=True)

    def extract(self, data: bytes, password: str | None = None) -> ExtractedText:
        """As :func:`ingest.extract.extract`, bounded; raises UnreadablePdf (for a PDF) or
        UnreadableDocument on a timeout or crash."""
        pool = self._executor()
        future = pool.submit(_extract_in_worker, data, password, self.rules)
        try:
            return future.result(timeout=self.timeout_s)
        except cf.TimeoutError as exc:
            self._discard(pool)
            raise _unreadable(data)(
                f"extracting the text took longer than {self.timeout_s:.0f} s (a decompression bomb or a "
                "page-tree loop?); repair or re-export the file"
            ) from exc
        except BrokenProcessPool as exc:
            self._discard(pool)
            raise _unreadable(data)(
                "the extraction worker ran out of memory or crashed on this file; repair or re-export it"
            ) from exc

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
