"""What runs in an extraction worker process (ingest/worker.py starts and bounds them): its
address-space limit and parent-death signal, the extraction itself with its last-line mapping of
errors to DocumentError, and the one-process pool that holds a worker.

Each worker has a progress channel: a queue the server process reads while it waits for the result
(:meth:`Worker.drain`). The extraction puts ``(job, done, total)`` on it for the pages it reads by OCR
(ingest/pdf.py), ``job`` being the number the server gave the extraction, so a late message of an
earlier extraction is told apart.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
from multiprocessing.queues import SimpleQueue

from ingest.cut import Cut, apply, keep_leading
from ingest.errors import DocumentError, UnreadableDocument, UnreadablePdf
from ingest.extract import ExtractedText, extract
from ingest.formats import Format
from ingest.ocr import OcrSettings
from ingest.pdf import OcrJob

_progress: SimpleQueue | None = None  # in a worker: its progress channel


def init_worker(max_bytes: int, progress: SimpleQueue | None = None) -> None:
    """Runs in the worker: cap its address space, and have the kernel kill it if the server dies
    (SIGKILL included), so no orphaned worker outlives a crashed server (Linux prctl)."""
    import ctypes
    import resource
    import signal
    import sys

    global _progress
    _progress = progress
    resource.setrlimit(resource.RLIMIT_AS, (max_bytes, max_bytes))
    # Ctrl-C in a terminal signals the whole process group: the server shuts the pool down itself,
    # so the worker ignores SIGINT instead of dying with a KeyboardInterrupt traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def unreadable(data: bytes) -> type[UnreadableDocument]:
    """UnreadablePdf for a PDF (its HTTP error type says so), UnreadableDocument for the rest."""
    return UnreadablePdf if b"%PDF-" in data[:1024] else UnreadableDocument


def ocr_job(settings: OcrSettings | None, cut: Cut | None, max_chars: int | None, job: int) -> OcrJob | None:
    """The OCR of one extraction: only the pages of a page cut, only as far as a character cut and
    ``max_chars`` reach, its progress on this worker's channel."""
    if settings is None or settings.mode == "off":
        return None
    pages, limit = None, max_chars
    if cut is not None and cut.labels is not None:  # printed labels: their pages are known once the PDF is read
        pass
    elif cut is not None and cut.unit == "pages":
        pages = (cut.start, cut.end)
    elif cut is not None:
        limit = cut.end if max_chars is None else min(cut.end, cut.start + max_chars)
    channel = _progress
    report = None if channel is None else lambda done, total: channel.put((job, done, total))
    return OcrJob(settings, pages, limit, report)


def extract_in_worker(
    data: bytes,
    password: str | None,
    rules: int,
    cut: Cut | None,
    max_chars: int | None,
    ocr: OcrSettings | None = None,
    job: int = 0,
    formats: tuple[Format, ...] | None = None,
) -> ExtractedText:
    """:func:`ingest.extract.extract` in the worker, by the ``formats`` the server sent (its table: None,
    ingest/formats.py FORMATS), then the part ``cut`` and the first ``max_chars``."""
    try:
        extracted = extract(data, password, rules, ocr_job(ocr, cut, max_chars, job), formats)
        if cut is not None:
            extracted = apply(extracted, cut)
        return extracted if max_chars is None else keep_leading(extracted, max_chars)
    except MemoryError as exc:
        raise unreadable(data)(
            "the document needs more memory to extract than the limit allows (a decompression bomb?); "
            "upload a smaller or repaired file"
        ) from exc
    except RecursionError as exc:
        raise unreadable(data)("the document's structure is nested too deeply to read; repair or re-export it") from exc
    except DocumentError:
        raise
    except Exception as exc:  # extract() maps its readers' errors; this is the last line, for the rest
        raise unreadable(data)(
            f"the document could not be read ({type(exc).__name__}: {exc}); repair or re-export it"
        ) from exc


def warm() -> None:
    """Runs first in every new worker: the imports a real extraction needs, before its clock starts."""
    import pdfplumber  # noqa: F401  (the table finder, ingest/pdf_tables.py; ~0.2 s to import)
    import pptx  # noqa: F401  (ingest/slides.py, ~0.15 s)
    import pypdf  # noqa: F401  (ingest/pdf.py imports it on first use)
    import python_calamine  # noqa: F401  (ingest/sheets.py)

    try:
        import pypdfium2  # noqa: F401  (OCR's renderer, ingest/ocr.py)
    except ImportError:  # then a page that needs OCR says so in its warning
        pass


class Worker:
    """One worker process (a one-process pool) and its progress channel, started at once and warmed up."""

    def __init__(self, memory_bytes: int) -> None:
        context = multiprocessing.get_context("spawn")
        # A SimpleQueue writes each message to its pipe before put() returns (a Queue's feeder thread
        # may not have yet when the result arrives), so every message of a finished job can be read.
        self.progress = context.SimpleQueue()
        self.pool = cf.ProcessPoolExecutor(
            max_workers=1,
            mp_context=context,
            initializer=init_worker,
            initargs=(memory_bytes, self.progress),
        )
        self.ready = self.pool.submit(warm)

    def drain(self, job: int) -> list[tuple[int, int]]:
        """The ``(done, total)`` progress messages of extraction ``job`` that have arrived, oldest first."""
        beats = []
        try:
            while not self.progress.empty():
                number, done, total = self.progress.get()
                if number == job:
                    beats.append((done, total))
        except (OSError, ValueError, EOFError):  # a channel cut by a kill
            pass
        return beats

    def processes(self) -> list:
        return list((getattr(self.pool, "_processes", None) or {}).values())

    def alive(self) -> bool:
        return not self.ready.done() or (self.ready.exception() is None and all(p.is_alive() for p in self.processes()))

    def kill(self) -> None:
        for proc in self.processes():
            proc.kill()
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.progress.close()
