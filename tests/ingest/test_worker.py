"""The extraction workers: each file is its own unit (issue 14). A slow or hostile file is killed
with its worker and never fails another upload; its time limit counts only its own running time; too
many waiting uploads get a clear 503. Real worker processes on real files."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from ingest.errors import ExtractorBusy, UnreadablePdf
from ingest.worker import ExtractionWorker

SLOW = "pdf/sample-files/009-pdflatex-geotopo/GeoTopo-komprimiert.pdf"  # 117 pages: seconds to read
QUICK = "pdf/pypdf-resources/crazyones.pdf"
MEMORY = 1024**3


def _timed(worker: ExtractionWorker, data: bytes) -> float:
    t0 = time.monotonic()
    worker.extract(data)
    return time.monotonic() - t0


def test_a_timeout_kills_one_worker_and_never_fails_its_neighbours(cases):
    slow, quick = (cases / SLOW).read_bytes(), (cases / QUICK).read_bytes()
    worker = ExtractionWorker(timeout_s=0.5, memory_bytes=MEMORY, workers=2)
    worker.prestart()
    try:
        with ThreadPoolExecutor(4) as pool:
            doomed = pool.submit(worker.extract, slow)
            time.sleep(0.1)  # the slow file holds one worker
            quick_ones = [pool.submit(worker.extract, quick) for _ in range(3)]
            assert all("misfits" in f.result(timeout=60).text for f in quick_ones)
            with pytest.raises(UnreadablePdf, match="longer than"):
                doomed.result(timeout=60)
        # The killed worker was replaced: the pool still reads files, both at once.
        with ThreadPoolExecutor(2) as pool:
            assert all("misfits" in f.result(timeout=60).text for f in [pool.submit(worker.extract, quick)] * 2)
    finally:
        worker.close()


def test_time_spent_waiting_for_a_worker_does_not_count(cases):
    """Three files that each take t with a limit of 2t, on two workers: the third waits about t for a
    worker, then reads in t. Counting the wait, it would time out."""
    slow = (cases / SLOW).read_bytes()
    probe = ExtractionWorker(timeout_s=120, memory_bytes=MEMORY, workers=1)
    try:
        alone = min(_timed(probe, slow) for _ in range(2))
    finally:
        probe.close()
    worker = ExtractionWorker(timeout_s=2 * alone + 0.5, memory_bytes=MEMORY, workers=2)
    worker.prestart()
    try:
        with ThreadPoolExecutor(3) as pool:
            results = [f.result(timeout=120) for f in [pool.submit(worker.extract, slow) for _ in range(3)]]
        assert all(r.pages == 117 for r in results)
    finally:
        worker.close()


def test_a_full_queue_is_refused_with_retry_after(cases):
    slow = (cases / SLOW).read_bytes()
    worker = ExtractionWorker(timeout_s=120, memory_bytes=MEMORY, workers=1, queue=0)
    try:
        with ThreadPoolExecutor(1) as pool:
            busy = pool.submit(worker.extract, slow)
            time.sleep(0.2)
            with pytest.raises(ExtractorBusy) as refused:
                worker.extract((cases / QUICK).read_bytes())
            assert refused.value.headers == {"Retry-After": "5"}
            assert busy.result(timeout=120).pages == 117
        assert "misfits" in worker.extract((cases / QUICK).read_bytes()).text  # room again
    finally:
        worker.close()
