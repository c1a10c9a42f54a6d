"""A question's admission: its document brought into the document sequence and a free sequence
sharing the prefix. The question's suffix is then prefilled a chunk per engine step
(server/engine/engine.py). Engine thread only."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ingest import snapshot
from ingest.store import INGESTING, READY, DocStore
from server.config import errors
from server.engine.hot import HotDocs
from server.engine.jobs import AnswerJob, Deleted
from server.engine.loading import Loaded
from server.engine.runner import Runner
from server.engine.sequence import Sequence, open_sequence


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
            hot, source = self.docs.restore(job.key)
        except snapshot.SnapshotIncompatible as exc:
            raise errors.SnapshotUnusable(
                f"document {doc.id} was ingested with another model or cache layout ({exc}); "
                f"re-ingest it with POST /v1/documents/{doc.id}/reingest"
            ) from None
        except snapshot.SnapshotMissing:
            self.store.set_status(doc.id, INGESTING)
            self.resubmit(doc.id, doc.tokens)
            raise errors.SnapshotRebuilding(
                f"document {doc.id}'s saved state was missing; it is being rebuilt, retry soon"
            ) from None
        n_ctx = self.loaded.ctx.n_ctx
        if len(hot.prefix) + len(job.suffix) + 1 > n_ctx:  # the route checked; a re-ingest may have grown it
            raise errors.QuestionTooLong(
                f"the question is {len(job.suffix)} tokens; with the document ({len(hot.prefix)} tokens) that "
                f"exceeds n_ctx {n_ctx}"
            )
        mtp = self.runner.share_prefix(seq_id, hot)
        seq = open_sequence(job, hot, seq_id, self.loaded, mtp, cells)
        seq.n_running = n_running  # the concurrency it was admitted into (server/engine/traffic.py)
        seq.document_state = source
        return seq
