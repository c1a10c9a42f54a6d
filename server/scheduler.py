"""Which job runs next: the waiting queue, the running sequences, and KV-cell accounting.

Admission is FIFO, with one exception. A question about the document in use joins the running batch
while a sequence and enough KV cells are free. A question about another document waits until the
running questions have finished (they share the document sequence), and everything behind it waits
too, so nothing starves. An ingestion starts as soon as it has room in the KV cache next to the
document in use and its questions (``parallel_ingest``; otherwise, or without room, once the batch
has drained, and nothing behind it is admitted meanwhile); while one ingestion runs, the next waits
without holding up the questions behind it. Engine thread only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Protocol

from server.jobs import AnswerJob, IngestJob, Job
from server.sequence import Sequence


class Ingesting(Protocol):
    n_tokens: int  # the document's prefix tokens, all of them held in its sequence by the end
    seq_id: int


class Scheduler:
    """``n_seqs`` question sequences (ids 1..n_seqs; 0 is the document's) in a KV cache of ``n_ctx``
    cells. A question reserves its suffix, its answer up to ``answer_reserve`` tokens and one draft
    window (``max_window`` + 1) beyond the shared prefix; an ingestion in a sequence of its own
    reserves its whole prefix."""

    def __init__(self, n_seqs: int, n_ctx: int, answer_reserve: int, max_window: int, parallel_ingest: bool) -> None:
        self.n_seqs, self.n_ctx = n_seqs, n_ctx
        self.answer_reserve, self.max_window = answer_reserve, max_window
        self.parallel_ingest = parallel_ingest
        self.waiting: deque[Job] = deque()
        self.running: dict[int, Sequence] = {}  # seq_id -> question, in admission order
        self.ingesting: Ingesting | None = None

    @property
    def ingest_seq(self) -> int:
        """The sequence an ingestion prefills: its own, or the document sequence (0)."""
        return self.n_seqs + 1 if self.parallel_ingest else 0

    def add(self, job: Job) -> None:
        self.waiting.append(job)

    def refuse_waiting(self, error) -> None:
        """Empty the queue, failing its questions with ``error`` (ingestions stay resumable)."""
        for job in self.waiting:
            if isinstance(job, AnswerJob):
                job.fail(error)
        self.waiting.clear()

    def drop_cancelled(self) -> None:
        """Forget waiting questions whose client has gone."""
        if any(isinstance(j, AnswerJob) and j.cancelled.is_set() for j in self.waiting):
            self.waiting = deque(j for j in self.waiting if not (isinstance(j, AnswerJob) and j.cancelled.is_set()))

    def next_job(self, loaded: str | None, n_prefix: Callable[[str], int]) -> Job | None:
        """The next waiting job that may start now, removed from the queue; None if none may.
        ``loaded``: the document (or segment, ingest/segments.key) the document sequence holds;
        ``n_prefix(key)``: its prefix length in tokens (0 when not known yet)."""
        for i, job in enumerate(self.waiting):
            if isinstance(job, IngestJob):
                if self.ingesting is not None:
                    continue  # one ingestion at a time; the questions behind it go on
                if not self._ingest_fits(job, n_prefix(loaded) if loaded else 0):
                    return None  # it waits for the batch to drain, and so does everything behind it
            elif not self._question_fits(job, loaded, n_prefix):
                return None
            del self.waiting[i]
            return job
        return None

    def _ingest_fits(self, job: IngestJob, n_loaded: int) -> bool:
        if not self.running:
            return True  # the document sequence may be cleared to make room
        return self.parallel_ingest and n_loaded + self.cells_in_use() + job.n_tokens <= self.n_ctx

    def _question_fits(self, job: AnswerJob, loaded: str | None, n_prefix: Callable[[str], int]) -> bool:
        if self.ingesting is not None and self.ingesting.seq_id == 0:
            return False  # the document sequence is being prefilled
        if not self.running:
            return True
        return (
            job.key == loaded
            and len(self.running) < self.n_seqs
            and n_prefix(job.key) + self.cells_in_use() + self.cells_needed(job) <= self.n_ctx
        )

    def cells_needed(self, job: AnswerJob, n_suffix: int | None = None) -> int:
        """KV cells reserved for a question beyond the shared prefix: its suffix and a draft window,
        plus its answer up to ``answer_reserve`` tokens. A longer answer competes for the free cells;
        if they run out it ends with finish_reason "length" (server/runner.py), so one huge
        ``max_tokens`` cannot hold every other question back. Before tokenizing (``n_suffix`` None)
        the suffix is estimated generously: a token is rarely under 2 characters."""
        if n_suffix is None:
            n_suffix = job.n_chars // 2 + 64 * (1 + len(job.history))
        return n_suffix + min(job.params.max_tokens, self.answer_reserve) + self.max_window + 1

    def cells_in_use(self) -> int:
        """Cells reserved beyond the document prefix: the running questions', and an ingestion's."""
        ingest = self.ingesting.n_tokens if self.ingesting is not None and self.ingesting.seq_id != 0 else 0
        return ingest + sum(seq.cells for seq in self.running.values())

    def free_seq_id(self) -> int:
        """A question sequence id no running question holds (the caller checked there is one)."""
        return next(i for i in range(1, self.n_seqs + 1) if i not in self.running)
