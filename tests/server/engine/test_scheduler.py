"""The scheduler as a table: which job starts next, given what runs, what waits and what is ingesting
(pure Python, no model). server/engine/scheduler.py."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from server.engine.jobs import AnswerJob, IngestJob, ingest_jobs
from server.engine.scheduler import Scheduler
from server.engine.sequence import DOC_SEQ
from spec.loop import AnswerParams
from spec.sampling import SamplingParams

N_CTX, RESERVE, WINDOW = 4096, 256, 16


class Loop:
    """Stands in for the asyncio loop a job sends its events through: runs the callback at once."""

    def call_soon_threadsafe(self, fn, *args):
        fn(*args)


def question(doc="a", n_suffix=20, n_prefix=1000, max_tokens=100, segment=None) -> AnswerJob:
    params = AnswerParams(max_tokens=max_tokens, sampling=SamplingParams(), window=None)
    return AnswerJob(doc, "q", params, Loop(), np.zeros(n_suffix, np.int32), n_prefix, segment=segment)


def running(sched: Scheduler, job: AnswerJob, prefilling: bool = False) -> SimpleNamespace:
    """Admit ``job`` as the engine does: next_job gave it, a free sequence with its reserved cells (one
    answered from a reading shares the reading's sequence, not the document sequence)."""
    work = sched.reading_of(job.doc_id) if job.while_reading else None
    seq = SimpleNamespace(
        job=job,
        seq_id=sched.free_seq_id(),
        cells=sched.cells_needed(job),
        prefilling=prefilling,
        shares_doc_seq=work is None,
        read=None if work is None else SimpleNamespace(doc_id=job.doc_id, n_shared=work.n_done),
    )
    sched.start(seq)
    return seq


def ingesting(n_tokens: int, seq_id: int, doc_id: str = "x", n_done: int = 0) -> SimpleNamespace:
    return SimpleNamespace(doc_id=doc_id, key=doc_id, n_tokens=n_tokens, n_done=n_done, seq_id=seq_id)


def sched(n_seqs=4, parallel_ingest=True, pause_seq=False, n_ctx=N_CTX) -> Scheduler:
    return Scheduler(n_seqs, n_ctx, RESERVE, WINDOW, parallel_ingest, pause_seq)


def begin(s: Scheduler, job: IngestJob, n_done: int = 0) -> SimpleNamespace:
    """Start ``job`` as the engine does: in the free ingest sequence."""
    work = ingesting(job.n_tokens, s.free_ingest_seq(), job.doc_id, n_done)
    s.begin_ingest(work)
    return work


def test_a_question_reserves_its_suffix_answer_and_one_window_exactly():
    # 20 suffix tokens (tokenized by the route), min(max_tokens, reserve) answer cells, window + 1
    assert sched().cells_needed(question(n_suffix=20, max_tokens=100)) == 20 + 100 + WINDOW + 1
    assert sched().cells_needed(question(n_suffix=20, max_tokens=5000)) == 20 + RESERVE + WINDOW + 1


@pytest.mark.parametrize(
    ("why", "runs", "waits", "starts"),
    [
        # nothing runs: the first question starts, whatever its document
        ("first come", [], ["b"], "b"),
        # the batch holds document a: another question about a joins it
        ("same document joins", ["a"], ["a"], "a"),
        # a question about b waits for the batch on a to drain ...
        ("other document waits", ["a"], ["b"], None),
        # ... and so does everything behind it, so it is not starved by later questions about a
        ("no overtaking", ["a"], ["b", "a"], None),
        # all question sequences taken: it waits
        ("sequences full", ["a", "a", "a", "a"], ["a"], None),
    ],
)
def test_admission_order(why, runs, waits, starts):
    s = sched()
    for doc in runs:
        running(s, question(doc))
    for doc in waits:
        s.add(question(doc))
    job = s.next_job(runs[0] if runs else None, 1000 if runs else 0)
    assert (job.doc_id if job else None) == starts, why


def test_a_question_waits_until_its_cells_are_free():
    s = sched()
    big = question(n_suffix=1500, n_prefix=1000)  # 1500 + 100 + 17 next to a 1000-token prefix
    running(s, big)
    s.add(question(n_suffix=1500, n_prefix=1000))  # 1000 + 1617 in use + 1617 > 4096
    assert s.next_job("a", 1000) is None
    s.add(question(n_suffix=10))
    assert s.next_job("a", 1000) is None, "FIFO: the small one behind does not overtake"
    s.release(s.running()[0])
    assert s.next_job("a", 1000).n_prefix == 1000


def test_a_question_counts_the_cells_of_an_ingestion_next_to_it():
    """With nothing running, a question still shares the cache with an ingestion in a sequence of its
    own: it waits rather than filling the context under it (issue 27: the ingestion died with "the
    context is full")."""
    s = sched()
    s.begin_ingest(ingesting(n_tokens=2400, seq_id=s.ingest_seq))
    s.add(question(n_prefix=2400, n_suffix=20))  # 2400 + 2400 + 137 > 4096
    assert s.next_job(None, 0) is None
    s.end_ingest()
    assert s.next_job(None, 0) is not None
    s.begin_ingest(ingesting(n_tokens=1000, seq_id=s.ingest_seq))
    s.add(question(n_prefix=1000, n_suffix=20))  # 1000 + 1000 + 137 fits
    assert s.next_job(None, 0) is not None


def test_no_question_starts_while_the_document_sequence_is_being_prefilled():
    s = sched(parallel_ingest=False)
    assert s.ingest_seq == DOC_SEQ
    s.begin_ingest(ingesting(n_tokens=100, seq_id=DOC_SEQ))
    s.add(question())
    assert s.next_job(None, 0) is None


def test_an_ingestion_starts_next_to_the_batch_when_it_fits_else_everything_waits():
    s = sched()
    running(s, question())
    s.add(IngestJob("b", n_tokens=1000))
    assert isinstance(s.next_job("a", 1000), IngestJob)  # 1000 + 137 + 1000 fits
    s2 = sched()
    running(s2, question())
    s2.add(IngestJob("b", n_tokens=3500))
    s2.add(question())
    assert s2.next_job("a", 1000) is None, "too big next to the batch: it waits, and the question behind it"
    s3 = sched(parallel_ingest=False)
    running(s3, question())
    s3.add(IngestJob("b", n_tokens=10))
    assert s3.next_job("a", 1000) is None, "without parallel ingestion it waits for the batch to drain"


def test_one_ingestion_at_a_time_and_the_questions_behind_the_second_go_on():
    s = sched()
    s.begin_ingest(ingesting(n_tokens=500, seq_id=s.ingest_seq))
    s.add(IngestJob("c", n_tokens=500))
    s.add(question("a", n_prefix=500))
    job = s.next_job(None, 0)
    assert isinstance(job, AnswerJob), "the waiting ingestion is skipped, not a wall"
    assert s.n_waiting == 1
    with pytest.raises(ValueError):
        s.begin_ingest(ingesting(n_tokens=1, seq_id=s.ingest_seq))


def test_sequences_start_and_release_once():
    s = sched(n_seqs=2)
    a = running(s, question())
    b = running(s, question())
    assert (a.seq_id, b.seq_id) == (1, 2) and s.n_running == 2 and not s.idle
    with pytest.raises(ValueError):
        s.start(SimpleNamespace(job=question(), seq_id=1, cells=1, prefilling=False))  # taken
    assert s.release(a) and not s.release(a), "a second release of the same sequence does nothing"
    assert s.free_seq_id() == 1 and s.holds(b) and not s.holds(a)
    s.release(b)
    assert s.idle


def test_answering_and_prefilling_are_disjoint_in_admission_order():
    s = sched()
    first = running(s, question(), prefilling=True)
    second = running(s, question())
    assert s.prefilling() == [first] and s.answering() == [second]


def test_waiting_questions_of_gone_clients_are_dropped_and_a_shutdown_refuses_the_rest():
    s = sched()
    gone, stays = question(), question()
    gone.cancel()
    s.add(gone)
    s.add(stays)
    s.add(IngestJob("b", n_tokens=10))
    s.drop_cancelled()
    assert s.n_waiting == 2
    s.refuse_waiting(RuntimeError("stopping"))
    assert s.n_waiting == 0 and stays.events.get_nowait().error.args == ("stopping",)


def test_an_ingestion_that_met_an_unreachable_store_is_retried_later_with_backoff(monkeypatch):
    from server.engine import scheduler as module

    now = [100.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: now[0])
    s = sched()
    job = IngestJob("b", n_tokens=10)
    delays = [s.retry(job) for _ in range(3)]
    assert delays == [0.5, 1.0, 2.0] and s.n_waiting == 3, "each retry doubles, capped at RETRY_MAX_S"
    s2 = sched()
    assert s2.retry(IngestJob("c", n_tokens=10)) == 0.5 and s2.wait_s() == 0.5
    assert s2.next_job(None, 0) is None, "not due yet"
    now[0] += 0.5
    assert isinstance(s2.next_job(None, 0), IngestJob) and s2.wait_s() is None


# -- the reading queue: shortest expected reading first (issue 51) ---------------------------------------


def test_the_document_with_the_fewest_tokens_left_is_read_first_whatever_its_arrival():
    s = sched()
    for doc, n in (("book", 6000), ("memo", 500), ("note", 400)):
        s.add(IngestJob(doc, n_tokens=n))
    assert [d for d, _ in s.reading_order()] == ["note", "memo", "book"]
    order = []
    while (job := s.next_job(None, 0)) is not None:
        order.append(job.doc_id)
        begin(s, job)
        s.end_ingest()
    assert order == ["note", "memo", "book"]


def test_a_long_documents_segments_count_together_and_keep_their_order():
    s = sched()
    for job in ingest_jobs("long", 3000, [SimpleNamespace(n_tokens=1000, index=i) for i in range(3)]):
        s.add(job)
    s.add(IngestJob("short", n_tokens=1500))  # shorter than the 3,000 tokens left of "long", not than a segment
    order = []
    while (job := s.next_job(None, 0)) is not None:
        order.append(job.key)
        begin(s, job)
        s.end_ingest()
    assert order == ["short", "long/0", "long/1", "long/2"]


def test_a_much_shorter_document_pauses_the_reading_which_goes_on_from_where_it_stopped():
    s = sched(pause_seq=True)
    assert s.ingest_seqs == (5, 6)
    book = begin(s, IngestJob("book", n_tokens=3000), n_done=0)
    book.n_done = 1000  # 2,000 tokens left
    s.add(IngestJob("memo", n_tokens=500))
    job = s.next_job(None, 0)
    assert job.doc_id == "memo" and s.paused is book and s.ingesting is None
    assert s.free_ingest_seq() == 6, "the paused reading keeps its sequence and its cells"
    memo = begin(s, job)
    assert s.cells_reading() == 3000 + 500
    s.add(IngestJob("note", n_tokens=400))
    assert s.next_job(None, 0) is None, "one reading paused at a time: the next waits for the slot"
    assert [d for d, _ in s.reading_order()] == ["memo", "note", "book"]
    assert s.end_ingest() is memo
    note = s.next_job(None, 0)
    assert note.doc_id == "note", "a waiting one shorter than the paused one goes first"
    begin(s, note)
    assert s.resume() is None, "the slot is taken"
    s.end_ingest()
    assert s.next_job(None, 0) is None
    assert s.resume() is book and s.ingesting is book and s.paused is None and book.n_done == 1000


@pytest.mark.parametrize(
    ("why", "pause_seq", "left", "short", "n_ctx", "pauses"),
    [
        ("much shorter", True, 2000, 500, N_CTX, True),
        ("not much shorter: it waits", True, 2000, 1000, N_CTX, False),
        ("no sequence to pause in (a recurrent model, or no parallel ingestion)", False, 2000, 500, N_CTX, False),
        ("no room for both", True, 2000, 500, 3200, False),
    ],
)
def test_when_a_reading_is_paused(why, pause_seq, left, short, n_ctx, pauses):
    s = sched(pause_seq=pause_seq, n_ctx=n_ctx)
    begin(s, IngestJob("book", n_tokens=3000), n_done=3000 - left)
    s.add(IngestJob("memo", n_tokens=short))
    job = s.next_job(None, 0)
    assert (job is not None) == pauses and (s.paused is not None) == pauses, why


def test_a_question_behind_a_paused_reading_counts_its_cells():
    s = sched(pause_seq=True)
    begin(s, IngestJob("book", n_tokens=2000))
    s.add(IngestJob("memo", n_tokens=500))
    begin(s, s.next_job(None, 0))
    s.end_ingest()  # memo is read; book is still paused until the engine resumes it
    s.add(question(n_prefix=2000, n_suffix=20))  # 2000 + 2000 paused + 137 > 4096
    assert s.next_job(None, 0) is None and not s.idle
    s.resume()
    assert s.next_job(None, 0) is None, "it waits for the reading either way"


def test_a_question_asked_while_reading_shares_the_part_read_and_joins_any_batch():
    s = sched()
    book = begin(s, IngestJob("book", n_tokens=2000), n_done=600)
    running(s, question("a", n_prefix=500))  # a batch about another document, sharing the document sequence
    job = question("book", n_prefix=2000)
    job.while_reading, job.n_closing = True, 3
    own = 20 + 100 + WINDOW + 1
    assert s.cells_needed(job) == own + 3, "the part read is the reading's own cells, already reserved"
    s.add(job)
    assert s.next_job("a", 500) is job, "it shares the reading's sequence: no wait for the batch to drain"
    seq = running(s, job)
    book.n_done = 900
    later = question("book", n_prefix=2000)
    later.while_reading = True
    running(s, later)
    in_use = s.cells_in_use()
    s.add(question("c", n_prefix=100))
    assert s.next_job("a", 500) is None, "another document still waits for the batch on the document sequence"
    book.n_done = 2000
    s.end_ingest()
    assert s.cells_needed(job) == own, "the reading is over: a question now is answered from the whole"
    assert seq.cells == own + 3
    assert s.cells_read() == 900, "the running ones still hold the part they were answered from: the same cells"
    assert s.cells_in_use() == in_use - 2000 + 900


def test_a_question_asked_while_reading_waits_for_room_and_a_segment_is_not_shared():
    s = sched(n_ctx=800)
    begin(s, IngestJob("book", n_tokens=700), n_done=500)
    job = question("book", n_prefix=700)
    job.while_reading = True
    s.add(job)
    assert s.cells_needed(job) == 20 + 100 + WINDOW + 1
    assert s.next_job(None, 0) is None, "700 reading + its own > 800 cells: it waits"
    s = sched()
    segment = ingesting(1000, s.ingest_seq, "long", 300)
    segment.key = "long/0"
    s.begin_ingest(segment)
    assert s.reading_of("long") is None, "a segment's reading: the question waits for the segment"


def test_between_two_segments_the_questions_waiting_go_first_and_only_they():
    s = sched(n_ctx=2048)
    segments = ingest_jobs("long", 5400, [SimpleNamespace(n_tokens=1800, index=i) for i in range(3)])
    for job in segments:
        s.add(job)
    first = s.next_job(None, 0)
    assert first is segments[0]
    work = begin(s, first, n_done=900)
    asked = question("long", n_prefix=1800, segment=0)
    s.add(asked)
    assert s.next_job(None, 0) is None, "no room beside the segment being read"
    work.n_done = 1800
    s.end_ingest()
    later = question("long", n_prefix=1800, segment=0)
    s.add(later)
    assert s.next_job(None, 0) is asked, "waiting at the boundary: it goes before the next segment"
    running(s, asked)
    assert s.next_job("long/0", 1800) is None, "the next segment waits for room, and so does a later question"
    s.release(s._running[1])
    assert s.next_job("long/0", 1800) is segments[1], "asked after the boundary: it waits for the next one"


def test_another_document_s_reading_is_not_held_for_the_questions_at_a_boundary():
    s = sched(n_ctx=2048)
    s.begin_ingest(ingesting(1800, s.ingest_seq, "a", 1800))
    other = IngestJob("c", n_tokens=1800)
    s.add(other)
    s.add(question("b", n_prefix=1800))
    s.end_ingest()
    assert s.next_job(None, 0) is other, "not the same document's next segment: FIFO as before"


def test_readings_in_a_reader_of_their_own_take_no_cell_of_the_answers_cache():
    """DOCQA_CPU_REPACK=pair (server/engine/contexts.py): a segment that fills the reader's cache
    leaves the answering cache free, so a question about a finished segment starts at once; a second
    reading that would overflow the reader waits, and a question asked while reading reserves its copy
    of the part read."""
    s = Scheduler(4, 2048, RESERVE, WINDOW, True, pause_seq=True, copies_reading=True)
    segments = ingest_jobs("long", 5400, [SimpleNamespace(n_tokens=1800, index=i) for i in range(3)])
    s.add(segments[0])
    begin(s, s.next_job(None, 0), n_done=1800)
    s.end_ingest()
    s.add(segments[1])
    work = begin(s, s.next_job(None, 0), n_done=900)
    asked = question("long", n_prefix=1800, segment=0)
    s.add(asked)
    assert s.cells_reading() == 0 and s.next_job(None, 0) is asked, "beside the segment being read"
    running(s, asked)
    s.add(IngestJob("other", 400))
    assert s.next_job("long/0", 1800) is None, "the reader's cache holds one segment, not both"
    s.release(s._running[1])
    whole = question("long", n_prefix=1800)
    whole.while_reading, whole.n_closing = True, 3
    assert s.cells_needed(whole) > work.n_done, "no shared cells: a copy"
