"""The engine: one thread owns the model and its contexts; jobs queue behind it.

Continuous batching. Sequence 0 (``DOC_SEQ``) holds exactly the prefix of the document in use
(server/hot.py), and each question gets a sequence of its own that shares that prefix
(server/runner.py). Every iteration of the thread is one :meth:`Engine.step`, as in nano-vllm's
``LLMEngine.step``: the scheduler admits waiting jobs (server/scheduler.py), the runner decodes one
verify step for every question that is answering in one ``llama_decode``, the results go to the
clients, and then one prefill chunk (at most ``n_ubatch`` tokens) of a question being admitted or of
a document being ingested is decoded, so a long prompt delays the running streams by one chunk per
step at most, as llama-server and vLLM schedule prefill next to decode.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
from dataclasses import asdict

from ingest.store import DocStore
from server import errors
from server.admission import admit
from server.citations import Citations
from server.hot import HotDocs
from server.ingestion import Ingestions, resume_interrupted
from server.jobs import AnswerJob, Deleted, IngestJob, Job, ingest_jobs
from server.loading import Loaded, load
from server.observer import Observer
from server.runner import Runner, StepReport
from server.scheduler import Scheduler
from server.sequence import Sequence
from server.settings import Settings
from server.traffic import TrafficLog

log = logging.getLogger("docqa.engine")
DOC_SEQ = 0  # the sequence that holds the prefix of the document in use
_WAKE = object()  # wakes the engine thread (a shutdown began) without a job


class Engine:
    def __init__(
        self, settings: Settings, store: DocStore, observer: Observer | None = None, traffic: TrafficLog | None = None
    ) -> None:
        self.settings, self.store, self.observer, self.traffic = settings, store, observer, traffic
        self.replica = settings.replica_name or socket.gethostname()  # named in every answer's stats
        self.loaded: Loaded | None = None
        self.load_error: str | None = None
        self.ready = threading.Event()
        self.progress: dict[str, float] = {}  # doc id -> prefill progress 0..1 (engine writes, routes read)
        self.scheduler = Scheduler(
            settings.n_seq_max, settings.n_ctx, settings.answer_reserve, 0, settings.parallel_ingest
        )
        self.ingest: Ingestions | None = None  # after load: the document being prefilled, a chunk per step
        self._turn = 0  # alternates prefill chunks between questions and the ingestion
        self._closing_at: float | None = None  # monotonic deadline of a graceful shutdown
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="docqa-engine", daemon=True)
        self.deleted = Deleted()  # documents deleted since the last step (routes add, the engine drops)
        self.evicted = Deleted()  # documents whose RAM state to free (a cluster replica gave them up)
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

    def submit_ingest(self, doc_id: str, n_tokens: int) -> None:
        """Queue the prefill of a stored document (``n_tokens``: its prefix length), or of each of its
        segments (a segment whose snapshot is complete is skipped when its turn comes)."""
        self.progress[doc_id] = 0.0
        for job in ingest_jobs(doc_id, n_tokens, self.store.read_segments(doc_id)):
            self._jobs.put(job)

    def submit_answer(self, job: AnswerJob) -> int:
        """Queue a question; returns how many jobs are waiting ahead of it."""
        ahead = self.queue_depth
        self._jobs.put(job)
        return ahead

    def evict(self, doc_id: str) -> None:
        """Free the document's RAM state at the next step (it stays answerable, from disk)."""
        self.evicted.add(doc_id)
        self._jobs.put(_WAKE)

    def forget(self, doc_id: str) -> None:
        """A document was deleted: stop its ingestion and drop its RAM state at the next chance."""
        self.deleted.add(doc_id)
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
        while self._pull(block=self._idle()):
            self.step()
        self._close_down(force=True)
        self.citations.close()
        self.loaded.close()

    def _idle(self) -> bool:
        return not self.scheduler.running and not self.scheduler.waiting and self.scheduler.ingesting is None

    def _load(self) -> None:
        loaded = self.loaded = load(self.settings, DOC_SEQ)
        self.scheduler.max_window = loaded.max_window
        self.docs = HotDocs(self.settings, self.store, loaded.model, loaded.ctx, loaded.mtp_ctx, DOC_SEQ)
        self.runner = Runner(loaded.ctx, loaded.mtp_ctx, DOC_SEQ, loaded.max_rows, loaded.costs)
        self.citations = Citations(self.store, loaded.model, loaded.layout)
        self.ingest = Ingestions(self.store, self.docs, self.scheduler, self.progress, self.deleted)

    def _pull(self, block: bool) -> bool:
        """Move submitted jobs to the scheduler; wait for one if ``block``. False once stop() was called."""
        try:
            job = self._jobs.get() if block else self._jobs.get_nowait()
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
        for doc_id in self.deleted.take():
            self.docs.drop(doc_id)
        for doc_id in self.evicted.take():
            self.docs.evict(doc_id)
        if self._closing_at is not None:
            self._close_down(force=time.monotonic() >= self._closing_at)
        self.scheduler.drop_cancelled()  # questions whose client hung up while they waited
        while (job := self.scheduler.next_job(self.docs.loaded, self._n_prefix)) is not None:
            self._start(job)  # a question starts its prefill; an ingestion claims its sequence
        answering = [seq for seq in self.scheduler.running.values() if not seq.prefilling]
        if answering:
            report = self.runner.step(answering)  # one llama_decode for every answering question
            if self.observer is not None:
                self.observer.observe_step(len(answering), report.mtp_batched)
            self._postprocess(report)
        self._prefill_next_chunk()

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
                self.ingest.start(job)
            else:
                seq = admit(job, self)
                self.scheduler.running[seq.seq_id] = seq
        except Exception as exc:  # keep serving; tell the waiting request what happened
            if not isinstance(exc, errors.ApiError):
                log.exception("engine job failed")
            if isinstance(job, AnswerJob):
                job.fail(errors.from_engine(exc))
                for seq in [s for s in self.scheduler.running.values() if s.job is job]:
                    self._release(seq)

    def _prefill_next_chunk(self) -> None:
        """Decode one chunk of prefill (at most ``n_ubatch`` tokens): of the questions still prefilling,
        oldest first, or of the ingestion, taking turns when both wait."""
        n_ubatch = self.loaded.ctx.config.n_ubatch
        for seq in [s for s in self.scheduler.running.values() if s.prefilling and s.job.cancelled.is_set()]:
            self._release(seq)  # the client hung up before its first token
        prefilling = [s for s in self.scheduler.running.values() if s.prefilling]
        if prefilling and (self.scheduler.ingesting is None or self._turn % 2 == 0):
            try:
                started = self.runner.prefill_chunks(prefilling, n_ubatch)
            except Exception as exc:
                for seq in prefilling:
                    self._abort(seq, exc)
                return
            for seq, row in started:
                if row is not None:
                    seq.lookup.extend(seq.suffix.tolist())
                    self._deliver(seq, seq.answer.begin(row))
                    if seq.answer.done:
                        self._finish(seq)
        elif self.scheduler.ingesting is not None:
            self.ingest.step(n_ubatch)
        self._turn += 1

    def _close_down(self, force: bool) -> None:
        """Shutting down: refuse what waits, stop the ingestion (it stays resumable), and once ``force``
        end the running answers with an error event."""
        stopped = errors.EngineStopped("the server is shutting down; ask again after it restarts")
        self.scheduler.refuse_waiting(stopped)
        self.ingest.stop()
        for seq in list(self.scheduler.running.values()) if force else []:
            seq.job.fail(stopped)
            self._release(seq)

    def _deliver(self, seq: Sequence, events) -> None:
        for event in events:
            if event.text:
                seq.parts.append(event.text)
                seq.job.emit("token", {"text": event.text})

    def _finish(self, seq: Sequence) -> None:
        """The answer is done: free its sequence and count it, then cite it off-thread (citations,
        stats and done follow), so what the client asks next (/health, /metrics) sees both."""
        seq.answer.close()
        stats = asdict(seq.answer.run.stats) | {"replica": self.replica, "document_state": seq.document_state}
        self._release(seq)
        if self.observer is not None:
            try:
                self.observer.observe_answer(stats)
            except Exception:
                log.exception("answer observer failed")
        if self.traffic is not None:
            self.traffic.record(seq, stats)  # one line of DATA_DIR/traffic.jsonl, for docqa tune
        self.citations.finish(seq, stats)

    def _abort(self, seq: Sequence, exc: Exception) -> None:
        log.error("answer on seq %d failed: %s: %s", seq.seq_id, type(exc).__name__, exc)
        seq.job.fail(errors.from_engine(exc))
        self._release(seq)

    def _release(self, seq: Sequence) -> None:
        self.scheduler.running.pop(seq.seq_id, None)
        self.runner.release(seq.seq_id)

    # -- bookkeeping -----------------------------------------------------------------------------------
    def _n_prefix(self, key: str) -> int:
        hot = self.docs.get(key)
        return len(hot.prefix) if hot is not None else 0
