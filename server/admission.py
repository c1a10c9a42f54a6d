"""A question's admission: its document brought into the document sequence, the question laid out
after it, and a free sequence sharing the prefix. The question is then prefilled a chunk per engine
step (server/engine.py). Engine thread only."""

from __future__ import annotations

from typing import Protocol

from ingest import snapshot
from ingest.store import INGESTING, READY, DocStore
from server import errors
from server.hot import HotDocs
from server.jobs import AnswerJob, Deleted
from server.loading import Loaded
from server.runner import Runner
from server.scheduler import Scheduler
from server.sequence import Sequence, open_sequence


class Engine(Protocol):
    """The parts of server/engine.Engine an admission uses."""

    store: DocStore
    docs: HotDocs
    loaded: Loaded
    scheduler: Scheduler
    runner: Runner
    deleted: Deleted

    def submit_ingest(self, doc_id: str, n_tokens: int) -> None: ...


def admit(job: AnswerJob, engine: Engine) -> Sequence:
    """The Sequence for ``job``; raises the ApiError its client should get (a deleted document, a
    snapshot to rebuild, a question too long for the context)."""
    store, docs, loaded, scheduler, runner = engine.store, engine.docs, engine.loaded, engine.scheduler, engine.runner
    doc = store.get(job.doc_id)
    if doc is None or job.doc_id in engine.deleted:
        raise errors.DocumentNotFound(f"document {job.doc_id} was deleted; list them with GET /v1/documents")
    if doc.status != READY:
        raise errors.DocumentNotReady(f"document {job.doc_id} is being ingested again; retry soon")
    if scheduler.running and docs.loaded != job.key:
        raise RuntimeError("cannot switch documents while questions are running")  # the scheduler prevents it
    try:
        hot = docs.restore(job.key)
    except snapshot.SnapshotIncompatible as exc:
        raise errors.SnapshotUnusable(
            f"document {doc.id} was ingested with another model or cache layout ({exc}); "
            f"re-ingest it with POST /v1/documents/{doc.id}/reingest"
        ) from None
    except snapshot.SnapshotMissing:
        store.set_status(doc.id, INGESTING)
        engine.submit_ingest(doc.id, doc.tokens)
        raise errors.SnapshotRebuilding(
            f"document {doc.id}'s saved state was missing; it is being rebuilt, retry soon"
        ) from None
    suffix = loaded.layout.question_suffix(loaded.model, job.question, job.history)
    if len(hot.prefix) + len(suffix) + 1 > loaded.ctx.n_ctx:
        raise errors.QuestionTooLong(
            f"the question is {len(suffix)} tokens; with the document ({len(hot.prefix)} tokens) that "
            f"exceeds n_ctx {loaded.ctx.n_ctx}"
        )
    seq_id = scheduler.free_seq_id()
    mtp = runner.share_prefix(seq_id, hot)
    cells = scheduler.cells_needed(job, len(suffix))
    seq = open_sequence(job, hot, suffix, seq_id, loaded, mtp, cells)
    seq.n_running = len(scheduler.running)  # the concurrency it was admitted into (server/traffic.py)
    seq.document_state = docs.last_source
    return seq
