"""Text extraction in a separate, bounded process.

A hostile file (a PDF flate bomb, a ZIP bomb in a DOCX or EPUB, a deep recursion, a page-tree
cycle) must cost the server at most a 4xx: extraction runs in a spawned worker process with an
address-space limit (RLIMIT_AS) and a wall-clock timeout. On a timeout or a crash the worker is
killed and replaced; the server process never holds the inflated data. Several files are read at
once, each in a worker of its own, so one slow or hostile file never fails another.

Pages read by OCR (ingest/ocr.py, ``ocr``) report their progress on the worker's progress channel
(ingest/worker_process.py): the caller's ``progress`` callback hears ``(done, total)`` pages, and each
page read gives the time limit another ``ocr.page_timeout_s``, so a long scan is read to its end
while a hung page is still stopped.

The worker also cuts the part of an upload that was asked for (ingest/cut.py) and returns at most
``max_chars`` characters of it: more than the token budget can hold whatever they are, so a 60 MB
text costs the server the budget's worth of text, not 60 MB more (ingest/budget.py).

Admission (issue 27): at most ``workers + queue`` uploads are admitted at once, extracting or
waiting, and at most ``max_waiting_bytes`` of their bytes (one upload is always admitted when none
is); any beyond get ExtractorBusy (503 + Retry-After) at once. The async API (:meth:`slot`,
:meth:`extract_async`) waits on a thread pool of the worker's own, ``workers`` threads, so
extraction never occupies asyncio's default pool, where it used to starve ``/text``, questions and
other uploads (and kept the count below the limit, so nothing was ever refused). :meth:`slot` is
taken *before* the body is read (with the Content-Length), so a refused upload costs no memory, and
the bytes held by admitted uploads are bounded by the budget.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from types import TracebackType

from ingest import formats
from ingest.cut import Cut
from ingest.errors import ExtractorBusy
from ingest.extract import ExtractedText
from ingest.normalize import KNOWN_RULES, TEXT_RULES
from ingest.ocr import OcrSettings
from ingest.worker_process import Worker, extract_in_worker, unreadable

Progress = Callable[[int, int], None]  # (pages read by OCR so far, pages to read by OCR)


class ExtractionWorker:
    """``workers`` worker processes, each extracting one file at a time; ``queue`` more uploads may
    wait for one, and any beyond get ExtractorBusy (503). Each file is its own unit: its time limit
    counts from when a worker starts on it, and a worker killed for one file (a timeout, a crash) is
    replaced without touching the others. Thread-safe. ``rules``: the text rules version it extracts
    with (ingest/normalize.py); ``ocr``: how PDF pages without a text layer are read (None: not)."""

    STARTUP_TIMEOUT_S = 60.0  # for a new worker process to start and import the extractors

    RETRY_AFTER_S = 5
    POLL_S = 0.25  # how often the progress channel is read while a file is extracted

    def __init__(
        self,
        timeout_s: float,
        memory_bytes: int,
        rules: int = TEXT_RULES,
        workers: int = 2,
        queue: int = 8,
        max_waiting_bytes: int | None = None,
        ocr: OcrSettings | None = None,
    ) -> None:
        if rules not in KNOWN_RULES:
            raise ValueError(f"unknown text rules version {rules}; known: {KNOWN_RULES}")
        self.timeout_s, self.memory_bytes, self.rules, self.ocr = timeout_s, memory_bytes, rules, ocr
        self._jobs = itertools.count(1)
        self.workers, self.queue, self.max_waiting_bytes = workers, queue, max_waiting_bytes
        self._lock = threading.Lock()
        self._free = threading.Semaphore(workers)
        self._idle: list[Worker] = []
        self._pending = 0  # uploads admitted: extracting, waiting, or still being received
        self._pending_bytes = 0
        self._closed = False
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="docqa-extract")
        # Workers are started from one long-lived thread: the kernel kills a worker when the thread that
        # started it ends (PR_SET_PDEATHSIG follows threads), and request threads come and go.
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="docqa-extract-spawn")

    def slot(self, n_bytes: int = 0) -> Slot:
        """Admit one upload of ``n_bytes`` (its Content-Length; 0 when unknown) before its body is
        read; raises ExtractorBusy at once when ``workers + queue`` uploads are admitted already, or
        their bytes and these would pass ``max_waiting_bytes``. Extract with :meth:`Slot.extract`;
        the slot is given back when that extraction ends, or on leaving ``with``/``async with``."""
        self._admit(n_bytes)
        return Slot(self, n_bytes)

    async def extract_async(self, data: bytes, *args, **kwargs) -> ExtractedText:
        """:meth:`extract` for a coroutine (the same arguments, :meth:`Slot.extract`): admitted at once or
        ExtractorBusy, then awaited on the worker's own thread pool (never asyncio's default one)."""
        return await self.slot(len(data)).extract(data, *args, **kwargs)

    def extract(
        self,
        data: bytes,
        password: str | None = None,
        cut: Cut | None = None,
        max_chars: int | None = None,
        progress: Progress | None = None,
    ) -> ExtractedText:
        """As :func:`ingest.extract.extract` (with this worker's OCR settings), bounded, then the part
        ``cut`` of it (OutsideDocument when it lies outside), then at most its first ``max_chars``
        characters (``omitted_chars`` counts the rest), in the calling thread. ``progress(done,
        total)`` is called, in a thread of this worker's, as pages are read by OCR. Raises
        UnreadablePdf (for a PDF) or UnreadableDocument on a timeout or crash, ExtractorBusy when too
        many files wait."""
        self._admit(len(data))
        try:
            return self._extract_admitted(Upload(data, password, cut, max_chars, progress))
        finally:
            self._release(len(data))

    def _admit(self, n_bytes: int) -> None:
        with self._lock:
            full = self._pending >= self.workers + self.queue
            over = self.max_waiting_bytes is not None and self._pending_bytes + n_bytes > self.max_waiting_bytes
            if self._closed or full or (over and self._pending):
                why = f"{self._pending} uploads are being read already"
                if self._closed:
                    why = "the server is shutting down"
                elif over and not full:
                    why = f"the uploads being read hold {self._pending_bytes} bytes already"
                raise ExtractorBusy(f"{why}; upload again in a few seconds", retry_after=self.RETRY_AFTER_S)
            self._pending += 1
            self._pending_bytes += n_bytes

    def _release(self, n_bytes: int) -> None:
        with self._lock:
            self._pending -= 1
            self._pending_bytes -= n_bytes

    def _extract_admitted(self, upload: Upload) -> ExtractedText:
        data = upload.data
        try:
            with self._free:
                worker = self._take()
                try:
                    return self._run(worker, upload)
                except (cf.TimeoutError, BrokenProcessPool):
                    worker.kill()
                    worker = None
                    raise
                finally:
                    self._give_back(worker)
        except cf.TimeoutError as exc:
            raise unreadable(data)(
                f"extracting the text took longer than {self.timeout_s:.0f} s (a decompression bomb or a "
                "page-tree loop?); repair or re-export the file"
                + (f" (or a page OCR took longer than {self.ocr.page_timeout_s:.0f} s)" if self._reads_ocr else "")
            ) from exc
        except BrokenProcessPool as exc:
            raise unreadable(data)(
                "the extraction worker ran out of memory or crashed on this file; repair or re-export it"
            ) from exc

    def prestart(self) -> None:
        """Start the worker processes now, so the first uploads do not wait for them."""
        with self._lock:
            while len(self._idle) < self.workers and not self._closed:
                self._idle.append(self._new_worker())

    @property
    def _reads_ocr(self) -> bool:
        return self.ocr is not None and self.ocr.mode != "off"

    def _run(self, worker: Worker, upload: Upload) -> ExtractedText:
        """The extraction in ``worker``: its result, or cf.TimeoutError past the time limit, which
        each progress message from OCR moves to ``ocr.page_timeout_s`` (+ 5 s) after it."""
        worker.ready.result(timeout=self.STARTUP_TIMEOUT_S)  # not counted against the file
        number, progress, u = next(self._jobs), upload.progress, upload
        # The table as it is here and now (a worker imported its own copy when it started).
        job = worker.pool.submit(
            extract_in_worker, u.data, u.password, self.rules, u.cut, u.max_chars, self.ocr, number, formats.FORMATS
        )
        if not self._reads_ocr:
            return job.result(timeout=self.timeout_s)
        assert self.ocr is not None
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                result = job.result(timeout=max(0.0, min(self.POLL_S, deadline - time.monotonic())))
            except cf.TimeoutError:
                beats = worker.drain(number)
                if not beats and time.monotonic() >= deadline:
                    raise
                if beats:
                    deadline = max(deadline, time.monotonic() + self.ocr.page_timeout_s + 5.0)
                _tell(progress, beats)
                continue
            _tell(progress, worker.drain(number))  # those sent just before the result
            return result

    def _new_worker(self) -> Worker:
        return self._spawner.submit(Worker, self.memory_bytes).result()

    def _take(self) -> Worker:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.alive():
                    return worker
                worker.kill()  # died while idle (killed from outside): replaced below
        return self._new_worker()

    def _give_back(self, worker: Worker | None) -> None:
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
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._spawner.shutdown(wait=False)


@dataclass(frozen=True, slots=True)
class Upload:
    """One file to extract (:meth:`ExtractionWorker.extract`): its bytes, its password, the part asked
    for, at most ``max_chars`` characters of it, and who is told of OCR's progress."""

    data: bytes
    password: str | None = None
    cut: Cut | None = None
    max_chars: int | None = None
    progress: Progress | None = None


def _tell(progress: Progress | None, beats: list[tuple[int, int]]) -> None:
    for done, total in beats if progress is not None else ():
        progress(done, total)


class Slot:
    """One admitted upload (:meth:`ExtractionWorker.slot`): ``n_bytes`` counted against the budget
    until its extraction ends (or it is released unused)."""

    def __init__(self, worker: ExtractionWorker, n_bytes: int) -> None:
        self._worker, self.n_bytes = worker, n_bytes
        self._held, self._submitted = True, False
        self._lock = threading.Lock()

    async def extract(
        self,
        data: bytes,
        password: str | None = None,
        cut: Cut | None = None,
        max_chars: int | None = None,
        progress: Progress | None = None,
    ) -> ExtractedText:
        """Extract ``data`` (as :meth:`ExtractionWorker.extract`) on the worker's thread pool. A
        cancelled caller cancels an extraction that has not started; one that has runs to its end
        (its worker process is busy until then) and keeps the slot until it does."""
        with self._lock:
            if not self._held or self._submitted:
                raise RuntimeError("a slot extracts one upload, once")
            self._submitted = True
        try:
            future = self._worker._pool.submit(
                self._worker._extract_admitted, Upload(data, password, cut, max_chars, progress)
            )
        except RuntimeError:  # the pool is shut down: the server is stopping
            self._give_back()
            raise ExtractorBusy("the server is shutting down; upload again shortly", retry_after=5) from None
        future.add_done_callback(lambda _: self._give_back())
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.cancel()
            raise

    def release(self) -> None:
        """Give the slot back unused (the body could not be read); no-op once it extracts."""
        with self._lock:
            if self._submitted:
                return
        self._give_back()

    def _give_back(self) -> None:
        with self._lock:
            if not self._held:
                return
            self._held = False
        self._worker._release(self.n_bytes)

    def __enter__(self) -> Slot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    async def __aenter__(self) -> Slot:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
