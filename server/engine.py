"""The engine: one thread owns the model and its contexts; jobs queue behind it.

Continuous batching. Sequence 0 (``DOC_SEQ``) holds exactly the prefix of the document in use,
restored from its snapshot (kept in RAM while the document is hot, else read from disk) and never
decoded into. Each question gets its own sequence 1..n_seq_max: the prefix is shared into it with
``llama_memory_seq_cp`` on a unified KV cache (stored once, notes §6), its question suffix is
prefilled, and from then on every active question adds its verify rows (last token + draft) to one
shared ``llama_decode`` per step. A question joins between steps and leaves when it finishes.

Admission is FIFO: questions about the loaded document join while sequences and KV cells are free;
a job for another document, or an ingestion, waits for the active questions to finish (so nothing
starves), then runs.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, replace

import numpy as np

from ingest import snapshot
from ingest.prompt import PromptLayout, layout_for
from ingest.store import FAILED, INGESTING, READY, DocStore
from runtime.embedded import embedded_model_path
from runtime.llama import Context, DecodeError, Model
from server.batch import Active, draft_mtp_together, process_mtp_together
from server.calibration import step_costs
from server.hot import HotDoc, HotDocs
from server.jobs import AnswerJob, IngestJob
from server.memory import check_fits, context_config
from server.settings import MAX_WINDOW, Settings
from spec.cost import StepCosts
from spec.lookup import LookupDrafter
from spec.loop import Answer, AnswerRun, AnswerStats
from spec.mtp import MtpDrafter

log = logging.getLogger("docqa.engine")
DOC_SEQ = 0  # the sequence that holds the prefix of the document in use


class Engine:
    def __init__(self, settings: Settings, store: DocStore) -> None:
        self.settings = settings
        self.store = store
        self.model: Model | None = None
        self.ctx: Context | None = None
        self.mtp_ctx: Context | None = None
        self.mtp: MtpDrafter | None = None
        self.max_window = MAX_WINDOW
        self.costs: StepCosts | None = None
        self.layout: PromptLayout | None = None
        self.load_error: str | None = None
        self.ready = threading.Event()
        self.progress: dict[str, float] = {}  # doc id -> prefill progress 0..1 (engine writes, routes read)
        self._jobs: queue.Queue[IngestJob | AnswerJob | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="docqa-engine", daemon=True)
        self._deleted: set[str] = set()
        self._deleted_lock = threading.Lock()
        # Engine-thread state:
        self.docs: HotDocs | None = None  # DOC_SEQ and the RAM cache of document states (after load)
        self._pending: deque[IngestJob | AnswerJob] = deque()
        self._active: dict[int, Active] = {}  # seq id -> question
        self.n_answer_seqs = 1  # concurrent questions (sequences 1..n)
        self.batch_sizes: dict[int, int] = {}  # sequences per batched step -> steps (for tests and bench)
        self.on_answer: Callable[[dict], None] | None = None  # gets each answer's stats (metrics)
        self.mtp_batched_calls = 0  # MTP decodes that served several sequences at once

    # -- lifecycle (called from the server) --------------------------------------------------------
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
    def queue_depth(self) -> int:
        """Jobs waiting (not yet answering or ingesting)."""
        return self._jobs.qsize() + len(self._pending)

    @property
    def active_answers(self) -> int:
        return len(self._active)

    # -- thread-safe calls from routes -------------------------------------------------------------
    def document_prefix(self, text: str) -> np.ndarray:
        """Prefix token ids for a document text (tokenizer calls are read-only, safe off-thread)."""
        assert self.model is not None and self.layout is not None
        return self.layout.document_prefix(self.model, text)

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

    # -- engine thread -----------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._load()
        except Exception as exc:
            log.exception("model load failed")
            self.load_error = str(exc)
            self.ready.set()
            return
        self.ready.set()
        self._resume_interrupted()
        while self._pull(block=not self._active and not self._pending):
            self._purge_deleted()
            self._admit()
            if self._active:
                self._step()
        for active in list(self._active.values()):
            active.job.fail("engine_stopped", "the server is shutting down; ask again after it restarts")
            self._release(active)
        self._close()

    def _pull(self, block: bool) -> bool:
        """Move queued jobs to ``_pending``; wait for one if ``block``. False once stop() was called."""
        try:
            job = self._jobs.get() if block else self._jobs.get_nowait()
        except queue.Empty:
            return True
        while True:
            if job is None:
                return False
            self._pending.append(job)
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return True

    def _admit(self) -> None:
        """Start pending jobs in FIFO order while they can run now (see the module docstring)."""
        while self._pending:
            job = self._pending[0]
            if isinstance(job, IngestJob):
                if self._active:
                    return  # ingestion needs DOC_SEQ: let the active questions finish first
                self._pending.popleft()
                self._guarded(job, self._ingest)
                continue
            if job.cancelled.is_set():
                self._pending.popleft()
                continue
            if self._active and (job.doc_id != self.docs.loaded or len(self._active) >= self.n_answer_seqs):
                return
            if self._active and not self._cells_free_for(job):
                return
            self._pending.popleft()
            self._guarded(job, self._start_answer)

    def _guarded(self, job: IngestJob | AnswerJob, run) -> None:
        try:
            run(job)
        except Exception as exc:  # keep serving; tell the waiting request what happened
            log.exception("engine job failed")
            if not self._active and self.docs is not None:
                self.docs.loaded = None  # the document sequence may be half-written
            if isinstance(job, AnswerJob) and isinstance(exc, DecodeError) and exc.rc == 1:
                job.fail("kv_cache_full", "the KV cache is full with other answers in progress; retry in a moment")
            elif isinstance(job, AnswerJob):
                job.fail("engine_error", f"generation failed: {type(exc).__name__}: {exc}")
                for active in [a for a in self._active.values() if a.job is job]:
                    self._release(active)

    def _load(self) -> None:
        s = self.settings
        path = s.model_path or embedded_model_path(s.data_dir)
        try:
            check_fits(s, path)  # DOCQA_VRAM_BYTES: refuse a configuration that cannot fit, with the numbers
        except ValueError as exc:
            raise RuntimeError(str(exc)) from None
        model = self.model = Model(
            path, n_gpu_layers=s.n_gpu_layers, load_mtp=s.mtp != "off", extra_bufts=s.extra_bufts
        )
        if s.mtp == "on" and not model.mtp_loaded:
            raise RuntimeError(
                f"DOCQA_MTP=on but {path.name} has no MTP layers (nextn_predict_layers is 0); use a GGUF "
                "with MTP layers, or set DOCQA_MTP=auto (lookup drafts only) or off"
            )
        self.n_answer_seqs = s.n_seq_max
        config = context_config(s, model.is_recurrent)
        self.ctx = Context(model, config)
        if model.is_recurrent:
            self.max_window = self.ctx.n_rs_seq  # the effective value: some architectures clamp it to 0
        if model.mtp_loaded:
            self.mtp_ctx = Context(model, replace(config, mtp=True, n_rs_seq=0))
            self.mtp = MtpDrafter(self.ctx, self.mtp_ctx, DOC_SEQ)
        self.costs = step_costs(self.ctx, model, self.mtp_ctx, s.data_dir, DOC_SEQ)
        self.docs = HotDocs(s, self.store, model, self.ctx, self.mtp_ctx, DOC_SEQ)
        self.layout = layout_for(model)
        log.info(
            "model %s loaded (%s layout, n_ctx %d, %d concurrent questions, MTP %s, max window %d)",
            model.description,
            self.layout.kind,
            self.ctx.n_ctx,
            self.n_answer_seqs,
            "on" if self.mtp else "off",
            self.max_window,
        )

    def _close(self) -> None:
        if self.mtp_ctx is not None:
            self.mtp_ctx.close()
        if self.ctx is not None:
            self.ctx.close()
        if self.model is not None:
            self.model.close()

    def _resume_interrupted(self) -> None:
        """After a restart: re-queue documents that were mid-ingestion, or fail them with a reason."""
        for doc in self.store.list():
            if doc.status != INGESTING:
                continue
            if (self.store.dir(doc.id) / "prefix.npy").is_file():
                log.info("resuming ingestion of %s", doc.id)
                self.submit_ingest(doc.id)
            else:
                self.store.set_status(doc.id, FAILED, "the server stopped before the upload was stored; upload again")

    def _purge_deleted(self) -> None:
        with self._deleted_lock:
            gone, self._deleted = self._deleted, set()
        for doc_id in gone:
            if self.docs is not None:
                self.docs.drop(doc_id)

    def _is_deleted(self, doc_id: str) -> bool:
        with self._deleted_lock:
            return doc_id in self._deleted

    # -- ingestion ---------------------------------------------------------------------------------
    def _ingest(self, job: IngestJob) -> None:
        assert self.ctx is not None
        doc = self.store.get(job.doc_id)
        if doc is None or doc.status != INGESTING:
            return
        ctx = self.ctx
        try:
            prefix = self.store.read_prefix(doc.id)
            self._clear()
            n = len(prefix)

            def on_progress(done: int) -> None:
                self.progress[doc.id] = done / n

            finished = ctx.prefill(
                prefix,
                0,
                seq_id=DOC_SEQ,
                on_progress=on_progress,
                should_stop=lambda: self._is_deleted(doc.id),
                on_chunk=self.mtp.process if self.mtp else None,
            )
            if not finished:
                self._clear()
                return
            mtp_h = self.mtp.pending_h.copy() if self.mtp else None
            snapshot.save(ctx, DOC_SEQ, prefix, self.store.dir(doc.id), self.mtp_ctx, mtp_h)
            self.docs.remember(doc.id, prefix, *self.docs.states_for_ram(), mtp_h)
            # A sliding-window cache (without swa_full) still holds every cell the prefill cycled
            # through; shared into a question's sequence by seq_cp, cells of two sequences can never
            # be reused (llama-kv-cache.cpp find_slot), and the window cache fills up. The snapshot
            # holds only the last n_swa cells, so the first question restores it instead.
            self.docs.loaded = doc.id if self.model.n_swa == 0 or self.settings.swa_full else None
            if self._is_deleted(doc.id):
                return
            self.store.set_status(doc.id, READY)
            log.info("ingested %s: %d tokens", doc.id, n)
        except Exception as exc:
            log.exception("ingestion of %s failed", doc.id)
            self._clear()
            self.store.set_status(doc.id, FAILED, f"prefill failed: {exc}")
        finally:
            self.progress.pop(doc.id, None)

    def _clear(self) -> None:
        """Empty DOC_SEQ in both contexts."""
        assert self.ctx is not None
        self.docs.loaded = None
        self.ctx.seq_rm(DOC_SEQ, 0)
        if self.mtp is not None and self.mtp_ctx is not None:
            self.mtp_ctx.seq_rm(DOC_SEQ, 0)
            self.mtp.reset()

    # -- answering ---------------------------------------------------------------------------------
    def _cells_needed(self, job: AnswerJob, n_suffix: int | None = None) -> int:
        """KV cells reserved for a question beyond the shared prefix: its suffix and a window, plus its
        answer up to ``answer_reserve`` tokens. A longer answer competes for the free cells; if they run
        out it ends with finish_reason "length" (:meth:`_decode_group`), so one huge ``max_tokens``
        cannot hold every other question back."""
        if n_suffix is None:  # before tokenizing: generous (a token is rarely under 2 characters)
            chars = len(job.question) + sum(len(q) + len(a) for q, a in job.history)
            n_suffix = chars // 2 + 64 * (1 + len(job.history))
        return n_suffix + min(job.params.max_tokens, self.settings.answer_reserve) + self.max_window + 1

    def _cells_free_for(self, job: AnswerJob) -> bool:
        assert self.ctx is not None
        hot = self.docs.get(job.doc_id)
        n_prefix = len(hot.prefix) if hot is not None else 0
        used = n_prefix + sum(a.cells for a in self._active.values())
        return used + self._cells_needed(job) <= self.ctx.n_ctx

    def _start_answer(self, job: AnswerJob) -> None:
        """Bring the document into DOC_SEQ if no question is active, share its prefix into a free
        sequence, prefill the question there and choose the first token."""
        assert self.ctx is not None and self.model is not None and self.layout is not None
        doc = self.store.get(job.doc_id)
        if doc is None or self._is_deleted(job.doc_id):
            job.fail("document_not_found", f"document {job.doc_id} was deleted; list them with GET /v1/documents")
            return
        if doc.status != READY:
            job.fail("document_not_ready", f"document {job.doc_id} is being ingested again; retry soon")
            return
        ctx, model = self.ctx, self.model
        try:
            if self._active and self.docs.loaded != doc.id:
                raise RuntimeError("cannot switch documents while questions are active")
            hot = self.docs.restore(doc.id)
        except snapshot.SnapshotIncompatible as exc:
            job.fail(
                "snapshot_incompatible",
                f"document {doc.id} was ingested with another model or cache layout ({exc}); "
                f"re-ingest it with POST /v1/documents/{doc.id}/reingest",
            )
            return
        except snapshot.SnapshotMissing:
            self.store.set_status(doc.id, INGESTING)
            self.submit_ingest(doc.id)
            job.fail(
                "snapshot_missing", f"document {doc.id}'s saved state was missing; it is being rebuilt, retry soon"
            )
            return
        n_prefix = len(hot.prefix)
        suffix = self.layout.question_suffix(model, job.question, job.history)
        if n_prefix + len(suffix) + 1 > ctx.n_ctx:
            job.fail(
                "question_too_long",
                f"the question is {len(suffix)} tokens; with the document ({n_prefix} tokens) that exceeds "
                f"n_ctx {ctx.n_ctx}",
            )
            return
        seq = next(i for i in range(1, self.n_answer_seqs + 1) if i not in self._active)
        mtp = self._share_prefix(seq, hot)
        stats = AnswerStats(prompt_tokens=len(suffix), cached_tokens=n_prefix)
        drafter = LookupDrafter(hot.index, model.piece, model.unspaced)
        cells = self._cells_needed(job, len(suffix))
        active = Active(job, seq, None, hot, drafter, cells, suffix)  # type: ignore[arg-type]
        self._active[seq] = active
        if not ctx.prefill(
            suffix, n_prefix, seq_id=seq, should_stop=job.cancelled.is_set, on_chunk=mtp.process if mtp else None
        ):
            self._release(active)
            return
        drafter.extend(suffix.tolist())

        def recover(answer_tokens: list[int]) -> int:
            # Deferred: other sequences' logits of this step are still to be read; _step rebuilds the
            # sequence after them (:meth:`_rebuild`).
            active.replay = answer_tokens
            return n_prefix + len(suffix) + len(answer_tokens)

        params = job.params
        if params.stops is None:
            params = replace(params, stops=self.layout.stops)
        run = AnswerRun(
            ctx=ctx,
            model=model,
            drafter=drafter,
            n_past=n_prefix + len(suffix),
            stats=stats,
            t_start=job.t_start,
            seq_id=seq,
            mtp=mtp,
            max_window=self.max_window,
            costs=self.costs,
            should_stop=job.cancelled.is_set,
            recover=recover,
        )
        active.answer = Answer(run, params)
        self._deliver(active, active.answer.begin(ctx.logits()[-1]))

    def _share_prefix(self, seq: int, hot: HotDoc) -> MtpDrafter | None:
        """Make ``seq`` hold the document prefix (shared cells of DOC_SEQ) in both contexts."""
        assert self.ctx is not None
        n = len(hot.prefix)
        self.ctx.seq_rm(seq, 0)
        self.ctx.seq_cp(DOC_SEQ, seq, 0, n)
        if self.mtp_ctx is None:
            return None
        self.mtp_ctx.seq_rm(seq, 0)
        self.mtp_ctx.seq_cp(DOC_SEQ, seq, 0, n)
        mtp = MtpDrafter(self.ctx, self.mtp_ctx, seq)
        mtp.reset(hot.mtp_h)
        return mtp

    def _step(self) -> None:
        """One batched verify step: every active question's ``[last, *draft]`` rows in one decode."""
        assert self.ctx is not None
        ctx = self.ctx
        actives = list(self._active.values())
        load = len(actives)
        if self.mtp_ctx is not None and load > 1:
            self.mtp_batched_calls += draft_mtp_together(actives)
        plans: list[tuple[Active, list[int]]] = []
        for active in actives:
            try:
                plans.append((active, active.answer.plan(load)))
            except Exception as exc:
                self._abort(active, exc)
        self.batch_sizes[len(plans)] = self.batch_sizes.get(len(plans), 0) + 1
        # Sequences whose rows together fit n_batch decode together (always, unless n_batch is tiny).
        group: list[tuple[Active, list[int]]] = []
        n_rows = 0
        for active, rows in plans:
            if group and n_rows + len(rows) > ctx.n_batch:
                self._decode_group(group)
                group, n_rows = [], 0
            group.append((active, rows))
            n_rows += len(rows)
        if group:
            self._decode_group(group)

    def _decode_group(self, group: list[tuple[Active, list[int]]]) -> None:
        assert self.ctx is not None
        ctx = self.ctx
        tokens = np.concatenate([np.asarray(rows, dtype=np.int32) for _, rows in group])
        pos = np.concatenate([np.arange(a.answer.n_past, a.answer.n_past + len(r), dtype=np.int32) for a, r in group])
        seqs = np.concatenate([np.full(len(r), a.seq, dtype=np.int32) for a, r in group])
        try:
            ctx.decode_rows(tokens, pos, seqs, np.ones(len(tokens), dtype=np.int8))
        except DecodeError as exc:
            for active, _ in group:
                if exc.rc == 1:  # no free KV cells: the shared cache is full, as a full context
                    self._deliver(active, active.answer.end("length"))
                else:
                    self._abort(active, exc)
            return
        except Exception as exc:
            for active, _ in group:
                self._abort(active, exc)
            return
        logits = ctx.logits()
        hidden = ctx.hidden() if self.mtp_ctx is not None else None
        mtp_done = hidden is not None and process_mtp_together(group, hidden)
        self.mtp_batched_calls += int(mtp_done)
        off = 0
        rebuild: list[Active] = []
        for active, rows in group:
            n = len(rows)
            try:
                h = hidden[off : off + n] if hidden is not None else None
                events = active.answer.finish(logits[off : off + n], h, mtp_done=mtp_done)
            except Exception as exc:
                self._abort(active, exc)
                off += n
                continue
            off += n
            if active.replay is not None:
                rebuild.append(active)
            self._deliver(active, events)
        for active in rebuild:  # after every sequence has read its rows of this call
            if active.seq in self._active:
                self._rebuild(active)

    def _rebuild(self, active: Active) -> None:
        """A rollback failed: the sequence is rebuilt from the shared prefix plus suffix + answer."""
        assert self.ctx is not None and active.replay is not None
        log.warning("rollback failed on %s (seq %d); rebuilding it from the prefix", active.job.doc_id, active.seq)
        mtp = self._share_prefix(active.seq, active.hot)
        run = active.answer.run
        if mtp is not None:
            run.mtp = mtp
            active.answer.policy.mtp = mtp if active.answer.policy.mtp is not None else None
        replay = np.concatenate([active.suffix, np.asarray(active.replay, dtype=np.int32)])
        active.replay = None
        self.ctx.prefill(replay, len(active.hot.prefix), seq_id=active.seq, on_chunk=mtp.process if mtp else None)
        run.stats.prompt_tokens += len(replay)

    def _deliver(self, active: Active, events) -> None:
        for event in events:
            if event.text:
                active.parts.append(event.text)
                active.job.emit("token", {"text": event.text})
        if active.answer.done:
            self._finish(active)

    def _finish(self, active: Active) -> None:
        answer, job = active.answer, active.job
        answer.close()
        try:
            index, offsets = self.docs.citation_index(job.doc_id, active.hot, self.layout)
            copied = [offsets.chars(a, b) for a, b in active.drafter.copied]
            citations = index.cite("".join(active.parts), copied)
        except Exception:  # citations are a courtesy; never lose the answer over them
            log.exception("citations failed for %s", job.doc_id)
            citations = []
        stats = asdict(answer.run.stats)
        # Free the sequence and count the answer before the client hears "done", so what it asks
        # next (/health, /metrics) already sees both.
        self._release(active)
        if self.on_answer is not None:
            try:
                self.on_answer(stats)
            except Exception:
                log.exception("answer observer failed")
        job.emit("citations", {"citations": [c.as_dict() for c in citations]})
        job.emit("stats", stats)
        job.emit("done", {})

    def _abort(self, active: Active, exc: Exception) -> None:
        log.error("answer on seq %d failed: %s: %s", active.seq, type(exc).__name__, exc)
        active.job.fail("engine_error", f"generation failed: {type(exc).__name__}: {exc}")
        self._release(active)

    def _release(self, active: Active) -> None:
        """Free the question's sequence (its own cells; the shared prefix stays in DOC_SEQ)."""
        self._active.pop(active.seq, None)
        if self.ctx is not None:
            self.ctx.seq_rm(active.seq, 0)
        if self.mtp_ctx is not None:
            self.mtp_ctx.seq_rm(active.seq, 0)
