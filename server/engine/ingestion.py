"""Ingestion on the engine thread: prefill a stored document's prefix, one chunk per engine step,
snapshot it (ingest/snapshot.py), keep it hot, and mark it ready.

The upload side (extract, lay out, tokenize, budget check, store: ingest/pipeline.py) has already
run; this is the part that needs the model. Between chunks the engine decodes the running answers,
so a long document never stalls their streams (server/engine/engine.py). A document is ``ready`` only once
its snapshot manifest is on disk, so a crash never leaves a half-written document marked ready; an
ingestion that is stopped (deleted, server shutdown) leaves no snapshot, and one interrupted by a
restart is resumed (:func:`resume_interrupted`).

A segmented document (ingest/segments.py) is ingested one segment after another, each as an
ingestion of its own (one IngestJob per segment, keyed by ingest/segments.key), with its snapshot in
``segments/<i>/``; its progress counts every segment's tokens, and it is ``ready`` once every
segment's snapshot is complete. A segment whose snapshot is already complete is skipped, so a
restart, or a segment snapshot evicted from disk, prefills only what is missing.

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

from ingest import snapshot
from ingest.errors import DocumentFilesDamaged, StorageError
from server.engine.hot import HotDocs
from store import disk
from store.docstore import FAILED, INGESTING, READY, DocStore

log = logging.getLogger("docqa.engine")


class Ingestion:
    """Document ``doc_id`` (or its segment ``key``) being prefilled into ``seq_id`` (its own sequence,
    or the document sequence when ingestion cannot run next to the answers). ``counted``: (prefix
    tokens of the segments before it, of all segments), for the document's progress. ``keep``: the
    prefilled sequence may serve questions as it is (not on a sliding-window cache without
    ``swa_full``: see :meth:`finish`)."""

    def __init__(
        self,
        doc_id: str,
        prefix: np.ndarray,
        seq_id: int,
        docs: HotDocs,
        progress: dict[str, float],
        key: str | None = None,
        counted: tuple[int, int] | None = None,
        keep: bool = True,
    ):
        self.doc_id, self.prefix, self.seq_id = doc_id, prefix, seq_id
        self.key = key or doc_id
        self.docs, self.contexts, self.progress, self.keep = docs, docs.contexts, progress, keep
        self.before, self.total = counted or (0, len(prefix))
        self.n_done = 0
        self.missing = False  # finished last, with another segment's snapshot missing (finish())
        self.ready = False  # finish() marked the document ready
        if seq_id == docs.seq_id:
            docs.clear()
        self.contexts.release(seq_id)
        progress[doc_id] = self.before / max(1, self.total)

    @property
    def n_tokens(self) -> int:
        return len(self.prefix)

    def step(self, n_max: int) -> bool:
        """Decode the next chunk of at most ``n_max`` tokens (and the companions'); True once the
        whole prefix is in."""
        chunk = self.prefix[self.n_done : self.n_done + n_max]
        self.contexts.target.decode(chunk, self.n_done, seq_id=self.seq_id, outputs="none")
        self.contexts.companions.prefill(chunk, self.n_done, self.seq_id)
        self.n_done += len(chunk)
        self.progress[self.doc_id] = (self.before + self.n_done) / max(1, self.total)
        return self.n_done >= self.n_tokens

    def finish(self, store: DocStore, idle: bool) -> bool:
        """Snapshot the prefilled sequence, keep its state hot, and mark the document ready; False (and
        nothing written) when the document was deleted meanwhile. ``idle``: no question is running, so
        a document prefilled next to the document sequence may move into it (the first question then
        needs no restore). Raises OSError when the snapshot cannot be written."""
        docs, seq, keep = self.docs, self.seq_id, self.keep
        with store.holding(self.doc_id) as directory:
            if not directory.is_dir():  # deleted: its files went first, and so does its snapshot
                return False
            last_hidden = self.contexts.save(seq, self.prefix, store.state_dir(self.key))
        docs.remember(self.key, self.prefix, docs.ram_state(seq), last_hidden).prefilled = True
        # A sliding-window cache (without swa_full) still holds every cell the prefill cycled through;
        # shared into a question's sequence by seq_cp, cells of two sequences can never be reused
        # (llama-kv-cache.cpp find_slot), and the window cache fills up. The snapshot holds only the
        # last n_swa cells, so the first question restores it instead.
        if seq == docs.seq_id:
            docs.hold(self.key, self.n_tokens) if keep else docs.hold(None)
            if keep:
                self.contexts.companions.adopt(self.key, seq)
        elif idle and keep:
            docs.adopt(self.key, seq)
        self.release()
        if not complete(store, self.doc_id):
            self.progress[self.doc_id] = (self.before + self.n_done) / max(1, self.total)
            log.info("ingested %s: %d tokens", self.key, self.n_tokens)
            # The last segment, and still not complete: an earlier segment's snapshot went meanwhile
            # (evicted, damaged); its prefill must be queued again, or the document stays ingesting.
            self.missing = self.before + self.n_tokens >= self.total
            return True  # more segments to go
        self.progress.pop(self.doc_id, None)
        try:
            store.set_status(self.doc_id, READY)
        except StorageError as exc:
            log.error(
                "%s: snapshot complete, but ready could not be recorded (%s); the next start will", self.doc_id, exc
            )
            return True
        log.info("ingested %s: %d tokens", self.key, self.n_tokens)
        self.ready = True
        return True

    def release(self) -> None:
        """Free the ingestion's own sequence (the document sequence is left to what it holds)."""
        if self.seq_id != self.docs.seq_id:
            self.contexts.release(self.seq_id)

    def abandon(self) -> None:
        """Stop without a snapshot (the document was deleted, or the server is stopping)."""
        if self.seq_id == self.docs.seq_id:
            self.docs.clear()
        self.progress.pop(self.doc_id, None)
        self.release()


def complete(store: DocStore, doc_id: str) -> bool:
    """Every snapshot the document needs is on disk: its own, or each of its segments'."""
    return all(snapshot.describes(store.state_dir(k), store.read_prefix(k)) for k in store.keys(doc_id))


class Ingestions:
    """The engine's ingestions: they start in ``seq_id`` (the scheduler's ingest sequence), one at a
    time in the scheduler's ingest slot, a chunk per engine step."""

    def __init__(
        self,
        store: DocStore,
        docs: HotDocs,
        progress: dict[str, float],
        deleted,
        seq_id: int,
        resubmit: Callable[[str, int], None] = lambda doc_id, n: None,
        on_ready: Callable[[str], None] = lambda doc_id: None,
        keep: bool = True,
    ) -> None:
        """``resubmit(doc_id, tokens)``: queue a document's prefill again (its missing segments);
        ``on_ready(doc_id)``: a document just became ready (the engine then keeps the disk budget, off
        this thread); ``keep``: a prefilled sequence may serve questions as it is (Ingestion)."""
        self.store, self.docs, self.progress, self.deleted, self.seq_id = store, docs, progress, deleted, seq_id
        self.resubmit, self.on_ready, self.keep = resubmit, on_ready, keep

    def start(self, job, idle: bool) -> Ingestion | None:
        """Begin ``job``'s document; None if there is nothing to prefill (it is gone, no longer
        ``ingesting``, or the segment's snapshot is complete). ``idle``: no question is running, so the
        document sequence is emptied when the new document needs its room."""
        doc = self.store.get(job.doc_id)
        if doc is None or doc.status != INGESTING:
            return None
        docs = self.docs
        try:
            prefix = self.store.read_prefix(job.key)
        except DocumentFilesDamaged as exc:  # a prefix.npy damaged on disk before its prefill began
            self._fail(doc.id, f"{exc}; {exc.action.format(id=doc.id)}")
            return None
        if job.key != doc.id and snapshot.describes(self.store.state_dir(job.key), prefix):
            if complete(self.store, doc.id):  # the segment was kept; the last one makes the document ready
                self.progress.pop(doc.id, None)
                self.store.set_status(doc.id, READY)
            return None
        if idle and docs.n_loaded + job.n_tokens > docs.contexts.target.n_ctx:
            docs.clear()
        counted = (job.tokens_before, job.tokens_total)
        return Ingestion(doc.id, prefix, self.seq_id, docs, self.progress, job.key, counted, self.keep)

    def step(self, work: Ingestion, n_max: int, idle: bool) -> bool:
        """One chunk of ``work``; at its end, its snapshot (or its failure). True once the ingestion is
        over (done, failed or abandoned) and leaves the ingest slot. ``idle``: no question is running."""
        try:
            if work.doc_id in self.deleted:
                work.abandon()
            elif not work.step(n_max):
                return False
            elif not work.finish(self.store, idle=idle):
                work.abandon()
            elif work.ready:
                self.on_ready(work.doc_id)
            elif work.missing:
                log.warning(
                    "%s: a segment's snapshot went missing during its ingestion; prefilling it again", work.doc_id
                )
                self.resubmit(work.doc_id, work.total)
        except OSError as exc:  # the snapshot could not be written; save() removed what it wrote
            work.abandon()
            self._fail(work.doc_id, f"{disk.storage_error(exc, 'saving the snapshot')}, then re-ingest it")
        except Exception as exc:
            log.error("ingestion of %s failed: %s: %s", work.doc_id, type(exc).__name__, exc)
            work.abandon()
            self._fail(work.doc_id, f"prefill failed ({type(exc).__name__}); see the server log")
        return True

    def _fail(self, doc_id: str, reason: str) -> None:
        try:
            self.store.set_status(doc_id, FAILED, reason)
        except StorageError as exc:  # still ``ingesting``: the next start prefills it again
            log.error("%s: could not record the failure %r: %s", doc_id, reason, exc)


def keep_disk_budget(store: DocStore, budget: int, doc_id: str) -> None:
    """After ``doc_id`` became ready: evict the least recently used snapshots until the documents fit
    ``budget`` (store/disk.py ``evict``), never one of a document still being ingested (by any server
    sharing the store). Run off the engine thread; a failure is logged, never raised."""
    try:
        ingesting = {d.id for d in store.list() if d.status == INGESTING}
        disk.evict(store, budget, keep=frozenset({doc_id, *ingesting}))
    except Exception:
        log.exception("keeping DOCQA_DISK_BUDGET_BYTES after %s failed", doc_id)


_quiet: dict[str, bool] = {}  # the store's last check failed (its error is then logged once)


def resume_interrupted(
    store: DocStore, submit: Callable[[str, int], None], skip: Callable[[str], bool] = lambda doc_id: False
) -> None:
    """After a restart, and now and then (server/engine/lease.py): mark ready the documents whose
    snapshot was complete (ready could not be recorded), re-queue those that were mid-ingestion, or
    fail them with a reason; ``skip(doc_id)``: one whose prefill is queued or running here. Servers
    sharing the database (``store.owner``) take only the ingestions whose owner's lease ran out (it
    died): the others are still being prefilled by a live server."""
    try:
        if store.owner:
            interrupted = store.claim_stale(store.owner, store.lease_s)
        else:
            interrupted = [doc for doc in store.list() if doc.status == INGESTING]
    except StorageError as exc:  # the periodic check meets the outage every time: once in the log is enough
        (log.error if not _quiet.get("store") else log.debug)("could not look for interrupted ingestions: %s", exc)
        _quiet["store"] = True
        return
    _quiet["store"] = False
    for doc in interrupted:
        if skip(doc.id):
            continue
        try:
            keys = store.keys(doc.id)
            if not all((store.state_dir(k) / "prefix.npy").is_file() for k in keys):
                store.set_status(doc.id, FAILED, "the server stopped before the upload was stored; upload again")
            elif complete(store, doc.id):
                log.info("%s: its snapshot is complete; marked ready", doc.id)
                store.set_status(doc.id, READY)
            else:
                log.info("resuming ingestion of %s", doc.id)
                submit(doc.id, doc.tokens)
        except StorageError as exc:  # a locked or full database: it stays as it is until the next start
            log.error("%s: could not record its state at start-up: %s", doc.id, exc)
        except DocumentFilesDamaged as exc:  # never a crash at start-up over one document's files
            log.error("%s: %s; marked failed", doc.id, exc)
            try:
                store.set_status(doc.id, FAILED, f"{exc}; {exc.action.format(id=doc.id)}")
            except StorageError:
                pass
