"""The upload pipeline, one function for an upload and a re-ingest alike (:func:`run`): extract,
check the budget and tokenize with the loaded model, make room on disk, store, then queue the
prefill. Its steps between the route and ingest/pipeline.py are here too: the part of the upload
asked for, the token budget, and the disk space it will take.

Every step runs off the event loop (``asyncio.to_thread``) and off the engine thread: tokenizer
calls are read-only and thread-safe.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from ingest import cut as cuts
from ingest import pipeline
from ingest.budget import Budget
from ingest.extract import ExtractedText
from ingest.pipeline import Prepared
from server.config.errors import InvalidRequest
from server.config.settings import Settings
from server.engine.engine import Engine
from store import disk
from store.docstore import INGESTING, DocRecord, DocStore, printable

MULTIPART_SLACK = 64 * 1024  # boundaries and part headers around an uploaded file (server/api/guard.py)


def parse_cut(pages: str | None, chars: str | None, labels: bool = False) -> cuts.Cut | None:
    """The upload's ``pages`` / ``chars`` fields (``labels``: the pages are printed labels, ingest/cut.py);
    InvalidRequest (422) saying how to write them."""
    try:
        return cuts.Cut.parse(pages, chars, labels)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from None


def prepare(engine: Engine, settings: Settings, extracted: ExtractedText) -> Prepared:
    """Check the budget and tokenize with the loaded model: DocumentTooLong (413) with the largest
    leading part that fits."""
    budget = Budget(settings.document_budget, engine.n_ctx, engine.model.n_ctx_train)
    return pipeline.prepare(extracted, engine.layout, engine.model, budget, segmenting(settings))


def segmenting(settings: Settings) -> pipeline.Segmenting | None:
    """How a document over the budget is split (DOCQA_LONG_DOCUMENTS=segment), or None (refuse: 413)."""
    if settings.long_documents == "refuse":
        return None
    return pipeline.Segmenting(settings.segment_overlap_tokens, settings.max_segments)


def max_chars(engine: Engine, settings: Settings) -> int:
    """The most characters of a document the budget (every segment's, when segmenting) could hold:
    the worker returns no more."""
    n = 1 if settings.long_documents == "refuse" else settings.max_segments
    return n * settings.document_budget * engine.model.max_token_chars


def make_room(
    store: DocStore, settings: Settings, snapshot_bytes: Callable[[int], int], n_upload: int, prepared: Prepared
) -> None:
    """Check (and with DOCQA_DISK_BUDGET_BYTES make) room for the document: its upload (``n_upload``
    bytes; 0 for a re-ingest, which keeps it), text, token ids and snapshot. Raises DiskFull (507)."""
    text = prepared.extracted.text
    need = disk.Need(
        upload=n_upload,
        # UTF-8, each character escaped at most once (a newline is two bytes in JSON), and the page map
        text=2 * len(text.encode("utf-8", errors="replace")) + 16 * (prepared.extracted.pages + 16),
        prefix=4 * prepared.n_tokens + 128 * (1 + len(prepared.segments)),
        # a segmented document's snapshots together hold the whole document's KV (and the overlaps)
        snapshot=sum(snapshot_bytes(len(p)) for p in prepared.segment_prefixes or (prepared.prefix,)),
    )
    ingesting = frozenset(doc.id for doc in store.list() if doc.status == INGESTING)  # never evicted mid-prefill
    disk.make_room(store, need, settings.disk_budget_bytes, keep=ingesting)


def display_name(filename: str | None, extracted: ExtractedText) -> str:
    """The file's own name (no directories, printable, at most 200 characters), and the part of it
    the document is ("book.pdf (pages 5-9)"; by the labels printed on them where a PDF has its own:
    "book.pdf (pages ii-3, PDF pages 2-6)", as its citations name them)."""
    name = (filename or "document").replace("\\", "/").rsplit("/", 1)[-1]
    name = printable(name) or "document"
    if extracted.cut is not None:
        part = cuts.Cut.from_spec(extracted.cut)
        labels = extracted.page_labels
        if part.unit == "pages" and labels is not None and part.end <= len(labels):
            name += f" (pages {labels[part.start - 1]}-{labels[part.end - 1]}, PDF pages {part.start}-{part.end})"
        else:
            name += f" ({'pages' if part.unit == 'pages' else 'characters'} {part.start}-{part.end})"
    return name


async def run(
    engine: Engine,
    store: DocStore,
    settings: Settings,
    snapshot_bytes: Callable[[int], int],
    extract: Callable[[int], Awaitable[ExtractedText]],
    n_upload: int,
    store_doc: Callable[[Prepared], tuple[DocRecord, bool]],
    replaces: str | None = None,
) -> tuple[DocRecord, Prepared, bool]:
    """The pipeline of an upload or a re-ingest: ``extract(max_chars)`` (the worker process returns no
    more characters than the budget could hold), :func:`prepare` (the budget, 413 with the part that
    fits; tokenize), :func:`make_room` for ``n_upload`` bytes of upload (0 for a re-ingest, which
    keeps its own) and the rest (507), ``store_doc(prepared)`` -> (record, whether to prefill it);
    then the engine drops what it holds of ``replaces`` (a failed earlier upload of the same bytes,
    or the re-ingested document itself) and queues the prefill. Returns (record, prepared, queued)."""
    cap = await asyncio.to_thread(max_chars, engine, settings)
    extracted = await extract(cap)  # on the extraction worker's own threads (ingest/worker.py)
    prepared = await asyncio.to_thread(prepare, engine, settings, extracted)
    await asyncio.to_thread(make_room, store, settings, snapshot_bytes, n_upload, prepared)
    doc, queue = await asyncio.to_thread(store_doc, prepared)
    if replaces is not None:
        engine.forget(replaces)
    if queue:
        engine.submit_ingest(doc.id, prepared.n_tokens)
    return doc, prepared, queue
