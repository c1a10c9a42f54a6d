"""An upload read by OCR finishes in the background (issue 37): the 202 comes once OCR has read its
first page, not after the last (a 30-page scan kept the request open 54 s on a loaded machine, with no id and no
progress). So does a part of a file (``pages=``) whose reading takes longer than :data:`PART_GRACE_S`
(issue 51: ``pages=1-4`` of a 117-page PDF blocked 16.6 s before its 202, with no feedback: the whole
file is read for its running headers before the part is cut); a part read sooner answers as before
(its 4xx included).

The route starts the pipeline (server/service/uploads.py ``run``) and waits for whichever comes first:
its end (the 202 or the error as before: a text PDF, a 413, a 422 for a scan without Tesseract or a
one-page scan OCR finds no text on) or OCR's first page read with more to come (ingest/pdf.py
reports ``(done, pages)`` as it goes), so the request waits for one page at most (~2 CPU s). Then the
document's row is made at once, ``ingesting`` with no files (counts 0 until its text is stored), its
``progress`` is OCR's share of pages done, and the rest of the pipeline stores its files into that
row (store/writes.py ``store_into``) and queues the prefill. What fails later marks it ``failed``
with the reason the upload would have got. A crash meanwhile leaves a row without a prefix, which a
restart marks failed ("upload again", server/engine/recovery.py): nothing half-made.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from ingest.cut import Cut
from ingest.errors import DocumentError
from ingest.extract import ExtractedText
from ingest.pdf import OPENED
from server.engine.engine import Engine
from server.service import uploads
from store.docstore import FAILED, DocRecord, DocStore, DuplicateDocument

log = logging.getLogger("docqa.http")
NOTE = "read by OCR in the background: GET the document for its progress"
PART_NOTE = "the part is read from the file in the background: GET the document for its progress"
PART_GRACE_S = 1.0  # a part whose reading takes longer goes on in the background
_running: set[asyncio.Task] = set()  # the background pipelines (a reference keeps each alive)


class Reading:
    """One upload whose pipeline may go on in the background once OCR starts (module docstring)."""

    def __init__(
        self, store: DocStore, engine: Engine, filename: str | None, digest: str, cut: Cut | None, pdf: bool = True
    ) -> None:
        """``pdf``: the upload's bytes are a PDF's (``%PDF``), the kind its row has until its text is stored."""
        self.store, self.engine, self.filename, self.digest, self.cut = store, engine, filename, digest, cut
        self.pdf = pdf
        self.doc: DocRecord | None = None  # the row made when OCR started
        self._stored = False  # the pipeline stored the upload before that
        self._lock = threading.Lock()
        self._loop = asyncio.get_running_loop()
        self._started = asyncio.Event()
        self.note = NOTE  # what the 202 says of the reading in the background
        self._grace: float | None = None  # a part of a file: go on in the background this long after it opened

    def after(self, seconds: float) -> None:
        """Go on in the background ``seconds`` (a part of a file: PART_GRACE_S) after the worker opened
        the PDF and the part's pages are known to lie in it (:meth:`tell`), so a part outside the file
        still gets its 4xx in the request. A part by printed labels is known only once the text is read:
        it waits as before."""
        self._grace = seconds

    def _part_inside(self, n_pages: int) -> None:
        def start() -> None:
            if not self._started.is_set():
                self.note = PART_NOTE
                self._started.set()

        cut = self.cut
        if self._grace is not None and cut is not None and cut.labels is None and cut.start <= n_pages:
            self._loop.call_later(self._grace, start)

    def tell(self, done: int, total: int) -> None:
        """OCR's progress (``done`` of ``total`` pages), from a worker thread; ``done`` OPENED: the PDF
        opened, ``total`` is its number of pages (ingest/pdf.py OcrJob)."""
        if done == OPENED:
            self._loop.call_soon_threadsafe(self._part_inside, total)
        elif self.doc is not None:
            self.engine.reading_elsewhere(self.doc.id, 0.99 * done / max(1, total))
        elif 1 <= done < total and not self._started.is_set():  # the first page is read, more are to come
            self._loop.call_soon_threadsafe(self._ocr_started)

    def _ocr_started(self) -> None:
        if not self._started.is_set():
            self.note = NOTE
            self._started.set()

    def put(
        self, new: Callable[[], tuple[DocRecord, bool]], into: Callable[[DocRecord], tuple[DocRecord, bool]]
    ) -> tuple[DocRecord, bool]:
        """The pipeline's store step: ``new()`` (a row and its files) before OCR started, else
        ``into(row)`` (the files into the row made then)."""
        with self._lock:
            if self.doc is None:
                self._stored = True
                return new()
        doc, queued = into(self.doc)
        if not queued:  # deleted while OCR read it: no progress is left behind for it
            self.engine.reading_elsewhere(doc.id, None)
        return doc, queued

    async def wait(self, pipeline: asyncio.Task) -> DocRecord | None:
        """The row made when OCR started, the pipeline going on in the background; None when the
        pipeline ended first (await it for its result or error)."""
        started = asyncio.ensure_future(self._started.wait())
        await asyncio.wait({pipeline, started}, return_when=asyncio.FIRST_COMPLETED)
        started.cancel()
        if pipeline.done() or await asyncio.to_thread(self._make_row) is None:
            return None
        task = asyncio.ensure_future(self._finish(pipeline))
        _running.add(task)
        task.add_done_callback(_running.discard)
        return self.doc

    def _make_row(self) -> DocRecord | None:
        with self._lock:
            if self._stored:
                return None
            known = self.store.by_sha256(self.digest)
            if known is not None and known.status == FAILED:
                self.store.delete(known.id)
            name = uploads.display_name(self.filename, ExtractedText("", cut=self.cut.spec if self.cut else None))
            kind = "pdf" if self.pdf else ""  # until its text is stored (store/writes.py store_into sets it)
            try:
                doc = self.store.create(name=name, sha256=self.digest, kind=kind, pages=0, tokens=0, chars=0)
            except DuplicateDocument:  # the same bytes came meanwhile: this request waits as before
                return None
            self.engine.reading_elsewhere(doc.id, 0.0)  # being read here: no resume check takes it
            self.doc = doc
            return doc

    async def _finish(self, pipeline: asyncio.Task) -> None:
        doc = self.doc
        assert doc is not None
        try:
            await pipeline
        except DocumentError as exc:
            log.info("%s: reading it by OCR failed: %s", doc.id, exc)
            await asyncio.to_thread(self._fail, doc.id, str(exc))
        except Exception as exc:
            log.exception("%s: reading it by OCR failed", doc.id)
            await asyncio.to_thread(self._fail, doc.id, f"reading it failed ({type(exc).__name__}); upload it again")

    def _fail(self, doc_id: str, reason: str) -> None:
        self.engine.reading_elsewhere(doc_id, None)
        try:
            if self.store.get(doc_id) is not None:
                self.store.set_status(doc_id, FAILED, reason)
        except Exception:
            log.exception("%s: could not record that reading it failed", doc_id)
