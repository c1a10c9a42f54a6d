"""Which job runs next, and the sequences' lifecycle: the waiting queue, the running questions, the
ingest slot, and KV-cell accounting. Only the scheduler writes these; the engine asks it.

Questions are admitted FIFO, with one exception. A question about the document in use joins the
running batch while a sequence and enough KV cells are free. A question about another document waits
until the running questions have finished (they share the document sequence), and everything behind
it waits too, so nothing starves. An ingestion starts as soon as it has room in the KV cache next to
the document in use and its questions (``parallel_ingest``; otherwise, or without room, once the
batch has drained, and nothing behind it is admitted meanwhile); while one ingestion runs, the next
waits without holding up the questions behind it.

**The reading queue: shortest expected reading first** (issue 51). Of the documents waiting to be
read, the one with the fewest tokens left to read goes next (a long document's segments count
together, so they keep their order), whatever the order they came in: a 500-token PDF never waits
behind a book. A reading already under way is set aside (paused) for a waiting one that has less
than :data:`PREEMPT_SHARE` of its tokens left to read: it keeps its progress, its cells staying in
its own sequence, and goes on where it stopped when no shorter reading waits. That needs a second
ingest sequence (``pause_seq``: on a model without recurrent state, with ``parallel_ingest``), and
at most one reading is paused at a time. Why this and not reading slices shared between the waiting
documents: bench/results/reading-queue.md.

**Between two segments, the questions first.** A long document is read one segment at a time, and a
question seldom fits next to a segment being read (segments are sized to fill the cache). When a
segment's reading ends and the next one of the same document would start, the questions that were
waiting at that moment start first if they fit (one answered from the segments read so far among
them, server/service/segmented.py); the next segment then waits for room as any reading does, and a
question asked after the boundary waits for the next one, so the reading is never starved.

The price of shortest first: a big document also waits for the smaller ones that arrive while it
waits (a folder of a thousand small files is read before it, the order a watched folder reads its
files in by default, ingest/folder.py DOCQA_WATCH_ORDER). Engine thread only, as nano-vllm's
``Scheduler``.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import deque
from typing import Protocol

from server.engine.jobs import AnswerJob, IngestJob, Job
from server.engine.sequence import DOC_SEQ, Sequence

RETRY_FIRST_S, RETRY_MAX_S = 0.25, 30.0  # an ingestion's retries while the store is away (seconds)
# A reading under way is paused for a waiting one with less than this share of its tokens left to
# read: a shorter one that is not much shorter waits instead (each switch costs a chunk's fixed part).
PREEMPT_SHARE = 0.5


class Ingesting(Protocol):
    doc_id: str
    key: str  # the document, or the segment being read (ingest/segments.key)
    n_tokens: int  # the document's (or segment's) prefix tokens, all of them held in its sequence by the end
    n_done: int  # of them prefilled so far
    seq_id: int


class Scheduler:
    """``n_seqs`` question sequences (ids 1..n_seqs; ``DOC_SEQ`` is the document's) in a KV cache of
    ``n_ctx`` cells. A question reserves its suffix (exact: the route tokenized it), its answer up to
    ``answer_reserve`` tokens and one draft window (``max_window`` + 1) beyond the shared prefix; an
    ingestion in a sequence of its own reserves its whole prefix."""

    def __init__(
        self,
        n_seqs: int,
        n_ctx: int,
        answer_reserve: int,
        max_window: int,
        parallel_ingest: bool,
        pause_seq: bool = False,
        copies_reading: bool = False,
    ) -> None:
        """``pause_seq``: a second ingest sequence (``n_seqs + 2``), so that a reading can be paused
        in its own while a shorter one is read (only with ``parallel_ingest``); ``copies_reading``: the
        readings are in a context of their own (a reader, server/engine/contexts.py): they take no
        cell of this cache, the reader's ``n_ctx`` cells bound them, and a question asked while a
        document is read gets a copy of the part read in cells of its own (``Contexts.share_reading``)."""
        self.copies_reading = copies_reading
        self.n_seqs, self.n_ctx = n_seqs, n_ctx
        self.answer_reserve, self.max_window = answer_reserve, max_window
        self.parallel_ingest = parallel_ingest
        self.pause_seq = pause_seq and parallel_ingest
        self._waiting: deque[Job] = deque()
        self._running: dict[int, Sequence] = {}  # seq_id -> question, in admission order
        self._ingesting: Ingesting | None = None
        self._paused: Ingesting | None = None  # a longer reading set aside, its cells kept in its sequence
        self._deferred: list[tuple[float, int, Job]] = []  # heap of (monotonic due time, order, job)
        self._order = itertools.count()
        # where the last reading left the slot: (its document, perf_counter time), for the questions
        # that may go before its next segment
        self._boundary: tuple[str, float] | None = None

    # -- what the engine reads ------------------------------------------------------------------------
    @property
    def ingest_seq(self) -> int:
        """The sequence an ingestion prefills: its own, or the document sequence."""
        return self.n_seqs + 1 if self.parallel_ingest else DOC_SEQ

    @property
    def ingest_seqs(self) -> tuple[int, ...]:
        """Every sequence an ingestion may prefill: :attr:`ingest_seq`, and with ``pause_seq`` the
        one after it."""
        return (self.ingest_seq, self.ingest_seq + 1) if self.pause_seq else (self.ingest_seq,)

    def free_ingest_seq(self) -> int:
        """The ingest sequence the next ingestion prefills: one the paused reading does not hold."""
        held = self._paused.seq_id if self._paused is not None else None
        return next(i for i in self.ingest_seqs if i != held)

    @property
    def ingesting(self) -> Ingesting | None:
        """The ingestion in the ingest slot, if any."""
        return self._ingesting

    @property
    def paused(self) -> Ingesting | None:
        """The reading set aside for a shorter one, if any (its cells stay in its sequence)."""
        return self._paused

    @property
    def n_waiting(self) -> int:
        return len(self._waiting) + len(self._deferred)

    @property
    def n_running(self) -> int:
        return len(self._running)

    @property
    def idle(self) -> bool:
        """Nothing waits, runs or ingests: the engine thread may block for the next job."""
        return not self._running and not self._waiting and self._ingesting is None and self._paused is None

    def running(self) -> list[Sequence]:
        """The running questions, in admission order (a copy: the engine may release while iterating)."""
        return list(self._running.values())

    def answering(self) -> list[Sequence]:
        """The running questions whose suffix is in: each decodes one verify step per engine step."""
        return [seq for seq in self._running.values() if not seq.prefilling]

    def prefilling(self) -> list[Sequence]:
        """The running questions whose suffix is still being prefilled, oldest first."""
        return [seq for seq in self._running.values() if seq.prefilling]

    def holds(self, seq: Sequence) -> bool:
        """``seq`` is still running (not released)."""
        return self._running.get(seq.seq_id) is seq

    def reading_of(self, doc_id: str) -> Ingesting | None:
        """The reading of ``doc_id`` in a sequence of its own (in the slot or paused) that a question may
        be answered from while it goes on (server/engine/partial.py): a whole document's, not a
        segment's; None when there is none."""
        for work in (self._ingesting, self._paused):
            if work is not None and work.doc_id == doc_id and work.key == doc_id and work.seq_id != DOC_SEQ:
                return work
        return None

    # -- the waiting queue ----------------------------------------------------------------------------
    def add(self, job: Job) -> None:
        self._waiting.append(job)

    def retry(self, job: IngestJob) -> float:
        """Queue ``job`` again later (it met an unreachable store): after 0.5 s, doubling per attempt,
        at most :data:`RETRY_MAX_S`. Returns the delay in seconds."""
        job.attempts += 1
        delay = min(RETRY_MAX_S, RETRY_FIRST_S * 2**job.attempts)
        heapq.heappush(self._deferred, (time.monotonic() + delay, next(self._order), job))
        return delay

    def wait_s(self) -> float | None:
        """Seconds until the next deferred job is due (0 when one is), None when none is deferred:
        how long the idle engine thread may wait for a new job."""
        return max(0.0, self._deferred[0][0] - time.monotonic()) if self._deferred else None

    def refuse_waiting(self, error: Exception) -> None:
        """Empty the queue, failing its questions with ``error`` (ingestions stay resumable)."""
        for job in self._waiting:
            if isinstance(job, AnswerJob):
                job.fail(error)
        self._waiting.clear()
        self._deferred.clear()

    def drop_cancelled(self) -> None:
        """Forget waiting questions whose client has gone."""
        if any(isinstance(j, AnswerJob) and j.cancelled.is_set() for j in self._waiting):
            self._waiting = deque(j for j in self._waiting if not (isinstance(j, AnswerJob) and j.cancelled.is_set()))

    def next_job(self, loaded: str | None, n_loaded: int) -> Job | None:
        """The next waiting job that may start now, removed from the queue; None if none may.
        ``loaded``: the document (or segment, ingest/segments.key) the document sequence holds, and
        ``n_loaded`` its prefix length in tokens. The ingestion it gives may pause the one reading
        (the module docstring): that one is then :attr:`paused`, and the slot is free for it."""
        now = time.monotonic()
        while self._deferred and self._deferred[0][0] <= now:
            self._waiting.append(heapq.heappop(self._deferred)[2])
        for i, job in enumerate(self._waiting):
            if isinstance(job, IngestJob):
                job = self._shortest()
                if self._ingesting is not None:
                    if not self._preempts(job, n_loaded):
                        continue  # one ingestion at a time; the questions behind it go on
                    self._paused, self._ingesting = self._ingesting, None
                elif self._paused is not None and (
                    self.left(self._paused.doc_id) <= self.left(job.doc_id) or not self._ingest_fits(job, n_loaded)
                ):
                    continue  # the paused reading goes on first (resume)
                elif (first := self._before_next_segment(job, loaded, n_loaded)) is not None:
                    self._waiting.remove(first)
                    return first
                elif not self._ingest_fits(job, n_loaded):
                    return None  # it waits for the batch to drain, and so does everything behind it
                self._waiting.remove(job)
                return job
            elif not self._question_fits(job, loaded, n_loaded):
                return None
            del self._waiting[i]
            return job
        return None

    def _before_next_segment(self, job: IngestJob, loaded: str | None, n_loaded: int) -> AnswerJob | None:
        """A question waiting since before the last reading left the slot, which fits and starts
        before ``job`` when ``job`` goes on with the same document's next segment (the module
        docstring); None otherwise."""
        boundary = self._boundary
        if boundary is None or job.doc_id != boundary[0] or job.tokens_before == 0:
            return None
        for waiting in self._waiting:
            if isinstance(waiting, AnswerJob) and waiting.t_start < boundary[1]:
                return waiting if self._question_fits(waiting, loaded, n_loaded) else None  # FIFO among them
        return None

    def resume(self) -> Ingesting | None:
        """Put the paused reading back in the free ingest slot (next_job gave no shorter one that
        fits); returns it, or None when there is none to resume or the slot is taken."""
        if self._ingesting is not None or self._paused is None:
            return None
        self._ingesting, self._paused = self._paused, None
        return self._ingesting

    # -- the reading queue ------------------------------------------------------------------------
    def left(self, doc_id: str) -> int:
        """Tokens of ``doc_id`` left to read: of its waiting ingestions (a long document's segments)
        and of the one reading or paused."""
        return self._lefts().get(doc_id, 0)

    def reading_order(self) -> list[tuple[str, int]]:
        """The documents waiting to be read or being read, with their tokens left to read, in the
        order they are expected to be read: the one reading, then the rest shortest first (the
        paused one among them), for the position and wait each is shown (server/engine/reading.py)."""
        lefts = self._lefts()
        first = self._ingesting.doc_id if self._ingesting is not None else None
        rest = sorted((d for d in lefts if d != first), key=lambda d: lefts[d])  # stable: queue order among equals
        return [(d, lefts[d]) for d in ([first] if first is not None else []) + rest]

    def _lefts(self) -> dict[str, int]:
        """Tokens left to read by document, in the order the documents were queued (one pass)."""
        lefts: dict[str, int] = {}
        for work in (self._ingesting, self._paused):
            if work is not None:
                lefts[work.doc_id] = lefts.get(work.doc_id, 0) + work.n_tokens - work.n_done
        for job in self._waiting_ingests():
            lefts[job.doc_id] = lefts.get(job.doc_id, 0) + job.n_tokens
        return lefts

    def _waiting_ingests(self) -> list[IngestJob]:
        return [j for j in self._waiting if isinstance(j, IngestJob)] + [
            j for _, _, j in sorted(self._deferred) if isinstance(j, IngestJob)
        ]

    def _shortest(self) -> IngestJob:
        """The waiting ingestion whose document has the fewest tokens left to read (the first queued
        of equals, so a document's segments keep their order)."""
        lefts = self._lefts()
        jobs = [j for j in self._waiting if isinstance(j, IngestJob)]
        return min(jobs, key=lambda j: lefts[j.doc_id])  # min keeps the first of equals

    def _preempts(self, job: IngestJob, n_loaded: int) -> bool:
        """``job`` pauses the reading under way: there is a sequence to pause it in, its document has
        less than PREEMPT_SHARE of the other's tokens left, and it fits next to everything held."""
        work = self._ingesting
        if not self.pause_seq or self._paused is not None or work is None or work.doc_id == job.doc_id:
            return False
        lefts = self._lefts()
        if lefts[job.doc_id] >= PREEMPT_SHARE * lefts[work.doc_id]:
            return False
        if self.copies_reading:  # both readings in the reader's cache
            return self._read_cells() + job.n_tokens <= self.n_ctx
        return n_loaded + self.cells_in_use() + job.n_tokens <= self.n_ctx

    # -- a sequence's life ----------------------------------------------------------------------------
    def free_seq_id(self) -> int:
        """A question sequence id no running question holds (next_job admitted only with one free)."""
        return next(i for i in range(1, self.n_seqs + 1) if i not in self._running)

    def start(self, seq: Sequence) -> None:
        """``seq`` was admitted: it runs from the next step (its reserved cells count from now)."""
        if seq.seq_id in self._running or not 1 <= seq.seq_id <= self.n_seqs:
            raise ValueError(f"sequence {seq.seq_id} is taken or not a question sequence")
        self._running[seq.seq_id] = seq

    def release(self, seq: Sequence) -> bool:
        """``seq`` is done (finished, failed or cancelled): its sequence is free. False if it was not
        running (released before)."""
        if self._running.get(seq.seq_id) is not seq:
            return False
        del self._running[seq.seq_id]
        return True

    def begin_ingest(self, work: Ingesting) -> None:
        """An ingestion takes the ingest slot."""
        if self._ingesting is not None:
            raise ValueError("an ingestion is already running")
        self._ingesting = work

    def end_ingest(self) -> Ingesting | None:
        """The ingestion left the slot (finished, failed or stopped); returns it."""
        work, self._ingesting = self._ingesting, None
        if work is not None:
            self._boundary = (work.doc_id, time.perf_counter())
        return work

    def end_paused(self) -> Ingesting | None:
        """The paused reading is given up (its document deleted, the server stopping); returns it."""
        work, self._paused = self._paused, None
        return work

    # -- KV cells -------------------------------------------------------------------------------------
    def cells_needed(self, job: AnswerJob) -> int:
        """KV cells reserved for a question beyond the shared prefix: its suffix (the route tokenized
        it), a draft window, what a constraint decodes before the answer (a quote and its scaffolding),
        and its answer up to ``answer_reserve`` tokens. A longer answer competes
        for the free cells; if they run out it ends with finish_reason "length"
        (server/engine/runner.py), so one huge ``max_tokens`` cannot hold every other question back."""
        answer = min(job.params.max_tokens, self.answer_reserve)
        own = len(job.suffix) + job.n_constrained + answer + self.max_window + 1
        if job.while_reading and (work := self.reading_of(job.doc_id)) is not None:
            # and the tokens that close the document; the part read is the reading's own cells, shared
            # (its reservation holds them, and cells_read once the reading ends), or a copy of them
            return own + job.n_closing + (work.n_done if self.copies_reading else 0)
        return own

    def cells_in_use(self) -> int:
        """Cells reserved beyond the document prefix: the running questions', the ingestions' in
        sequences of their own (the one reading and the paused one), and those of a finished reading
        that questions answered from it still hold."""
        return self.cells_reading() + self.cells_read() + sum(seq.cells for seq in self._running.values())

    def cells_read(self) -> int:
        """Cells of readings now over that running questions answered from their part read still hold:
        per document, the longest part read (the questions share the same cells, server/engine/partial.py).
        While its reading goes on, they are the reading's own cells and counted in its reservation."""
        held: dict[str, int] = {}
        if self.copies_reading:  # each question's copy is in its own reservation (cells_needed)
            return 0
        for seq in self._running.values():
            read = seq.read
            if read is not None and self.reading_of(read.doc_id) is None:
                held[read.doc_id] = max(held.get(read.doc_id, 0), read.n_shared)
        return sum(held.values())

    def cells_reading(self) -> int:
        """Cells of this cache reserved by the ingestions in sequences of their own (the one reading,
        the paused one); none when they read in a context of their own (``copies_reading``)."""
        return 0 if self.copies_reading else self._read_cells()

    def _read_cells(self) -> int:
        """Cells the readings in sequences of their own hold by their end, wherever they read."""
        works = (self._ingesting, self._paused)
        return sum(w.n_tokens for w in works if w is not None and w.seq_id != DOC_SEQ)

    def _ingest_fits(self, job: IngestJob, n_loaded: int) -> bool:
        # Alone, or in a reader of its own: the document sequence may be cleared to make room (here),
        # not a paused reading's cells.
        if not self._running or (self.copies_reading and self.parallel_ingest):
            return self._paused is None or self._read_cells() + job.n_tokens <= self.n_ctx
        return self.parallel_ingest and n_loaded + self.cells_in_use() + job.n_tokens <= self.n_ctx

    def _question_fits(self, job: AnswerJob, loaded: str | None, n_loaded: int = 0) -> bool:
        """A question starts when its document's prefix, the cells in use (an ingestion's included)
        and its own reservation fit the cache; alone (nothing running, nothing ingesting) it always
        starts, and ends with finish_reason "length" if its answer outgrows the room. ``job.n_prefix``:
        its document's (or segment's) prefix tokens, which the document sequence will hold. A question
        answered from the part of its document read so far shares the reading's sequence, not the
        document sequence: it joins whatever runs when a sequence and its cells are free."""
        work = self._ingesting
        if work is not None and work.seq_id == DOC_SEQ:
            return False  # the document sequence is being prefilled
        if len(self._running) >= self.n_seqs:
            return False
        if job.while_reading and self.reading_of(job.doc_id) is not None:
            return n_loaded + self.cells_in_use() + self.cells_needed(job) <= self.n_ctx
        if job.key != loaded and any(seq.shares_doc_seq for seq in self._running.values()):
            return False  # another document: it waits for the batch to drain
        if not self._running and work is None and self._paused is None:
            return True
        return job.n_prefix + self.cells_in_use() + self.cells_needed(job) <= self.n_ctx
