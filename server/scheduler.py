"""Which job runs next: the waiting queue, the running sequences, and KV-cell accounting.

Admission is FIFO. A question about the document in use joins the running batch while a sequence
and enough KV cells are free; a question about another document, or an ingestion, waits until the
running questions have finished (they need the document sequence), and everything behind it waits
too, so nothing starves. Engine thread only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from server.jobs import AnswerJob, IngestJob, Job
from server.sequence import Sequence


class Scheduler:
    """``n_seqs`` question sequences (ids 1..n_seqs; 0 is the document's) in a KV cache of ``n_ctx``
    cells. A question reserves its suffix, its answer up to ``answer_reserve`` tokens and one draft
    window (``max_window`` + 1) beyond the shared prefix."""

    def __init__(self, n_seqs: int, n_ctx: int, answer_reserve: int, max_window: int) -> None:
        self.n_seqs, self.n_ctx = n_seqs, n_ctx
        self.answer_reserve, self.max_window = answer_reserve, max_window
        self.waiting: deque[Job] = deque()
        self.running: dict[int, Sequence] = {}  # seq_id -> question

    def add(self, job: Job) -> None:
        self.waiting.append(job)

    def next_job(self, loaded: str | None, n_prefix: Callable[[str], int]) -> Job | None:
        """The next waiting job that may start now, removed from the queue; None if the head must
        wait. ``loaded``: the document the document sequence holds; ``n_prefix(doc_id)``: its prefix
        length in tokens (0 when not known yet). Cancelled questions are dropped on the way."""
        while self.waiting:
            job = self.waiting[0]
            if isinstance(job, IngestJob):
                if self.running:
                    return None  # ingestion needs the document sequence
            elif job.cancelled.is_set():
                self.waiting.popleft()
                continue
            elif self.running and (
                job.doc_id != loaded
                or len(self.running) >= self.n_seqs
                or n_prefix(job.doc_id) + self.cells_in_use() + self.cells_needed(job) > self.n_ctx
            ):
                return None
            return self.waiting.popleft()
        return None

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
        return sum(seq.cells for seq in self.running.values())

    def free_seq_id(self) -> int:
        """A question sequence id no running question holds (the caller checked there is one)."""
        return next(i for i in range(1, self.n_seqs + 1) if i not in self.running)
