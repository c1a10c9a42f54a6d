"""What runs in an extraction worker process (ingest/worker.py starts and bounds them): its
address-space limit and parent-death signal, the extraction itself with its last-line mapping of
errors to DocumentError, and the one-process pool that holds a worker.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing

from ingest.cut import Cut, apply, keep_leading
from ingest.errors import DocumentError, UnreadableDocument, UnreadablePdf
from ingest.extract import ExtractedText, extract


def init_worker(max_bytes: int) -> None:
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


def unreadable(data: bytes) -> type[UnreadableDocument]:
    """UnreadablePdf for a PDF (its HTTP error type says so), UnreadableDocument for the rest."""
    return UnreadablePdf if b"%PDF-" in data[:1024] else UnreadableDocument


def extract_in_worker(
    data: bytes, password: str | None, rules: int, cut: Cut | None, max_chars: int | None
) -> ExtractedText:
    try:
        extracted = extract(data, password, rules)
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


class Worker:
    """One worker process (a one-process pool), started at once and warmed up."""

    def __init__(self, memory_bytes: int) -> None:
        self.pool = cf.ProcessPoolExecutor(
            max_workers=1, mp_context=multiprocessing.get_context("spawn"), initializer=init_worker,
            initargs=(memory_bytes,),
        )  # fmt: skip
        self.ready = self.pool.submit(warm)

    def processes(self) -> list:
        return list((getattr(self.pool, "_processes", None) or {}).values())

    def alive(self) -> bool:
        return not self.ready.done() or (self.ready.exception() is None and all(p.is_alive() for p in self.processes()))

    def kill(self) -> None:
        for proc in self.processes():
            proc.kill()
        self.pool.shutdown(wait=False, cancel_futures=True)
