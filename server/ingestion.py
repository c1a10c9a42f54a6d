"""Ingestion on the engine thread: prefill a stored document's prefix, one chunk per engine step,
snapshot it (ingest/snapshot.py), keep it hot, and mark it ready.

The upload side (extract, lay out, tokenize, budget check, store: ingest/pipeline.py) has already
run; this is the part that needs the model. Between chunks the engine decodes the running answers,
so a long document never stalls their streams (server/engine.py). A document is ``ready`` only once
its snapshot manifest is on disk, so a crash never leaves a half-written document marked ready; an
ingestion that is stopped (deleted, server shutdown) leaves no snapshot, and one interrupted by a
restart is resumed (:func:`resume_interrupted`).

The snapshot is written under the document's file lock, and only while its directory exists: a
DELETE removes the files first (waiting for a save in progress), so no snapshot outlives its
document. A save that fails (a full disk) leaves no snapshot files and the document ``failed`` with
the reason. Once the snapshot is complete, failing to record ``ready`` (a database locked for long)
never marks it failed: it stays ``ingesting`` and the next start finds the snapshot complete.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from ingest import disk, snapshot
from ingest.errors import StorageError
from ingest.store import FAILED, INGESTING, READY, DocStore
from server.hot import HotDocs
from spec.mtp import MtpDrafter

log = logging.getLogger("docqa.engine")


class Ingestion:
    """Document ``doc_id`` being prefilled into ``seq_id`` (its own sequence, or the document
    sequence when ingestion cannot run next to the answers)."""

    def __init__(self, doc_id: str, prefix: np.ndarray, seq_id: int, docs: HotDocs, progress: dict[str, float]):
        self.doc_id, self.prefix, self.seq_id = doc_id, prefix, seq_id
        self.docs, self.progress = docs, progress
        self.n_done = 0
        ctx, mtp_ctx = docs.ctx, docs.mtp_ctx
        if seq_id == docs.seq_id:
            docs.clear()
        ctx.seq_rm(seq_id, 0)
        self.mtp = None
        if mtp_ctx is not None:
            mtp_ctx.seq_rm(seq_id, 0)
            self.mtp = MtpDrafter(ctx, mtp_ctx, seq_id)
        progress[doc_id] = 0.0

    @property
    def n_tokens(self) -> int:
        return len(self.prefix)

    def step(self, n_max: int) -> bool:
        """Decode the next chunk of at most ``n_max`` tokens (with the MTP catch-up); True once the
        whole prefix is in."""
        chunk = self.prefix[self.n_done : self.n_done + n_max]
        self.docs.ctx.decode(chunk, self.n_done, seq_id=self.seq_id, outputs="none")
        if self.mtp is not None:
            self.mtp.process(chunk, self.n_done)
        self.n_done += len(chunk)
        self.progress[self.doc_id] = self.n_done / self.n_tokens
        return self.n_done >= self.n_tokens

    def finish(self, store: DocStore, idle: bool) -> bool:
        """Snapshot the prefilled sequence, keep its state hot, and mark the document ready; False (and
        nothing written) when the document was deleted meanwhile. ``idle``: no question is running, so
        a document prefilled next to the document sequence may move into it (the first question then
        needs no restore). Raises OSError when the snapshot cannot be written."""
        docs, seq = self.docs, self.seq_id
        mtp_h = self.mtp.pending_h.copy() if self.mtp is not None else None
        with store.holding(self.doc_id) as directory:
            if not directory.is_dir():  # deleted: its files went first, and so does its snapshot
                return False
            snapshot.save(docs.ctx, seq, self.prefix, directory, docs.mtp_ctx, mtp_h)
        docs.remember(self.doc_id, self.prefix, *docs.states_for_ram(seq), mtp_h).prefilled = True
        # A sliding-window cache (without swa_full) still holds every cell the prefill cycled through;
        # shared into a question's sequence by seq_cp, cells of two sequences can never be reused
        # (llama-kv-cache.cpp find_slot), and the window cache fills up. The snapshot holds only the
        # last n_swa cells, so the first question restores it instead.
        keep = docs.model.n_swa == 0 or docs.settings.swa_full
        if seq == docs.seq_id:
            docs.loaded = self.doc_id if keep else None
        elif idle and keep:
            docs.adopt(self.doc_id, seq)
        self.release()
        try:
            store.set_status(self.doc_id, READY)
        except StorageError as exc:
            log.error(
                "%s: snapshot complete, but ready could not be recorded (%s); the next start will", self.doc_id, exc
            )
            return True
        log.info("ingested %s: %d tokens", self.doc_id, self.n_tokens)
        if docs.settings.disk_budget_bytes is not None:
            disk.evict(store, docs.settings.disk_budget_bytes, keep=frozenset({self.doc_id}))
        return True

    def release(self) -> None:
        """Free the ingestion's own sequence (the document sequence is left to what it holds)."""
        self.progress.pop(self.doc_id, None)
        if self.seq_id != self.docs.seq_id:
            self.docs.ctx.seq_rm(self.seq_id, 0)
            if self.docs.mtp_ctx is not None:
                self.docs.mtp_ctx.seq_rm(self.seq_id, 0)

    def abandon(self) -> None:
        """Stop without a snapshot (the document was deleted, or the server is stopping)."""
        if self.seq_id == self.docs.seq_id:
            self.docs.clear()
        self.release()


class Ingestions:
    """The engine's ingestion: at most one document at a time, in the scheduler's ingest sequence."""

    def __init__(self, store: DocStore, docs: HotDocs, scheduler, progress: dict[str, float], deleted) -> None:
        self.store, self.docs, self.scheduler, self.progress, self.deleted = store, docs, scheduler, progress, deleted

    def start(self, job) -> None:
        """Begin ``job``'s document (nothing if it is gone or no longer ``ingesting``). With no question
        running, the document sequence is emptied when the new document needs its room."""
        doc = self.store.get(job.doc_id)
        if doc is None or doc.status != INGESTING:
            return
        seq_id, docs = self.scheduler.ingest_seq, self.docs
        n_loaded = len(docs.get(docs.loaded).prefix) if docs.loaded and docs.get(docs.loaded) else 0
        if not self.scheduler.running and n_loaded + job.n_tokens > self.scheduler.n_ctx:
            docs.clear()
        prefix = self.store.read_prefix(doc.id)
        self.scheduler.ingesting = Ingestion(doc.id, prefix, seq_id, docs, self.progress)

    def step(self, n_max: int) -> None:
        """One chunk of the current document; at its end, its snapshot (or its failure)."""
        work = self.scheduler.ingesting
        try:
            if work.doc_id in self.deleted:
                work.abandon()
            elif not work.step(n_max):
                return
            elif not work.finish(self.store, idle=not self.scheduler.running):
                work.abandon()
        except OSError as exc:  # the snapshot could not be written; save() removed what it wrote
            work.abandon()
            self._fail(work.doc_id, f"{disk.storage_error(exc, 'saving the snapshot')}, then re-ingest it")
        except Exception as exc:
            log.error("ingestion of %s failed: %s: %s", work.doc_id, type(exc).__name__, exc)
            work.abandon()
            self._fail(work.doc_id, f"prefill failed ({type(exc).__name__}); see the server log")
        self.scheduler.ingesting = None

    def _fail(self, doc_id: str, reason: str) -> None:
        try:
            self.store.set_status(doc_id, FAILED, reason)
        except StorageError as exc:  # still ``ingesting``: the next start prefills it again
            log.error("%s: could not record the failure %r: %s", doc_id, reason, exc)

    def stop(self) -> None:
        """Stop the current document between chunks; it stays ``ingesting`` and resumes at the next start."""
        if self.scheduler.ingesting is not None:
            self.scheduler.ingesting.abandon()
            self.scheduler.ingesting = None


def resume_interrupted(store: DocStore, submit: Callable[[str, int], None]) -> None:
    """After a restart: mark ready the documents whose snapshot was complete (ready could not be
    recorded), re-queue those that were mid-ingestion, or fail them with a reason. Servers sharing
    the database (``store.owner``) take only the ingestions whose owner's lease ran out (it died):
    the others are still being prefilled by a live server."""
    try:
        if store.owner:
            interrupted = store.claim_stale(store.owner, store.lease_s)
        else:
            interrupted = [doc for doc in store.list() if doc.status == INGESTING]
    except StorageError as exc:
        log.error("could not look for interrupted ingestions: %s", exc)
        return
    for doc in interrupted:
        try:
            if not (store.dir(doc.id) / "prefix.npy").is_file():
                store.set_status(doc.id, FAILED, "the server stopped before the upload was stored; upload again")
            elif snapshot.describes(store.dir(doc.id), store.read_prefix(doc.id)):
                log.info("%s: its snapshot is complete; marked ready", doc.id)
                store.set_status(doc.id, READY)
            else:
                log.info("resuming ingestion of %s", doc.id)
                submit(doc.id, doc.tokens)
        except StorageError as exc:  # a locked or full database: it stays as it is until the next start
            log.error("%s: could not record its state at start-up: %s", doc.id, exc)
