"""The extraction workers: each file is its own unit (issue 14). A slow or hostile file is killed
with its worker and never fails another upload; its time limit counts only its own running time; too
many waiting uploads get a clear 503. Real worker processes on real files."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from ingest.cut import Cut
from ingest.errors import ExtractorBusy, OcrUnavailable, UnreadablePdf
from ingest.ocr import OcrSettings
from ingest.pdf import OPENED
from ingest.worker import ExtractionWorker
from testkit.scans import card_pdf
from tests.ingest.samples import first_pages

GEOTOPO = "pdf/sample-files/009-pdflatex-geotopo/GeoTopo-komprimiert.pdf"
SLOW_PAGES = 30
QUICK = "pdf/pypdf-resources/crazyones.pdf"
MEMORY = 1024**3


@pytest.fixture(scope="module")
def slow(cases) -> bytes:
    """The first 30 pages of a 117-page LaTeX PDF: about 1.5 s to read on 2 cores, long enough to
    hold a worker while a test looks (the whole book took 8 s, of which these tests read it 12 times)."""
    return first_pages(cases / GEOTOPO, SLOW_PAGES)


def _timed(worker: ExtractionWorker, data: bytes) -> float:
    t0 = time.monotonic()
    worker.extract(data)
    return time.monotonic() - t0


def test_a_timeout_kills_one_worker_and_never_fails_its_neighbours(cases, slow):
    quick = (cases / QUICK).read_bytes()
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


def test_time_spent_waiting_for_a_worker_does_not_count(cases, slow):
    """Three files that each take t with a limit of 2t, on two workers: the third waits about t for a
    worker, then reads in t. Counting the wait, it would time out."""
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
        assert all(r.pages == SLOW_PAGES for r in results)
    finally:
        worker.close()


def test_a_full_queue_is_refused_with_retry_after(cases, slow):
    worker = ExtractionWorker(timeout_s=120, memory_bytes=MEMORY, workers=1, queue=0)
    try:
        with ThreadPoolExecutor(1) as pool:
            busy = pool.submit(worker.extract, slow)
            time.sleep(0.2)
            with pytest.raises(ExtractorBusy) as refused:
                worker.extract((cases / QUICK).read_bytes())
            assert refused.value.headers == {"Retry-After": "5"}
            assert busy.result(timeout=120).pages == SLOW_PAGES
        assert "misfits" in worker.extract((cases / QUICK).read_bytes()).text  # room again
    finally:
        worker.close()


# -- admission and the worker's own threads (issue 27 item 12) ------------------------------------


def test_the_upload_past_workers_plus_queue_is_refused_at_once(cases, slow):
    """Issue 27: through asyncio.to_thread the default pool's few threads kept the count below the
    limit, so 12 slow PDFs never got a 503. With extract_async, workers + queue are admitted and the
    next one is refused while they are all still running or waiting."""
    worker = ExtractionWorker(timeout_s=120, memory_bytes=MEMORY, workers=1, queue=1)

    async def run() -> None:
        admitted = [asyncio.ensure_future(worker.extract_async(slow)) for _ in range(2)]
        await asyncio.sleep(0)  # both admitted (admission happens before the first await)
        with pytest.raises(ExtractorBusy) as refused:
            await worker.extract_async((cases / QUICK).read_bytes())
        assert refused.value.headers == {"Retry-After": "5"}
        assert not any(f.done() for f in admitted), "refused while the others still run or wait"
        assert all(r.pages == SLOW_PAGES for r in await asyncio.gather(*admitted))
        assert "misfits" in (await worker.extract_async((cases / QUICK).read_bytes())).text  # room again

    try:
        asyncio.run(run())
    finally:
        worker.close()


def test_extraction_never_holds_the_default_pool(cases, slow):
    """Issue 27: GET /text took 5.1 s and a question 5.9 s behind 12 slow uploads, all in asyncio's
    default pool. Here the default pool has 1 thread and 2 slow extractions are running or waiting;
    other to_thread work still runs at once (it finishes while they are still going)."""
    worker = ExtractionWorker(timeout_s=120, memory_bytes=MEMORY, workers=1, queue=1)

    async def run() -> None:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(1))
        extracting = [asyncio.ensure_future(worker.extract_async(slow)) for _ in range(2)]
        await asyncio.sleep(0.2)
        assert await asyncio.to_thread(lambda: 6 * 7) == 42
        assert not all(f.done() for f in extracting), "the other work did not wait for them"
        await asyncio.gather(*extracting)

    try:
        asyncio.run(run())
    finally:
        worker.close()


def test_waiting_uploads_are_bounded_in_bytes(cases):
    quick = (cases / QUICK).read_bytes()
    worker = ExtractionWorker(timeout_s=60, memory_bytes=MEMORY, workers=1, queue=8, max_waiting_bytes=10_000_000)
    try:
        first = worker.slot(8_000_000)  # taken before the body is read, with its Content-Length
        with pytest.raises(ExtractorBusy, match="hold 8000000 bytes"):
            worker.slot(4_000_000)
        small = worker.slot(1_000_000)
        small.release()
        first.release()
        with worker.slot(50_000_000) as alone:  # over the budget alone: admitted, or it never could be
            assert alone.n_bytes == 50_000_000
        assert "misfits" in asyncio.run(worker.slot(len(quick)).extract(quick)).text
        assert worker._pending == 0 and worker._pending_bytes == 0, "every slot given back"
    finally:
        worker.close()


def test_a_cancelled_upload_that_waits_gives_its_slot_back(cases, slow):
    worker = ExtractionWorker(timeout_s=120, memory_bytes=MEMORY, workers=1, queue=1)

    async def run() -> None:
        running = asyncio.ensure_future(worker.extract_async(slow))
        waiting = asyncio.ensure_future(worker.extract_async(slow))
        await asyncio.sleep(0.2)
        waiting.cancel()  # the client hung up while its upload waited for a worker
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await asyncio.sleep(0)
        third = asyncio.ensure_future(worker.extract_async(slow))  # the freed slot takes it
        await asyncio.sleep(0)
        assert not third.done() or third.exception() is None
        assert (await running).pages == SLOW_PAGES and (await third).pages == SLOW_PAGES

    try:
        asyncio.run(run())
    finally:
        worker.close()


# -- OCR in the worker (issue 30 item 2) -----------------------------------------------------------


def test_ocr_runs_in_the_worker_and_reports_each_page(tesseract):
    """Two scanned pages, read under the worker's 1 GiB address-space limit (the tesseract child
    inherits it); the caller hears (done, total) for each page on the worker's progress channel."""
    data = card_pdf(["The first scanned page.", "The second scanned page."])
    worker = ExtractionWorker(timeout_s=120, memory_bytes=MEMORY, workers=1, ocr=OcrSettings("auto", tesseract))
    heard: list[tuple[int, int]] = []
    try:
        got = worker.extract(data, progress=lambda done, total: heard.append((done, total)))
        assert got.ocr_pages == [1, 2] and "second scanned page" in got.text
        assert heard == [(OPENED, 2), (0, 2), (1, 2), (2, 2)]  # opened with 2 pages, then OCR page by page
        assert worker.extract(data).ocr_pages == [1, 2]  # the channel carries nothing over to the next file
    finally:
        worker.close()


def test_each_ocr_page_extends_the_time_limit(tesseract):
    """A limit shorter than the scan takes to read: each page read gives it another
    ocr.page_timeout_s, so the scan is read to its end (a file that makes no progress still stops)."""
    data = card_pdf(["Page one of a long scan.", "Page two of a long scan.", "Page three of a long scan."])
    worker = ExtractionWorker(timeout_s=0.5, memory_bytes=MEMORY, workers=1, ocr=OcrSettings("auto", "eng", 60.0))
    try:
        t0 = time.monotonic()
        got = worker.extract(data)
        assert time.monotonic() - t0 > 0.5, "the scan read faster than the limit: the test shows nothing"
        assert got.ocr_pages == [1, 2, 3]
    finally:
        worker.close()


def test_ocr_in_the_worker_reads_only_a_page_cut(tesseract):
    worker = ExtractionWorker(timeout_s=120, memory_bytes=MEMORY, workers=1, ocr=OcrSettings("auto", "eng"))
    try:
        got = worker.extract(card_pdf(["Page one.", "Page two.", "Page three."]), cut=Cut("pages", 3, 3))
        assert got.ocr_pages == [3] and got.first_page == 3 and got.text.startswith("Page three")
    finally:
        worker.close()


def test_a_worker_without_tesseract_refuses_a_scan_with_install_advice(scans, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # the worker process starts with this PATH: no tesseract
    worker = ExtractionWorker(timeout_s=60, memory_bytes=MEMORY, workers=1, ocr=OcrSettings("auto", "eng+deu"))
    try:
        with pytest.raises(OcrUnavailable, match="apt-get install tesseract-ocr tesseract-ocr-deu"):
            worker.extract(card_pdf(["A scan."]))
    finally:
        worker.close()
