"""The engine: one thread owns the model and its contexts; jobs queue behind it.

Continuous batching. Sequence ``DOC_SEQ`` holds exactly the prefix of the document in use
(server/engine/hot.py), and each question gets a sequence of its own that shares that prefix
(server/engine/runner.py). Every iteration of the thread is one :meth:`Engine.step`, as in
nano-vllm's ``LLMEngine.step``: the scheduler admits waiting jobs (server/engine/scheduler.py, the
only writer of the waiting, running and ingesting state), the runner decodes one verify step for
every question that is answering in one ``llama_decode``, the results go to the clients, and then
one prefill chunk of a question being admitted or of a document being ingested is decoded, so a
long prompt delays the running streams by one chunk per step at most, as llama-server and vLLM
schedule prefill next to decode. A chunk is sized by time, not tokens (:class:`PrefillSlices`, from a
fitted fixed + per-token cost): next to other work it takes about ``DOCQA_PREFILL_SLICE_S``, alone at
most ``DOCQA_PREFILL_ALONE_S`` (and ``n_ubatch`` tokens): on a 2-core CPU a 512-token chunk of the 1.5B
reader is 4-13 s, long enough to hold a question arriving in its middle behind another reading.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
from collections.abc import Callable

from ingest.errors import StorageError
from ingest.extract import ExtractedText
from server.config import errors
from server.config.memory import pause_seq
from server.config.settings import Settings
from server.engine.admission import Admission, Unusable
from server.engine.citations import Citations
from server.engine.cores import CoreShare
from server.engine.drafters import LookupIndexes
from server.engine.events import Quote, Token
from server.engine.finish import Finisher, Observer
from server.engine.history import AnswerHistories
from server.engine.hot import HotDocs
from server.engine.ingestion import Ingestions
from server.engine.jobs import AnswerJob, Deleted, DocStates, IngestJob, Job, ingest_jobs
from server.engine.loading import Loaded, load
from server.engine.partial import PartialReads
from server.engine.reading import DocView, Readings
from server.engine.recovery import resume_interrupted
from server.engine.repairs import Repairs
from server.engine.runner import Runner, StepReport
from server.engine.scheduler import Scheduler
from server.engine.sequence import DOC_SEQ, Sequence
from server.engine.slices import PrefillSlices, ReadShare
from server.engine.traffic import TrafficLog
from store.docstore import DocStore

log = logging.getLogger("docqa.engine")
_WAKE = object()  # wakes the engine thread (a shutdown began) without a job
READ_SHARE = 0.5  # of the engine's time, the most a reading takes while questions are answered (ReadShare)


class Engine:
    # Made at load on the engine thread (_load): the document sequence and RAM cache, the runner,
    # admission, the ingestions, the answer histories, the citation worker and what finishes answers.
    docs: HotDocs
    runner: Runner
    admission: Admission
    ingest: Ingestions
    histories: AnswerHistories
    citations: Citations
    finisher: Finisher

    def __init__(
        self,
        settings: Settings,
        store: DocStore,
        observer: Observer | None = None,
        traffic: TrafficLog | None = None,
        extract: Callable[[bytes], ExtractedText] | None = None,
    ) -> None:
        """``extract``: the extraction worker's (ingest/worker.py), what a damaged ``text.json`` is
        extracted again with (server/engine/repairs.py); None: it is reported, not repaired."""
        self.settings, self.store, self.observer, self.traffic = settings, store, observer, traffic
        self._extract = extract
        self.repairs = Repairs(store, extract)  # damaged files: the text until load, then all (_load)
        self.replica = settings.replica_name or socket.gethostname()  # named in every answer's stats
        self.loaded: Loaded | None = None
        self.load_error: str | None = None
        self.ready = threading.Event()
        self.kv_positions = 0  # KV positions held after the last step (Contexts.kv_positions; /metrics)
        # A document's state here, written only by the engine's own code and the methods below; the
        # routes, /health and /metrics read it through view(), reading_ids() and unfit_ids().
        self.progress: dict[str, float] = {}  # doc id -> prefill progress 0..1
        self.readings = Readings()  # doc id -> waiting or read so far, at what rate (server/engine/reading.py)
        self._unfit: dict[str, str] = {}  # doc id -> why it must be read again (server/service/refit.py)
        self.deleted = Deleted()  # documents deleted since the last step (routes add, the engine drops)
        self.states = DocStates()  # what the engine knows of each document (admission reads it, not the row)
        self.evicted = Deleted()  # documents whose RAM state to free (a cluster replica gave them up)
        self._jobs: queue.Queue[Job | object | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="docqa-engine", daemon=True)
        self._turn = 0  # alternates prefill chunks between questions and the ingestion
        self.share = ReadShare(READ_SHARE)  # a reading's turns next to questions (_prefill_next_chunk)
        self.slices = PrefillSlices(settings.prefill_slice_s, settings.prefill_alone_s)  # chunk sizes, by measured time
        self.read_slices = self.slices  # a reading's: its own with a reader of other weights (_load)
        self.cores = CoreShare(settings.n_threads) if settings.adapt_threads and not settings.batch_invariant else None
        self._closing_at: float | None = None  # monotonic deadline of a graceful shutdown
        self.scheduler: Scheduler | None = None  # made at load, with the rest (_load)

    # -- lifecycle and the calls routes make (thread-safe) -------------------------------------------
    def start(self, timeout: float = 600.0) -> None:
        """Start the thread and wait for the model; raise RuntimeError with the reason on failure."""
        self._thread.start()
        if not self.ready.wait(timeout):
            raise RuntimeError(f"the model did not load within {timeout:.0f} s")
        if self.load_error:
            raise RuntimeError(self.load_error)

    def stop(self) -> None:
        """Stop the thread (after :meth:`begin_shutdown`, once the answers had their time) and wait for
        it: every step is bounded (one decode and one prefill chunk), so this is prompt."""
        self._jobs.put(None)
        if self._thread.is_alive():
            self._thread.join()

    def begin_shutdown(self, timeout_s: float) -> None:
        """Stop admitting; answers in flight get ``timeout_s`` to finish, then end with an error event.
        An ingestion stops between chunks and stays ``ingesting`` (resumed at the next start)."""
        self._closing_at = time.monotonic() + timeout_s
        self._jobs.put(_WAKE)

    model = property(lambda self: self.loaded.model if self.loaded else None)
    layout = property(lambda self: self.loaded.layout if self.loaded else None)
    n_ctx = property(lambda self: self.loaded.ctx.n_ctx if self.loaded else 0)

    @property
    def queue_depth(self) -> int:
        """Jobs waiting (not yet answering or ingesting)."""
        return self._jobs.qsize() + (self.scheduler.n_waiting if self.scheduler else 0)

    @property
    def active_answers(self) -> int:
        return self.scheduler.n_running if self.scheduler else 0

    def submit_ingest(self, doc_id: str, n_tokens: int) -> None:
        """Queue the prefill of a stored document (``n_tokens``: its prefix length), or of each of its
        segments (a segment whose snapshot is complete is skipped when its turn comes)."""
        self.progress[doc_id] = 0.0
        self.states.mark(doc_id, DocStates.INGESTING)
        jobs = ingest_jobs(doc_id, n_tokens, self.repairs.read(doc_id, lambda: self.store.read_segments(doc_id)))
        self.readings.queued(doc_id, jobs[0].tokens_total if jobs else n_tokens)
        for job in jobs:
            self._jobs.put(job)

    def submit_answer(self, job: AnswerJob) -> int:
        """Queue a question (tokenized: ``job.suffix``); returns how many jobs are waiting ahead of it."""
        ahead = self.queue_depth
        self._jobs.put(job)
        return ahead

    def evict(self, doc_id: str) -> None:
        """Free the document's RAM state at the next step (it stays answerable, from disk)."""
        self.evicted.add(doc_id)
        self._jobs.put(_WAKE)

    def view(self, doc_id: str) -> DocView:
        """What the engine knows of ``doc_id`` now (server/engine/reading.py ``DocView``)."""
        reading = self.readings.of(doc_id)
        return DocView(
            progress=self.progress.get(doc_id),
            reading=reading,
            place=self.readings.place(doc_id) if reading is not None else None,
            rate=self.readings.tokens_per_s,
            unfit=self._unfit.get(doc_id),
        )

    def reading_ids(self) -> dict[str, float]:
        """The documents being read (here, or by OCR before their prefill), each with its progress 0..1."""
        return dict(self.progress)

    def is_reading(self, doc_id: str) -> bool:
        """``doc_id`` is being read (here, or by OCR before its prefill)."""
        return doc_id in self.progress

    def unfit_ids(self) -> dict[str, str]:
        """The documents that must be read again before they are asked, each with why."""
        return dict(self._unfit)

    def reading_elsewhere(self, doc_id: str, share: float | None) -> None:
        """A document read before its prefill (OCR, server/service/background.py): its progress 0..1
        (it then counts as being read, so no resume check takes it: server/engine/recovery.py), or None
        once that reading ended without a prefill (failed, deleted)."""
        if share is None:
            self.progress.pop(doc_id, None)
        else:
            self.progress[doc_id] = share

    def mark_unfit(self, found: dict[str, str]) -> None:
        """Documents read for a larger context than this one, each with why (server/service/refit.py)."""
        self._unfit.update(found)

    def refit(self, doc_id: str) -> None:
        """``doc_id`` was read again at this context: it may be asked."""
        self._unfit.pop(doc_id, None)

    def forget(self, doc_id: str) -> None:
        """A document was deleted (or is re-ingested): stop its ingestion and drop its RAM state at the
        next chance; its questions are refused until it is queued for prefill again."""
        self.states.mark(doc_id, DocStates.DELETED)
        self.deleted.add(doc_id)
        self.progress.pop(doc_id, None)
        self.readings.forget(doc_id)

    # -- the engine thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._load()
        except Exception as exc:
            log.exception("model load failed")
            self.load_error = str(exc)
            self.ready.set()
            return
        self.ready.set()
        resume_interrupted(self.store, self.submit_ingest, repairs=self.repairs)
        while self._pull(block=self.scheduler.idle, timeout=self._idle_wait_s()):
            self.step()
        self._close_down(force=True)
        self.ingest.close()
        self.citations.close()
        self.histories.close()
        self.loaded.close()

    def _load(self) -> None:
        s, store = self.settings, self.store
        loaded = self.loaded = load(s, DOC_SEQ)
        if loaded.contexts.reader is not None:  # it reads at its own speed, not the answering weights'
            self.read_slices = PrefillSlices(s.prefill_slice_s, s.prefill_alone_s)
        split_limit = None if s.long_documents == "refuse" else s.document_budget
        repairs = Repairs(store, self._extract, loaded.model, loaded.layout, split_limit, s.segment_overlap_tokens)
        self.repairs = repairs
        self.scheduler = Scheduler(
            s.n_seq_max,
            loaded.ctx.n_ctx,
            s.answer_reserve,
            loaded.max_window,
            s.parallel_ingest,
            pause_seq(s, loaded.model.is_recurrent),
            copies_reading=loaded.contexts.reader is not None,
        )
        self.histories = AnswerHistories(store, s.answer_history, s.answer_history_tokens, s.min_ngram, s.max_ngram)
        lookups = LookupIndexes(s.min_ngram, s.max_ngram)
        ram = dict(ram_bytes=s.snapshot_ram_bytes, hot_docs=s.hot_docs)
        on_new = (lookups.attach, self.histories.attach)
        self.docs = HotDocs(loaded.contexts, store, loaded.model, DOC_SEQ, on_new=on_new, **ram)
        self.runner = Runner(loaded.contexts, DOC_SEQ, loaded.max_rows, loaded.costs)
        partial = PartialReads(loaded.model, loaded.layout) if s.ask_while_reading else None
        reading = self.scheduler.reading_of
        self.admission = Admission(
            self.states, self.docs, self.runner, loaded, self.histories.of, reading, partial, lookups
        )
        self.citations = Citations(store, loaded.model, loaded.layout, repairs)
        self.finisher = Finisher(self.citations, self.histories, self.docs, self.replica, self.observer, self.traffic)
        keep = loaded.model.n_swa == 0 or s.swa_full  # server/engine/ingestion.py Ingestion.finish
        seq, again, budget = self.scheduler.ingest_seq, self.submit_ingest, s.disk_budget_bytes
        self.ingest = Ingestions(
            store, self.docs, loaded.contexts, self.progress, self.states, seq, again, budget, keep, repairs
        )

    def _idle_wait_s(self) -> float | None:
        """How long the idle engine thread may wait for a job: until the next deferred one is due, and
        with the thread drop on, at most its sampling interval, so the thread count follows other work
        while no question runs (sampled only at a question's first step, the window spanned the idle
        time: a busy process started 1.5 s before a question was seen as 0.4 cores and missed)."""
        wait = self.scheduler.wait_s()
        if self.cores is None:
            return wait
        return self.cores.interval_s if wait is None else min(wait, self.cores.interval_s)

    def _pull(self, block: bool, timeout: float | None = None) -> bool:
        """Move submitted jobs to the scheduler; wait for one (at most ``timeout`` s) if ``block``.
        False once stop() was called."""
        try:
            job = self._jobs.get(timeout=timeout) if block else self._jobs.get_nowait()
        except queue.Empty:
            return True
        while job is not None:
            if job is not _WAKE:
                self.scheduler.add(job)
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return True
        return False

    def step(self) -> None:
        """One iteration: schedule -> run -> postprocess, then one prefill chunk."""
        gone = self.deleted.take()
        for doc_id in gone:
            self.docs.drop(doc_id)
        if (paused := self.scheduler.paused) is not None and paused.doc_id in gone:
            self.scheduler.end_paused()
            paused.abandon()  # deleted (or read again) while set aside: its cells go
        for doc_id in self.evicted.take():
            self.docs.evict(doc_id)
        if self._closing_at is not None:
            self._close_down(force=time.monotonic() >= self._closing_at)
        sched = self.scheduler
        sched.drop_cancelled()  # questions whose client hung up while they waited
        if self.cores is not None and (n := self.cores.update()) is not None:
            batch = self.settings.n_threads_batch or self.settings.n_threads
            self.loaded.contexts.set_threads(n, batch if n == self.settings.n_threads else min(n, batch))
            log.info("other work uses %.1f cores: decoding with %d threads", self.cores.others, n)
        while (job := sched.next_job(self.docs.loaded, self.docs.n_loaded)) is not None:
            self._start(job)  # a question starts its prefill; an ingestion claims the ingest slot
        if (work := sched.resume()) is not None:  # no shorter reading waits: the paused one goes on
            self.readings.resumed(work.doc_id)
            log.info("reading %s again from token %d of %d", work.key, work.n_done, work.n_tokens)
        self.readings.order(sched.reading_order())
        if answering := sched.answering():
            t0 = time.perf_counter()
            report = self.runner.step(answering)  # one llama_decode for every answering question
            self.share.asked(time.perf_counter() - t0)
            if self.observer is not None:
                self.observer.observe_step(len(answering), report.model_batched)
            self._postprocess(report)
        self._prefill_next_chunk()
        n_ingest = len(sched.ingest_seqs) if sched.parallel_ingest else 0
        self.kv_positions = self.loaded.contexts.kv_positions(1 + sched.n_seqs + n_ingest)

    def _postprocess(self, report: StepReport) -> None:
        """Send each question its tokens; then rebuild the sequences whose rollback failed (after every
        sequence has read its rows of the step) and finish the answers that are done."""
        rebuild: list[Sequence] = []
        for seq, outcome in report.outcomes:
            if isinstance(outcome, Exception):
                self._abort(seq, outcome)
                continue
            self._deliver(seq, outcome.events)
            if outcome.rebuild:
                rebuild.append(seq)
        for seq in rebuild:
            try:
                self.runner.rebuild(seq)
                if self.observer is not None:
                    self.observer.observe_rebuild()
            except Exception as exc:
                self._abort(seq, exc)
        for seq, _ in report.outcomes:
            if seq.answer.done and self.scheduler.holds(seq):
                self._finish(seq)

    def _start(self, job: Job) -> None:
        sched = self.scheduler
        try:
            if isinstance(job, IngestJob):
                if (paused := sched.paused) is not None and not self.readings.is_paused(paused.doc_id):
                    self.readings.paused(paused.doc_id)  # set aside for this shorter one (scheduler.py)
                    log.info("pausing the reading of %s at token %d for %s", paused.key, paused.n_done, job.key)
                seq_id, held = sched.free_ingest_seq(), sched.cells_reading()
                try:
                    work = self.ingest.start(job, idle=not sched.n_running, seq_id=seq_id, held=held)
                except StorageError as exc:  # the store is away: retried with backoff, never dropped
                    log.warning("ingesting %s: %s; retrying in %.1f s", job.key, exc, sched.retry(job))
                    return
                if work is not None:
                    sched.begin_ingest(work)
                    self.readings.started(work.doc_id, work.before, work.total)
            else:
                sched.start(self._admit(job))
        except Exception as exc:  # keep serving; tell the waiting request what happened
            if not isinstance(exc, errors.ApiError):
                log.exception("engine job failed")
            if isinstance(job, AnswerJob):
                job.fail(errors.from_engine(exc))

    def _admit(self, job: AnswerJob) -> Sequence:
        """Admission of ``job`` (server/engine/admission.py); what it finds unusable the ingestion side
        repairs (then it is admitted again, once) or rebuilds (then its client is told to retry)."""
        sched = self.scheduler
        seq_id, cells = sched.free_seq_id(), sched.cells_needed(job)
        for repaired in (False, True):
            try:
                return self.admission.admit(job, seq_id, cells, sched.n_running)
            except Unusable as why:
                self.runner.release(seq_id)  # it may have shared the prefix before failing
                error = self.ingest.recover(job, why, repaired)
                if error is not None:
                    raise error from None
            except Exception:
                self.runner.release(seq_id)
                raise
        raise AssertionError("unreachable: a second repair returns an error")

    def _prefill_next_chunk(self) -> None:
        """Decode one chunk of prefill: of the questions still prefilling, oldest first, or of the
        ingestion, taking turns when both wait, and the reading's only once the questions have had as
        long as its last chunk (:data:`READ_SHARE`). Its size is :class:`PrefillSlices`'s: about
        ``DOCQA_PREFILL_SLICE_S`` next to other work, at most ``DOCQA_PREFILL_ALONE_S`` alone."""
        sched, n_ubatch = self.scheduler, self.loaded.ctx.config.n_ubatch
        for seq in [s for s in sched.prefilling() if s.job.cancelled.is_set()]:
            self._release(seq)  # the client hung up before its first token
        prefilling, work = sched.prefilling(), sched.ingesting
        asking = bool(prefilling or sched.answering())
        may_read = self.share.may_read(asking)
        if prefilling and (work is None or self._turn % 2 == 0 or not may_read):
            others = len(sched.answering()) > 0 or sched.n_waiting > 0 or work is not None
            budget = self.slices.tokens(n_ubatch, alone=not (others or len(prefilling) > 1))
            t0, before = time.perf_counter(), sum(s.n_prefilled for s in prefilling)
            try:
                started = self.runner.prefill_chunks(prefilling, budget)
            except Exception as exc:
                for seq in prefilling:
                    self._abort(seq, exc)
                return
            took = time.perf_counter() - t0
            self.slices.observe(sum(s.n_prefilled for s in prefilling) - before, took)
            self.share.asked(took)
            for seq, row in started:
                if row is not None:
                    self._deliver(seq, seq.answer.begin(row, seq.suffix.tolist()))
                    if seq.answer.done:
                        self._finish(seq)
        elif work is not None and may_read:
            busy = sched.n_running > 0 or sched.n_waiting > 0
            budget = self.read_slices.tokens(n_ubatch, alone=not busy)
            t0, done_before = time.perf_counter(), work.n_done
            ended = self.ingest.step(work, budget, idle=not sched.n_running)
            self.readings.advanced(work.doc_id, work.before + work.n_done)
            if ended:
                sched.end_ingest()  # its last step wrote the snapshot too: not a prefill time
            else:
                self.read_slices.observe(work.n_done - done_before, time.perf_counter() - t0)
            self.share.read(time.perf_counter() - t0, asking)
        self._turn += 1

    def _close_down(self, force: bool) -> None:
        """Shutting down: refuse what waits, stop the ingestion (it stays resumable), and once ``force``
        end the running answers with an error event."""
        stopped = errors.EngineStopped("the server is shutting down; ask again after it restarts")
        self.scheduler.refuse_waiting(stopped)
        for work in (self.scheduler.end_ingest(), self.scheduler.end_paused()):
            if work is not None:
                work.abandon()
        for seq in self.scheduler.running() if force else []:
            seq.job.fail(stopped)
            self._release(seq)

    def _deliver(self, seq: Sequence, events) -> None:
        for event in events:
            if event.text and event.part == "quote":
                seq.job.emit(Quote(event.text))
            elif event.text:
                seq.parts.append(event.text)
                seq.job.emit(Token(event.text, event.n_accepted))

    def _finish(self, seq: Sequence) -> None:
        """The answer is done: free its sequence, then report and cite it (server/engine/finish.py)."""
        self._release(seq)
        self.finisher.finish(seq)

    def _abort(self, seq: Sequence, exc: Exception) -> None:
        log.error("answer on seq %d failed: %s: %s", seq.seq_id, type(exc).__name__, exc)
        seq.job.fail(errors.from_engine(exc))
        self._release(seq)

    def _release(self, seq: Sequence) -> None:
        if self.scheduler.release(seq):
            self.runner.release(seq.seq_id)
