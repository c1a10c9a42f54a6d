"""A question's admission: its document brought into the document sequence and a free sequence
sharing the prefix. The question's suffix is then prefilled a chunk per engine step
(server/engine/engine.py). Engine thread only."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from ingest import snapshot
from ingest.errors import DocumentFilesDamaged, PrefixDamaged
from server.config import errors
from server.engine.hot import HotDocs
from server.engine.jobs import AnswerJob, Deleted
from server.engine.loading import Loaded
from server.engine.runner import Runner
from server.engine.sequence import Sequence, open_sequence
from store.docstore import INGESTING, READY, DocStore
from store.repair import repair_prefix

log = logging.getLogger("docqa.engine")


@dataclass(slots=True)
class Admission:
    """What an admission needs: the store (the document's row), the document sequence, the runner
    (to share the prefix), the loaded model and contexts, the documents deleted meanwhile, and how to
    queue a document's prefill again (a snapshot gone missing)."""

    store: DocStore
    docs: HotDocs
    runner: Runner
    loaded: Loaded
    deleted: Deleted
    resubmit: Callable[[str, int], None]  # (doc id, prefix tokens): queue its prefill

    def admit(self, job: AnswerJob, seq_id: int, cells: int, n_running: int) -> Sequence:
        """The Sequence for ``job`` in ``seq_id`` (``cells``: its KV reservation; ``n_running``: the
        questions running when it was admitted). Raises the ApiError its client should get: a deleted
        document, a snapshot to rebuild, a question too long for the context."""
        doc = self.store.get(job.doc_id)
        if doc is None or job.doc_id in self.deleted:
            raise errors.DocumentNotFound(f"document {job.doc_id} was deleted; list them with GET /v1/documents")
        if doc.status != READY:
            raise errors.DocumentNotReady(f"document {job.doc_id} is being ingested again; retry soon")
        try:
            hot, source = self._restore(job)
        except snapshot.SnapshotIncompatible as exc:
            raise errors.SnapshotUnusable(
                f"document {doc.id} was ingested with another model or cache layout ({exc}); "
                f"re-ingest it with POST /v1/documents/{doc.id}/reingest"
            ) from None
        except snapshot.SnapshotMissing as exc:  # evicted, damaged (never handed to llama.cpp), or refused
            raise self._rebuild(doc, job.key, exc) from None
        except DocumentFilesDamaged as exc:
            raise errors.damaged(exc, doc.id) from None
        n_ctx = self.loaded.ctx.n_ctx
        if len(hot.prefix) + len(job.suffix) + 1 > n_ctx:  # the route checked; a re-ingest may have grown it
            raise errors.QuestionTooLong(
                f"the question is {len(job.suffix)} tokens; with the document ({len(hot.prefix)} tokens) that "
                f"exceeds n_ctx {n_ctx}"
            )
        shared = self.runner.share_prefix(seq_id, job.key, len(hot.prefix))
        seq = open_sequence(job, hot, seq_id, self.loaded, cells, shared)
        seq.n_running = n_running  # the concurrency it was admitted into (server/engine/traffic.py)
        seq.document_state = source
        return seq

    def _restore(self, job: AnswerJob):
        """``HotDocs.restore``, with a damaged ``prefix.npy`` rebuilt from the stored text once
        (store/repair.py ``repair_prefix``; PrefixDamaged again when that does not give the
        document's tokens)."""
        try:
            return self.docs.restore(job.key)
        except PrefixDamaged as exc:
            log.warning("%s: %s; rebuilding it from the stored text", job.key, exc)
            text = self.store.read_text(job.doc_id).text
            if job.segment is not None:
                segment = self.store.read_segments(job.doc_id)[job.segment]
                text = text[segment.start : segment.end]
            repair_prefix(self.store.state_dir(job.key), text, self.loaded.layout, self.loaded.model, job.n_prefix)
            return self.docs.restore(job.key)

    def _rebuild(self, doc, key: str, exc: snapshot.SnapshotMissing) -> errors.SnapshotRebuilding:
        """The saved state of ``key`` cannot be used: remove what is left of it, prefill the document
        again (its complete segments are kept), and the question's client is told why."""
        reason = getattr(exc, "reason", None) or str(exc)
        if isinstance(exc, snapshot.SnapshotDamaged):
            log.warning("%s: the saved state is damaged (%s); prefilling it again", key, reason)
            why = f"was damaged ({reason})"
        elif isinstance(exc, snapshot.SnapshotRefused):
            log.warning("%s: llama.cpp refused the saved state (%s); prefilling it again", key, reason)
            why = f"was refused by llama.cpp ({reason})"
        else:
            why = "was missing"
        with self.store.holding(doc.id):
            snapshot.remove(self.store.state_dir(key))
        self.store.set_status(doc.id, INGESTING)
        self.resubmit(doc.id, doc.tokens)
        return errors.SnapshotRebuilding(
            f"document {doc.id}'s saved state {why}; it is being prefilled again, retry soon"
        )
