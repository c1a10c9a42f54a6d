"""A question's admission: its document brought into the document sequence and a free sequence
sharing the prefix. The question's suffix is then prefilled a chunk per engine step
(server/engine/engine.py). Engine thread only.

Admission only reads: it returns the question's Sequence, or raises one typed reason. The reasons
its client gets at once are ApiErrors (the document was deleted, is being ingested again, failed,
was made by another model or cache layout; the question no longer fits). :class:`Unusable`
says that a saved file of the document cannot be used as it is (its snapshot went missing or was
damaged, its ``prefix.npy`` is damaged): the ingestion side, which owns the row's status, the file
lock and the prefill queue, repairs or rebuilds it (server/engine/ingestion.py
``Ingestions.recover``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ingest import snapshot
from ingest.errors import PrefixDamaged
from server.config import errors
from server.engine.drafters import LookupIndexes
from server.engine.events import Partial
from server.engine.hot import HotDoc, HotDocs
from server.engine.jobs import AnswerJob, DocStates, Pages
from server.engine.loading import Loaded
from server.engine.partial import PartialReads, Reading
from server.engine.runner import Runner
from server.engine.sequence import Sequence, open_sequence
from spec.history import AnswerHistory


class Unusable(Exception):
    """A saved file of ``key`` cannot be used as it is: ``cause`` is a snapshot.SnapshotMissing
    (evicted, damaged, refused by llama.cpp) or a PrefixDamaged."""

    def __init__(self, key: str, cause: snapshot.SnapshotMissing | PrefixDamaged) -> None:
        self.key, self.cause = key, cause
        super().__init__(f"{key}: {cause}")


def deleted(doc_id: str) -> errors.DocumentNotFound:
    return errors.DocumentNotFound(f"document {doc_id} was deleted; list them with GET /v1/documents")


@dataclass(slots=True)
class Admission:
    """What an admission reads: what the engine knows of each document (``states``), the document
    sequence, the runner (to share the prefix), the loaded model and contexts, each document's answer
    history (``history(hot)``: server/engine/history.py ``AnswerHistories.of``) and its lookup index
    (``lookups``: server/engine/drafters.py)."""

    states: DocStates
    docs: HotDocs
    runner: Runner
    loaded: Loaded
    history: Callable[[HotDoc], AnswerHistory | None] = lambda hot: None
    reading: Callable[[str], Reading | None] = lambda doc_id: None
    partial: PartialReads | None = None
    lookups: LookupIndexes = field(default_factory=LookupIndexes)

    def admit(self, job: AnswerJob, seq_id: int, cells: int, n_running: int) -> Sequence:
        """The Sequence for ``job`` in ``seq_id`` (``cells``: its KV reservation; ``n_running``: the
        questions running when it was admitted). Raises the ApiError its client should get, or
        Unusable (module docstring). A question asked ``while_reading`` about a document in its
        reading (``reading(doc_id)``: server/engine/scheduler.py ``reading_of``) is answered from the
        part read so far (server/engine/partial.py), and told so first (a Partial event); one about a
        segment of a document still being read, from that segment's snapshot, which the service
        found complete (server/service/segmented.py ``plan``): never repaired or read again from here."""
        state = self.states.get(job.doc_id)
        if state == DocStates.DELETED:
            raise deleted(job.doc_id)
        reading_segment = state == DocStates.INGESTING and job.while_reading and job.segment is not None
        if state == DocStates.INGESTING and not reading_segment:
            if job.while_reading and (seq := self._admit_reading(job, seq_id, cells, n_running)) is not None:
                return seq
            if job.while_reading:
                raise errors.DocumentNotReady(
                    f"document {job.doc_id} is waiting its turn to be read: nothing of it is read yet; retry soon"
                )
            raise errors.DocumentNotReady(f"document {job.doc_id} is being ingested again; retry soon")
        if state == DocStates.FAILED:
            raise errors.DocumentFailed(f"document {job.doc_id} failed to ingest again; GET it for the reason")
        try:
            hot, source = self.docs.restore(job.key)
        except FileNotFoundError:  # its directory went with its row (another server may have deleted it)
            raise deleted(job.doc_id) from None
        except snapshot.SnapshotIncompatible as exc:
            raise errors.SnapshotUnusable(
                f"document {job.doc_id} was ingested with another model or cache layout ({exc}); "
                f"re-ingest it with POST /v1/documents/{job.doc_id}/reingest"
            ) from None
        except (snapshot.SnapshotMissing, PrefixDamaged) as exc:  # the only file HotDocs.restore reads but the snapshot
            if reading_segment:  # a segment of a document being read: its own reading comes, not a repair
                raise errors.DocumentNotReady(f"document {job.doc_id}: this part is not read yet; retry soon") from None
            raise Unusable(job.key, exc) from exc
        n_ctx = self.loaded.ctx.n_ctx
        if len(hot.prefix) + len(job.suffix) + 1 > n_ctx:  # the route checked; a re-ingest may have grown it
            raise errors.QuestionTooLong(
                f"the question is {len(job.suffix)} tokens; with the document ({len(hot.prefix)} tokens) that "
                f"exceeds n_ctx {n_ctx}"
            )
        shared = self.runner.share_prefix(seq_id, job.key, len(hot.prefix))
        seq = open_sequence(job, hot, seq_id, self.loaded, cells, shared, self.history(hot), index=self.lookups.of(hot))
        seq.n_running = n_running  # the concurrency it was admitted into (server/engine/traffic.py)
        seq.document_state = source
        return seq

    def _admit_reading(self, job: AnswerJob, seq_id: int, cells: int, n_running: int) -> Sequence | None:
        """``job`` answered from the part of its document read so far; None when none of it is read."""
        work = self.reading(job.doc_id)
        if work is None or self.partial is None:
            return None
        read = self.partial.of(job.doc_id, work.prefix, work.n_done)
        if read is None:
            return None
        shared = self.runner.share_reading(work.seq_id, seq_id, read.n_shared)
        index = self.lookups.of(read.hot)
        seq = open_sequence(
            job, read.hot, seq_id, self.loaded, cells, shared, None, n_shared=read.n_shared, index=index
        )
        seq.n_running, seq.document_state, seq.read = n_running, "reading", read
        pages = job.pages or Pages((0,))
        where = {"page": pages.at(max(0, read.chars - 1)), "char": read.chars}
        job.emit(Partial(where, round(read.share, 4), {"first": pages.first, "last": pages.last}))
        return seq
