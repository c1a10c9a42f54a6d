"""The engine: one thread owns the model and its contexts; jobs queue behind it.

Continuous batching. Sequence 0 (``DOC_SEQ``) holds exactly the prefix of the document in use
(server/hot.py), and each question gets a sequence of its own that shares that prefix
(server/runner.py). Every iteration of the thread is one :meth:`Engine.step`, as in nano-vllm's
``LLMEngine.step``: the scheduler admits waiting jobs (server/scheduler.py), the runner decodes one
verify step for every running question in one ``llama_decode``, and the results go to the clients.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import asdict, replace
from typing import Protocol

from ingest import snapshot
from ingest.store import INGESTING, READY, DocStore
from server import errors
from server.citations import Citations
from server.hot import HotDocs
from server.ingestion import ingest, resume_interrupted
from server.jobs import AnswerJob, IngestJob, Job
from server.loading import Loaded, load
from server.runner import Runner, StepReport
from server.scheduler import Scheduler
from server.sequence import Sequence
from server.settings import Settings
from spec.lookup import LookupDrafter
from spec.loop import Answer, AnswerRun, AnswerStats

log = logging.getLogger("docqa.engine")
DOC_SEQ = 0  # the sequence that holds the prefix of the document in use


class Observer(Protocol):
    """What the engine reports as it goes (server/metrics.py); called on the engine thread."""

    def observe_answer(self, stats: dict) -> None: ...
    def observe_step(self, n_seqs: int, mtp_batched: int) -> None: ...
    def observe_rebuild(self) -> None: ...


class Engine:
    def __init__(self, settings: Settings, store: DocStore, observer: Observer | None = None) -> None:
        self.settings, self.store, self.observer = settings, store, observer
        self.loaded: Loaded | None = None
        self.load_error: str | None = None
        self.ready = threading.Event()
        self.progress: dict[str, float] = {}  # doc id -> prefill progress 0..1 (engine writes, routes read)
        self.scheduler = Scheduler(settings.n_seq_max, settings.n_ctx, settings.answer_reserve, 0)
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="docqa-engine", daemon=True)
        self._deleted: set[str] = set()
        self._deleted_lock = threading.Lock()
        self.docs: HotDocs | None = None  # after load: the document sequence and the RAM cache
        self.runner: Runner | None = None
        self.citations: Citations | None = None

    # -- lifecycle and the calls routes make (thread-safe) -------------------------------------------
    def start(self, timeout: float = 600.0) -> None:
        """Start the thread and wait for the model; raise RuntimeError with the reason on failure."""
        self._thread.start()
        if not self.ready.wait(timeout):
            raise RuntimeError(f"the model did not load within {timeout:.0f} s")
        if self.load_error:
            raise RuntimeError(self.load_error)

    def stop(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=30)

    @property
    def model(self):
        return self.loaded.model if self.loaded else None

    @property
    def layout(self):
        return self.loaded.layout if self.loaded else None

    @property
    def n_ctx(self) -> int:
        return self.loaded.ctx.n_ctx if self.loaded else 0

    @property
    def queue_depth(self) -> int:
        """Jobs waiting (not yet answering or ingesting)."""
        return self._jobs.qsize() + len(self.scheduler.waiting)

    @property
    def active_answers(self) -> int:
        return len(self.scheduler.running)

    def submit_ingest(self, doc_id: str) -> None:
        self.progress[doc_id] = 0.0
        self._jobs.put(IngestJob(doc_id))

    def submit_answer(self, job: AnswerJob) -> None:
        self._jobs.put(job)

    def forget(self, doc_id: str) -> None:
        """A document was deleted: stop its ingestion and drop its RAM state at the next chance."""
        with self._deleted_lock:
            self._deleted.add(doc_id)
        self.progress.pop(doc_id, None)

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
        resume_interrupted(self.store, self.submit_ingest)
        while self._pull(block=not self.scheduler.running and not self.scheduler.waiting):
            self.step()
        for seq in list(self.scheduler.running.values()):
            seq.job.fail(errors.EngineStopped("the server is shutting down; ask again after it restarts"))
            self._release(seq)
        self.citations.close()
        self.loaded.close()

    def _load(self) -> None:
        loaded = self.loaded = load(self.settings, DOC_SEQ)
        self.scheduler.max_window = loaded.max_window
        self.docs = HotDocs(self.settings, self.store, loaded.model, loaded.ctx, loaded.mtp_ctx, DOC_SEQ)
        self.runner = Runner(loaded.ctx, loaded.mtp_ctx, DOC_SEQ)
        self.citations = Citations(self.store, loaded.model, loaded.layout)

    def _pull(self, block: bool) -> bool:
        """Move submitted jobs to the scheduler; wait for one if ``block``. False once stop() was called."""
        try:
            job = self._jobs.get() if block else self._jobs.get_nowait()
        except queue.Empty:
            return True
        while job is not None:
            self.scheduler.add(job)
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return True
        return False

    def step(self) -> None:
        """One iteration: schedule -> run -> postprocess."""
        self._purge_deleted()
        while (job := self.scheduler.next_job(self.docs.loaded, self._n_prefix)) is not None:
            self._start(job)  # an ingestion runs to its end here; a question joins the batch
        running = list(self.scheduler.running.values())
        if not running:
            return
        report = self.runner.step(running)  # one llama_decode for every running question
        if self.observer is not None:
            self.observer.observe_step(len(running), report.mtp_batched)
        self._postprocess(report)

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
            if seq.answer.done and seq.seq_id in self.scheduler.running:
                self._finish(seq)

    def _start(self, job: Job) -> None:
        try:
            if isinstance(job, IngestJob):
                ingest(job, self.store, self.docs, self.progress, self._is_deleted)
            else:
                self._start_answer(job)
        except Exception as exc:  # keep serving; tell the waiting request what happened
            if not isinstance(exc, errors.ApiError):
                log.exception("engine job failed")
            if not self.scheduler.running:
                self.docs.loaded = None  # the document sequence may be half-written
            if isinstance(job, AnswerJob):
                job.fail(errors.from_engine(exc))
                for seq in [s for s in self.scheduler.running.values() if s.job is job]:
                    self._release(seq)

    def _start_answer(self, job: AnswerJob) -> None:
        """Bring the document into DOC_SEQ if no question is running, share its prefix into a free
        sequence, prefill the question there and choose the first token."""
        doc = self.store.get(job.doc_id)
        if doc is None or self._is_deleted(job.doc_id):
            raise errors.DocumentNotFound(f"document {job.doc_id} was deleted; list them with GET /v1/documents")
        if doc.status != READY:
            raise errors.DocumentNotReady(f"document {job.doc_id} is being ingested again; retry soon")
        if self.scheduler.running and self.docs.loaded != doc.id:
            raise RuntimeError("cannot switch documents while questions are running")  # the scheduler prevents it
        try:
            hot = self.docs.restore(doc.id)
        except snapshot.SnapshotIncompatible as exc:
            raise errors.SnapshotUnusable(
                f"document {doc.id} was ingested with another model or cache layout ({exc}); "
                f"re-ingest it with POST /v1/documents/{doc.id}/reingest"
            ) from None
        except snapshot.SnapshotMissing:
            self.store.set_status(doc.id, INGESTING)
            self.submit_ingest(doc.id)
            raise errors.SnapshotRebuilding(
                f"document {doc.id}'s saved state was missing; it is being rebuilt, retry soon"
            ) from None
        model, layout, n_ctx = self.loaded.model, self.loaded.layout, self.n_ctx
        suffix = layout.question_suffix(model, job.question, job.history)
        if len(hot.prefix) + len(suffix) + 1 > n_ctx:
            raise errors.QuestionTooLong(
                f"the question is {len(suffix)} tokens; with the document ({len(hot.prefix)} tokens) that "
                f"exceeds n_ctx {n_ctx}"
            )
        seq_id = self.scheduler.free_seq_id()
        mtp = self.runner.share_prefix(seq_id, hot)
        lookup = LookupDrafter(hot.index, model.piece, model.unspaced)
        stats = AnswerStats(prompt_tokens=len(suffix), cached_tokens=len(hot.prefix))
        params = job.params if job.params.stops is not None else replace(job.params, stops=layout.stops)
        run = AnswerRun(
            self.loaded.ctx, model, lookup, len(hot.prefix) + len(suffix), stats, job.t_start, seq_id, mtp,
            self.loaded.max_window, self.loaded.costs, job.cancelled.is_set,
        )  # fmt: skip
        cells = self.scheduler.cells_needed(job, len(suffix))
        seq = Sequence(job, seq_id, hot, suffix, lookup, mtp, Answer(run, params), cells)
        self.scheduler.running[seq_id] = seq
        if not self.runner.prefill(seq, suffix, should_stop=job.cancelled.is_set):
            self._release(seq)
            return
        lookup.extend(suffix.tolist())
        self._deliver(seq, seq.answer.begin(self.runner.first_row()))
        if seq.answer.done:
            self._finish(seq)

    def _deliver(self, seq: Sequence, events) -> None:
        for event in events:
            if event.text:
                seq.parts.append(event.text)
                seq.job.emit("token", {"text": event.text})

    def _finish(self, seq: Sequence) -> None:
        """The answer is done: free its sequence and count it, then cite it off-thread (citations,
        stats and done follow), so what the client asks next (/health, /metrics) sees both."""
        seq.answer.close()
        stats = asdict(seq.answer.run.stats)
        self._release(seq)
        if self.observer is not None:
            try:
                self.observer.observe_answer(stats)
            except Exception:
                log.exception("answer observer failed")
        self.citations.finish(seq, stats)

    def _abort(self, seq: Sequence, exc: Exception) -> None:
        log.error("answer on seq %d failed: %s: %s", seq.seq_id, type(exc).__name__, exc)
        seq.job.fail(errors.from_engine(exc))
        self._release(seq)

    def _release(self, seq: Sequence) -> None:
        self.scheduler.running.pop(seq.seq_id, None)
        self.runner.release(seq.seq_id)

    # -- bookkeeping -----------------------------------------------------------------------------------
    def _n_prefix(self, doc_id: str) -> int:
        hot = self.docs.get(doc_id)
        return len(hot.prefix) if hot is not None else 0

    def _purge_deleted(self) -> None:
        with self._deleted_lock:
            gone, self._deleted = self._deleted, set()
        for doc_id in gone:
            self.docs.drop(doc_id)

    def _is_deleted(self, doc_id: str) -> bool:
        with self._deleted_lock:
            return doc_id in self._deleted
