"""Ingestion on the engine thread: prefill a stored document's prefix into the document sequence,
snapshot it (ingest/snapshot.py), keep it hot, and mark it ready.

The upload side (extract, lay out, tokenize, budget check, store: ingest/pipeline.py) has already
run; this is the part that needs the model. A document is ``ready`` only once its snapshot manifest
is on disk, so a crash never leaves a half-written document marked ready.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ingest import snapshot
from ingest.store import FAILED, INGESTING, READY, DocStore
from server.hot import HotDocs
from server.jobs import IngestJob

log = logging.getLogger("docqa.engine")


def ingest(
    job: IngestJob, store: DocStore, docs: HotDocs, progress: dict[str, float], is_deleted: Callable[[str], bool]
) -> None:
    """Prefill and snapshot ``job``'s document (skipped if it is gone or no longer ``ingesting``).
    ``progress[doc_id]`` goes 0..1 while it runs; a deletion stops it between chunks."""
    doc = store.get(job.doc_id)
    if doc is None or doc.status != INGESTING:
        return
    try:
        prefix = store.read_prefix(doc.id)
        n = len(prefix)

        def on_progress(done: int) -> None:
            progress[doc.id] = done / n

        if not docs.prefill(prefix, on_progress=on_progress, should_stop=lambda: is_deleted(doc.id)):
            return
        mtp_h = docs.mtp_h
        snapshot.save(docs.ctx, docs.seq_id, prefix, store.dir(doc.id), docs.mtp_ctx, mtp_h)
        docs.remember(doc.id, prefix, *docs.states_for_ram(), mtp_h)
        # A sliding-window cache (without swa_full) still holds every cell the prefill cycled
        # through; shared into a question's sequence by seq_cp, cells of two sequences can never
        # be reused (llama-kv-cache.cpp find_slot), and the window cache fills up. The snapshot
        # holds only the last n_swa cells, so the first question restores it instead.
        docs.loaded = doc.id if docs.model.n_swa == 0 or docs.settings.swa_full else None
        if is_deleted(doc.id):
            return
        store.set_status(doc.id, READY)
        log.info("ingested %s: %d tokens", doc.id, n)
    except Exception as exc:
        log.exception("ingestion of %s failed", doc.id)
        docs.clear()
        store.set_status(doc.id, FAILED, f"prefill failed: {exc}")
    finally:
        progress.pop(doc.id, None)


def resume_interrupted(store: DocStore, submit: Callable[[str], None]) -> None:
    """After a restart: re-queue documents that were mid-ingestion, or fail them with a reason."""
    for doc in store.list():
        if doc.status != INGESTING:
            continue
        if (store.dir(doc.id) / "prefix.npy").is_file():
            log.info("resuming ingestion of %s", doc.id)
            submit(doc.id)
        else:
            store.set_status(doc.id, FAILED, "the server stopped before the upload was stored; upload again")
