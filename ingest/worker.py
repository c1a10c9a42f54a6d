"""Text extraction in a separate, bounded process.

A hostile file (a PDF flate bomb, a ZIP bomb in a DOCX or EPUB, a deep recursion, a page-tree
cycle) must cost the server at most a 4xx: extraction runs in a spawned worker process with an
address-space limit (RLIMIT_AS) and a wall-clock timeout. On a timeout or a crash the worker is
killed and replaced; the server process never holds the inflated data. Several files are read at
once, each in a worker of its own, so one slow or hostile file never fails another.

The worker also cuts the part of an upload that was asked for (ingest/cut.py) and returns at most
``max_chars`` characters of it: more than the token budget can hold whatever they are, so a 60 MB
text costs the server the budget's worth of text, not 60 MB more (ingest/budget.py).
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from ingest.cut import Cut, apply, keep_leading
from ingest.errors import DocumentError, ExtractorBusy, UnreadableDocument, UnreadablePdf
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


def _extract_in_worker(
    data: bytes, password: str | None, rules: int, cut: Cut | None, max_chars: int | None
) -> ExtractedText:
    try:
        extracted = extract(data, password, rules)
        if cut is not None:
            extracted = apply(extracted, cut)
        return extracted if max_chars is None else keep_leading(extracted, max_chars)
    except MemoryError as exc:
        raise _unreadable(data)(
            "the document needs more memory to extract than the limit allows (a decompression bomb?); "
            "upload a smaller or repaired file"
        ) from exc
    except RecursionError as exc:
        raise _unreadable(data)(
            "the document's structure is nested too deeply to read; repair or re-export it"
        ) from exc
    except DocumentError:
        raise
    except Exception as exc:  # extract() maps its readers' errors; this is the last line, for the rest
        raise _unreadable(data)(
            f"the document could not be read ({type(exc).__name__}: {exc}); repair or re-export it"
        ) from exc


def _warm() -> None:
    """Runs first in every new worker: the imports a real extraction needs, before its clock starts."""


class _Worker:
    """One worker process (a one-process pool), started at once and warmed up."""

    def __init__(self, memory_bytes: int) -> None:
        self.pool = cf.ProcessPoolExecutor(
            max_workers=1, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker,
            initargs=(memory_bytes,),
        )  # fmt: skip
        self.ready = self.pool.submit(_warm)

    def processes(self) -> list:
        return list((getattr(self.pool, "_processes", None) or {}).values())

    def alive(self) -> bool:
        return not self.ready.done() or (self.ready.exception() is None and all(p.is_alive() for p in self.processes()))

    def kill(self) -> None:
        for proc in self.processes():
            proc.kill()
        self.pool.shutdown(wait=False, cancel_futures=True)


class ExtractionWorker:
    """``workers`` worker processes, each extracting one file at a time; ``queue`` more uploads may
    wait for one, and any beyond get ExtractorBusy (503). Each file is its own unit: its time limit
    counts from when a worker starts on it, and a worker killed for one file (a timeout, a crash) is
    replaced without touching the others. Thread-safe. ``rules``: the text rules version it extracts
    with (ingest/normalize.py)."""

    STARTUP_TIMEOUT_S = 60.0  # for a new worker process to start and import the extractors

    def __init__(
        self, timeout_s: float, memory_bytes: int, rules: int = TEXT_RULES, workers: int = 2, queue: int = 8
    ) -> None:
        if rules not in KNOWN_RULES:
            raise ValueError(f"unknown text rules version {rules}; known: {KNOWN_RULES}")
        self.timeout_s, self.memory_bytes, self.rules = timeout_s, memory_bytes, rules
        self.workers, self.queue = workers, queue
        self._lock = threading.Lock()
        self._free = threading.Semaphore(workers)
        self._idle: list[_Worker] = []
        self._pending = 0  # files extracting or waiting
        self._closed = False
        # Workers are started from one long-lived thread: the kernel kills a worker when the thread that
        # started it ends (PR_SET_PDEATHSIG follows threads), and request threads come and go.
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="docqa-extract-spawn")

    def extract(
        self, data: bytes, password: str | None = None, cut: Cut | None = None, max_chars: int | None = None
    ) -> ExtractedText:
        """As :func:`ingest.extract.extract`, bounded, then the part ``cut`` of it (OutsideDocument when
        it lies outside), then at most its first ``max_chars`` characters (``omitted_chars`` counts the
        rest). Raises UnreadablePdf (for a PDF) or UnreadableDocument on a timeout or crash,
        ExtractorBusy when too many files wait."""
        with self._lock:
            if self._pending >= self.workers + self.queue:
                raise ExtractorBusy(
                    f"{self._pending} uploads are being read already; upload again in a few seconds", retry_after=5
                )
            self._pending += 1
        try:
            with self._free:
                worker = self._take()
                try:
                    return self._run(worker, data, password, cut, max_chars)
                except (cf.TimeoutError, BrokenProcessPool):
                    worker.kill()
                    worker = None
                    raise
                finally:
                    self._give_back(worker)
        except cf.TimeoutError as exc:
            raise _unreadable(data)(
                f"extracting the text took longer than {self.timeout_s:.0f} s (a decompression bomb or a "
                "page-tree loop?); repair or re-export the file"
            ) from exc
        except BrokenProcessPool as exc:
            raise _unreadable(data)(
                "the extraction worker ran out of memory or crashed on this file; repair or re-export it"
            ) from exc
        finally:
            with self._lock:
                self._pending -= 1

    def prestart(self) -> None:
        """Start the worker processes now, so the first uploads do not wait for them."""
        with self._lock:
            while len(self._idle) < self.workers and not self._closed:
                self._idle.append(self._new_worker())

    def _run(
        self, worker: _Worker, data: bytes, password: str | None, cut: Cut | None, max_chars: int | None
    ) -> ExtractedText:
        worker.ready.result(timeout=self.STARTUP_TIMEOUT_S)  # not counted against the file
        job = worker.pool.submit(_extract_in_worker, data, password, self.rules, cut, max_chars)
        return job.result(timeout=self.timeout_s)

    def _new_worker(self) -> _Worker:
        return self._spawner.submit(_Worker, self.memory_bytes).result()

    def _take(self) -> _Worker:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.alive():
                    return worker
                worker.kill()  # died while idle (killed from outside): replaced below
        return self._new_worker()

    def _give_back(self, worker: _Worker | None) -> None:
        with self._lock:
            if worker is not None and not self._closed:
                self._idle.append(worker)
                return
        if worker is not None:
            worker.kill()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.pool.shutdown(wait=False, cancel_futures=True)
        self._spawner.shutdown(wait=False)
