"""Ingestion on the engine thread: prefill a stored document's prefix, one chunk per engine step,
snapshot it (ingest/snapshot.py), keep it hot, and mark it ready.

The upload side (extract, lay out, tokenize, budget check, store: ingest/pipeline.py) has already
run; this is the part that needs the model. Between chunks the engine decodes the running answers,
so a long document never stalls their streams (server/engine/engine.py). A document is ``ready`` only once
its snapshot manifest is on disk, so a crash never leaves a half-written document marked ready; an
ingestion that is stopped (deleted, server shutdown) leaves no snapshot, and one interrupted by a
restart is resumed (server/engine/recovery.py ``resume_interrupted``).

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
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ingest import snapshot
from ingest.errors import DocumentFilesDamaged, PrefixDamaged, StorageError
from server.config import errors
from server.engine import recovery
from server.engine.admission import Unusable, deleted
from server.engine.contexts import Contexts
from server.engine.hot import HotDocs
from server.engine.jobs import AnswerJob, DocStates
from server.engine.repairs import Repairs
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
        contexts: Contexts,
        progress: dict[str, float],
        key: str | None = None,
        counted: tuple[int, int] | None = None,
        keep: bool = True,
    ):
        self.doc_id, self.prefix, self.seq_id = doc_id, prefix, seq_id
        self.key = key or doc_id
        self.docs, self.contexts, self.progress, self.keep = docs, contexts, progress, keep
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
        self.contexts.read(chunk, self.n_done, self.seq_id)
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
        docs.remember(self.key, self.prefix, docs.ram_state(seq, reading=True), last_hidden, prefilled=True)
        # Read apart (DOCQA_CPU_REPACK=pair), the target holds none of it: its first question restores
        # it from the RAM state just kept (or the snapshot), as any document in RAM.
        if self.contexts.reader is not None:
            if seq == docs.seq_id:
                docs.clear()  # the companions followed the reading there; the target holds nothing
        # A sliding-window cache (without swa_full) still holds every cell the prefill cycled through;
        # shared into a question's sequence by seq_cp, cells of two sequences can never be reused
        # (llama-kv-cache.cpp find_slot), and the window cache fills up. The snapshot holds only the
        # last n_swa cells, so the first question restores it instead.
        elif seq == docs.seq_id:
            docs.hold(self.key, self.n_tokens) if keep else docs.hold(None)
            if keep:
                self.contexts.companions.adopt(self.key, seq)
        elif idle and keep:
            docs.adopt(self.key, seq)
        self.release()
        if not recovery.complete(store, self.doc_id):
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
        """Free the ingestion's own sequence (the document sequence is left to what it holds), and the
        reader's (DOCQA_CPU_REPACK=pair) in any case."""
        if self.seq_id != self.docs.seq_id:
            self.contexts.release(self.seq_id)
        else:
            self.contexts.release_reading(self.seq_id)

    def abandon(self) -> None:
        """Stop without a snapshot (the document was deleted, or the server is stopping)."""
        if self.seq_id == self.docs.seq_id:
            self.docs.clear()
        self.progress.pop(self.doc_id, None)
        self.release()


class Ingestions:
    """The engine's ingestions: they start in ``seq_id`` (the scheduler's ingest sequence), one at a
    time in the scheduler's ingest slot, a chunk per engine step. They own what changes a document's
    row and files on the engine thread: its status, its snapshot under its file lock, the prefill
    queued again, and the repairs of what admission found unusable (:meth:`recover`)."""

    def __init__(
        self,
        store: DocStore,
        docs: HotDocs,
        contexts: Contexts,
        progress: dict[str, float],
        states: DocStates,
        seq_id: int,
        resubmit: Callable[[str, int], None] = lambda doc_id, n: None,
        disk_budget: int | None = None,
        keep: bool = True,
        repairs: Repairs | None = None,
    ) -> None:
        """``states``: what the engine knows of each document, kept here as ingestions end;
        ``resubmit(doc_id, tokens)``: queue a document's prefill again (its missing segments);
        ``disk_budget``: DOCQA_DISK_BUDGET_BYTES, kept after each document that becomes ready, on a
        worker thread of its own (server/engine/recovery.py ``keep_disk_budget``: it reads every row
        and stats the snapshots, which must not hold up the running answers); ``keep``: a prefilled
        sequence may serve questions as it is (Ingestion); ``repairs``: the repair path a damaged
        prefix is made again by (server/engine/repairs.py, with the loaded tokenizer and layout)."""
        self.store, self.docs, self.contexts, self.progress = store, docs, contexts, progress
        self.states, self.seq_id = states, seq_id
        self.resubmit, self.disk_budget, self.keep = resubmit, disk_budget, keep
        self.repairs = repairs if repairs is not None else Repairs(store)
        self._disk = ThreadPoolExecutor(1, thread_name_prefix="docqa-disk")

    def start(self, job, idle: bool, seq_id: int | None = None, held: int = 0) -> Ingestion | None:
        """Begin ``job``'s document in ``seq_id`` (default: the ingest sequence); None if there is
        nothing to prefill (it is gone, no longer ``ingesting``, or the segment's snapshot is
        complete). ``idle``: no question is running, so the document sequence is emptied when the new
        document needs its room; ``held``: KV cells another reading holds meanwhile (a paused one)."""
        doc = self.store.get(job.doc_id)
        if doc is None or doc.status != INGESTING:
            if doc is None:
                self.states.mark(job.doc_id, DocStates.DELETED)
            elif doc.status == READY:
                self.states.ready(doc.id)  # the last of its segments made it ready meanwhile
            return None
        docs = self.docs
        try:
            prefix = self.store.read_prefix(job.key)
        except DocumentFilesDamaged as exc:  # a prefix.npy damaged on disk before its prefill began
            self._fail(doc.id, f"{exc}; {exc.action.format(id=doc.id)}")
            return None
        if job.key != doc.id and snapshot.describes(self.store.state_dir(job.key), prefix):
            if recovery.complete(self.store, doc.id):  # the segment was kept; the last one makes the document ready
                self.progress.pop(doc.id, None)
                self.store.set_status(doc.id, READY)
                self.states.ready(doc.id)
            return None
        crowded = docs.n_loaded + held + job.n_tokens > self.contexts.target.n_ctx
        if idle and crowded and self.contexts.reader is None:  # a reader reads in a cache of its own
            docs.clear()
        counted = (job.tokens_before, job.tokens_total)
        seq = self.seq_id if seq_id is None else seq_id
        return Ingestion(doc.id, prefix, seq, docs, self.contexts, self.progress, job.key, counted, self.keep)

    def step(self, work: Ingestion, n_max: int, idle: bool) -> bool:
        """One chunk of ``work``; at its end, its snapshot (or its failure). True once the ingestion is
        over (done, failed or abandoned) and leaves the ingest slot. ``idle``: no question is running."""
        try:
            if self.states.get(work.doc_id) == DocStates.DELETED:
                work.abandon()
            elif not work.step(n_max):
                return False
            elif not work.finish(self.store, idle=idle):
                work.abandon()
            elif work.ready:
                self.states.ready(work.doc_id)
                if self.disk_budget is not None:
                    self._disk.submit(recovery.keep_disk_budget, self.store, self.disk_budget, work.doc_id)
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

    def recover(self, job: AnswerJob, why: Unusable, repaired: bool = False) -> errors.ApiError | None:
        """Repair or rebuild what admission found unusable for ``job`` (``repaired``: the prefix was
        repaired for it already). A damaged ``prefix.npy`` is laid out and tokenized again from the
        stored text (server/engine/repairs.py, the one repair path): None, admit the question again. A snapshot that
        cannot be used is removed and the document prefilled again (its complete segments are kept):
        the error its client gets (SnapshotRebuilding: retry soon)."""
        cause, doc_id = why.cause, job.doc_id
        if isinstance(cause, PrefixDamaged):
            if repaired:
                return errors.damaged(cause, doc_id)
            try:
                self.repairs.repair(job.key, cause)
            except DocumentFilesDamaged as exc:
                return errors.damaged(exc, doc_id)
            return None
        reason = getattr(cause, "reason", None) or str(cause)
        if isinstance(cause, snapshot.SnapshotDamaged):
            log.warning("%s: the saved state is damaged (%s); prefilling it again", job.key, reason)
            how = f"was damaged ({reason})"
        elif isinstance(cause, snapshot.SnapshotRefused):
            log.warning("%s: llama.cpp refused the saved state (%s); prefilling it again", job.key, reason)
            how = f"was refused by llama.cpp ({reason})"
        elif isinstance(cause, snapshot.SnapshotStale):
            log.info(
                "%s: the saved state was made with flash attention set otherwise (%s); prefilling it again",
                job.key,
                reason,
            )
            how = f"was made with flash attention set otherwise ({reason})"
        else:
            how = "was missing"
        doc = self.store.get(doc_id)
        if doc is None:
            return deleted(doc_id)
        with self.store.holding(doc.id):
            snapshot.remove(self.store.state_dir(job.key))
        self.store.set_status(doc.id, INGESTING)
        self.resubmit(doc.id, doc.tokens)
        return errors.SnapshotRebuilding(f"document {doc.id}'s saved state {how}; it is prefilled again, retry soon")

    def close(self) -> None:
        """Wait for the disk worker."""
        self._disk.shutdown(wait=True)

    def _fail(self, doc_id: str, reason: str) -> None:
        self.states.mark(doc_id, DocStates.FAILED)
        try:
            self.store.set_status(doc_id, FAILED, reason)
        except StorageError as exc:  # still ``ingesting``: the next start prefills it again
            log.error("%s: could not record the failure %r: %s", doc_id, reason, exc)
