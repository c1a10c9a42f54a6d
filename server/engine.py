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

import json
import logging
import queue
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from ingest import snapshot
from ingest.atomic import write_atomic
from ingest.prompt import PromptLayout, chat_layout, plain_layout
from ingest.store import FAILED, INGESTING, READY, DocStore
from runtime.embedded import embedded_model_path
from runtime.llama import Context, ContextConfig, DecodeError, Model
from server.jobs import AnswerJob, IngestJob
from server.memory import check_fits
from server.settings import MAX_WINDOW, Settings
from spec.cite import Citation, CitationIndex, TokenOffsets
from spec.cost import StepCosts, calibrate
from spec.lookup import LookupDrafter, NgramIndex
from spec.loop import Answer, AnswerRun, AnswerStats
from spec.mtp import MtpDrafter, draft_many, process_many

log = logging.getLogger("docqa.engine")
DOC_SEQ = 0  # the sequence that holds the prefix of the document in use
_CALIBRATIONS: dict[str, StepCosts] = {}


@dataclass(slots=True)
class HotDoc:
    """A document kept in RAM: prefix ids, lookup index, and (budget allowing) its state bytes."""

    prefix: np.ndarray  # int32 [n_prefix]
    index: NgramIndex
    state: bytes | None
    mtp_state: bytes | None = None  # the MTP context's part (models drafting with MTP)
    mtp_h: np.ndarray | None = None  # target hidden state of the last prefix token [n_embd]
    citations: tuple[CitationIndex, TokenOffsets] | None = None  # built at the first answer

    @property
    def ram_bytes(self) -> int:
        return len(self.state or b"") + len(self.mtp_state or b"")


@dataclass(eq=False)
class Active:
    """A question being answered in sequence ``seq``."""

    job: AnswerJob
    seq: int
    answer: Answer
    hot: HotDoc
    drafter: LookupDrafter
    cells: int  # KV cells reserved beyond the shared prefix (question + answer + a window)
    parts: list[str] = field(default_factory=list)
    replay: list[int] | None = None  # answer tokens to rebuild the sequence from, after a failed rollback
    suffix: np.ndarray | None = None  # the question's tokens after the prefix


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
        self._hot: OrderedDict[str, HotDoc] = OrderedDict()
        self._loaded: str | None = None  # doc whose prefix DOC_SEQ holds, exactly
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
            if self._active and (job.doc_id != self._loaded or len(self._active) >= self.n_answer_seqs):
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
            self._loaded = None if not self._active else self._loaded
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
        model = self.model = Model(path, n_gpu_layers=s.n_gpu_layers, load_mtp=s.mtp != "off")
        if s.mtp == "on" and not model.mtp_loaded:
            raise RuntimeError(
                f"DOCQA_MTP=on but {path.name} has no MTP layers (nextn_predict_layers is 0); use a GGUF "
                "with MTP layers, or set DOCQA_MTP=auto (lookup drafts only) or off"
            )
        # Hybrid/recurrent models roll back through per-token recurrent snapshots: keep one per
        # draft token of the widest window (notes §5).
        n_rs_seq = (MAX_WINDOW if s.n_rs_seq is None else s.n_rs_seq) if model.is_recurrent else 0
        self.n_answer_seqs = s.n_seq_max
        config = ContextConfig(
            n_ctx=s.n_ctx,
            n_batch=s.n_batch,
            n_ubatch=s.n_ubatch,
            n_threads=s.n_threads,
            n_threads_batch=s.n_threads_batch or s.n_threads,
            type_k=s.type_k,
            type_v=s.type_v,
            flash_attn=s.flash_attn,
            swa_full=s.swa_full,
            n_rs_seq=n_rs_seq,
            n_seq_max=s.n_seq_max + 1,  # the document's sequence plus one per concurrent question
            kv_unified=True,  # questions share the document prefix's cells (notes §6)
        )
        self.ctx = Context(model, config)
        if model.is_recurrent:
            self.max_window = self.ctx.n_rs_seq  # the effective value: some architectures clamp it to 0
        if model.mtp_loaded:
            self.mtp_ctx = Context(model, replace(config, mtp=True, n_rs_seq=0))
            self.mtp = MtpDrafter(self.ctx, self.mtp_ctx, DOC_SEQ)
        self.costs = self._calibrate()
        self.layout = _layout_for(model)
        log.info(
            "model %s loaded (%s layout, n_ctx %d, %d concurrent questions, MTP %s, max window %d)",
            model.description,
            self.layout.kind,
            self.ctx.n_ctx,
            self.n_answer_seqs,
            "on" if self.mtp else "off",
            self.max_window,
        )

    def _calibrate(self) -> StepCosts:
        """Measure verify and MTP step costs on this hardware for the adaptive draft window."""
        assert self.ctx is not None and self.model is not None
        token = max(self.model.bos, 0)
        mtp_step = None
        if self.mtp_ctx is not None and self.mtp is not None:
            mtp_ctx, zeros = self.mtp_ctx, np.zeros((1, self.mtp_ctx.n_embd), dtype=np.float32)

            def mtp_step() -> None:
                mtp_ctx.decode([token], 0, seq_id=DOC_SEQ, outputs="all", embd=zeros)
                mtp_ctx.logits()[0].argmax()
                mtp_ctx.hidden()[0].copy()
                mtp_ctx.seq_rm(DOC_SEQ, 0)

        cfg = self.ctx.config
        key = "/".join(
            map(
                str,
                (self.model.fingerprint, cfg.n_threads, cfg.type_k, cfg.type_v, cfg.flash_attn, mtp_step is not None),
            )
        )
        stored = self._stored_calibration(key)
        costs = stored or _CALIBRATIONS.get(key) or calibrate(self.ctx, token, mtp_step, repeats=3)
        if stored is None:
            self._store_calibration(key, costs)
        _CALIBRATIONS[key] = costs
        log.info(
            "verify cost per step: %s ms (windows 0/1/4/16), MTP step %.2f ms",
            "/".join(f"{costs.verify[k] * 1000:.1f}" for k in (0, 1, 4, 16)),
            costs.mtp * 1000,
        )
        self._loaded = None
        return costs

    # The measured costs are kept in the data directory: the same machine, model and threads cost the
    # same after a restart, and reusing them keeps the adaptive window's choices, and so greedy answers
    # on a quantized model (notes §14), the same across restarts.
    def _stored_calibration(self, key: str) -> StepCosts | None:
        path = self.settings.data_dir / "calibration.json"
        try:
            entry = json.loads(path.read_text()).get(key)
            return StepCosts(tuple(entry["verify"]), entry["mtp"]) if entry else None
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _store_calibration(self, key: str, costs: StepCosts) -> None:
        path = self.settings.data_dir / "calibration.json"
        try:
            table = json.loads(path.read_text()) if path.is_file() else {}
        except ValueError:
            table = {}
        table[key] = {"verify": list(costs.verify), "mtp": costs.mtp}
        write_atomic(path, json.dumps(table, indent=1).encode())

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
            self._hot.pop(doc_id, None)
            if self._loaded == doc_id:
                self._loaded = None

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
            self._remember(doc.id, prefix, *self._states_for_ram(), mtp_h)
            # A sliding-window cache (without swa_full) still holds every cell the prefill cycled
            # through; shared into a question's sequence by seq_cp, cells of two sequences can never
            # be reused (llama-kv-cache.cpp find_slot), and the window cache fills up. The snapshot
            # holds only the last n_swa cells, so the first question restores it instead.
            self._loaded = doc.id if self.model.n_swa == 0 or self.settings.swa_full else None
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
        self._loaded = None
        self.ctx.seq_rm(DOC_SEQ, 0)
        if self.mtp is not None and self.mtp_ctx is not None:
            self.mtp_ctx.seq_rm(DOC_SEQ, 0)
            self.mtp.reset()

    def _remember(
        self,
        doc_id: str,
        prefix: np.ndarray,
        state: bytes | None = None,
        mtp_state: bytes | None = None,
        mtp_h: np.ndarray | None = None,
    ) -> HotDoc:
        """Put a document in the RAM cache (LRU by state bytes)."""
        s = self.settings
        hot = self._hot.pop(doc_id, None)
        if hot is None or not np.array_equal(hot.prefix, prefix):  # new, or re-ingested with new tokens
            hot = HotDoc(prefix=prefix, index=NgramIndex(prefix, s.min_ngram, s.max_ngram), state=None)
        if state is not None and (self.mtp is None or mtp_state is not None):
            hot.state, hot.mtp_state = state, mtp_state
        if mtp_h is not None:
            hot.mtp_h = mtp_h
        self._hot[doc_id] = hot
        total = sum(h.ram_bytes for h in self._hot.values())
        for old_id, old in list(self._hot.items())[:-1]:
            if total <= s.snapshot_ram_bytes and len(self._hot) <= 64:
                break
            total -= old.ram_bytes
            del self._hot[old_id]
        return hot

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
        hot = self._hot.get(job.doc_id)
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
            hot = self._restore(doc.id)
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
        active = Active(job, seq, None, hot, drafter, self._cells_needed(job, len(suffix)))  # type: ignore[arg-type]
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
        active.suffix = suffix
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
            self._draft_mtp_together(actives)
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
        mtp_done = hidden is not None and self._process_mtp_together(group, hidden)
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

    def _draft_mtp_together(self, actives: list[Active]) -> None:
        """MTP drafts for every question that may use them, one MTP decode per depth for all
        (spec.mtp.draft_many); each drafter serves its policy's request from them. On failure the
        drafters draft one by one as usual."""
        want = [a for a in actives if a.answer.wants_mtp and a.answer.run.mtp is not None]
        if len(want) < 2:
            return
        try:
            draft_many(
                [a.answer.run.mtp for a in want],
                [a.answer.last for a in want],
                [a.answer.n_past for a in want],
                max(a.answer.params.n_mtp for a in want),
            )
            self.mtp_batched_calls += max(a.answer.params.n_mtp for a in want)
        except Exception:
            log.exception("batched MTP drafting failed; drafting per sequence")
            for a in want:
                a.answer.run.mtp.reset(a.answer.run.mtp.pending_h)

    def _process_mtp_together(self, group: list[tuple[Active, list[int]]], hidden: np.ndarray) -> bool:
        """Feed every sequence's verify rows to the MTP context in one decode (spec.mtp.process_many).
        True if done; False leaves it to each answer's finish()."""
        if any(a.answer.run.mtp is None for a, _ in group) or len(group) < 2:
            return False
        offsets = np.cumsum([0] + [len(rows) for _, rows in group])
        try:
            process_many(
                [a.answer.run.mtp for a, _ in group],
                [rows for _, rows in group],
                [a.answer.n_past for a, _ in group],
                [hidden[offsets[i] : offsets[i + 1]] for i in range(len(group))],
            )
            self.mtp_batched_calls += 1
        except Exception:
            log.exception("batched MTP catch-up failed; processing per sequence")
            return False
        return True

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
            citations = self._cite(job.doc_id, active.hot, "".join(active.parts), active.drafter.copied)
        except Exception:  # citations are a courtesy; never lose the answer over them
            log.exception("citations failed for %s", job.doc_id)
            citations = []
        job.emit("citations", {"citations": [c.as_dict() for c in citations]})
        stats = asdict(answer.run.stats)
        job.emit("stats", stats)
        job.emit("done", {})
        self._release(active)
        if self.on_answer is not None:
            try:
                self.on_answer(stats)
            except Exception:
                log.exception("answer observer failed")

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

    def _cite(self, doc_id: str, hot: HotDoc, answer: str, copied: list[tuple[int, int]]) -> list[Citation]:
        """Document spans the answer quotes (spec.cite), from accepted lookup copies and n-gram matches."""
        assert self.model is not None and self.layout is not None
        if hot.citations is None:
            extracted = self.store.read_text(doc_id)
            n_head, n_between = self.layout.n_head(self.model), self.layout.n_between(self.model)
            n_doc = len(hot.prefix) - n_head - n_between
            offsets = TokenOffsets(hot.prefix, n_head, n_doc, extracted.text, self.model.piece)
            hot.citations = CitationIndex(extracted.text, extracted.page_starts), offsets
        index, offsets = hot.citations
        return index.cite(answer, [offsets.chars(a, b) for a, b in copied])

    def _restore(self, doc_id: str) -> HotDoc:
        """The document's RAM entry, with DOC_SEQ holding exactly its prefix (in the MTP context too):
        as it is if already loaded, else from the RAM state, else from the disk snapshot."""
        assert self.ctx is not None
        ctx = self.ctx
        hot = self._hot.get(doc_id)
        if hot is None:
            hot = self._remember(doc_id, self.store.read_prefix(doc_id))
        else:
            self._hot.move_to_end(doc_id)
        if self._loaded == doc_id:
            return hot
        if self._active:
            raise RuntimeError("cannot switch documents while questions are active")
        n = len(hot.prefix)
        self._loaded = None
        if hot.state is not None:
            ctx.state_set(hot.state, DOC_SEQ)
            if self.mtp_ctx is not None and hot.mtp_state is not None:
                self.mtp_ctx.state_set(hot.mtp_state, DOC_SEQ)
            if self._holds_prefix(n):
                self._loaded = doc_id
                return hot
            hot.state = hot.mtp_state = None  # unusable; fall back to disk
        mtp_h = snapshot.load(ctx, DOC_SEQ, hot.prefix, self.store.dir(doc_id), self.mtp_ctx)
        if not self._holds_prefix(n):
            raise snapshot.SnapshotIncompatible("the restored state does not end at the document prefix")
        self._remember(doc_id, hot.prefix, *self._states_for_ram(), mtp_h)
        self._loaded = doc_id
        return hot

    def _states_for_ram(self) -> tuple[bytes | None, bytes | None]:
        """DOC_SEQ's state bytes (target, MTP) if they fit the RAM budget (checked before copying: a
        139k-token state of a 27B model is gigabytes)."""
        assert self.ctx is not None
        size = self.ctx.state_size(DOC_SEQ) + (self.mtp_ctx.state_size(DOC_SEQ) if self.mtp_ctx else 0)
        if size > self.settings.snapshot_ram_bytes:
            return None, None
        return self.ctx.state_get(DOC_SEQ), (self.mtp_ctx.state_get(DOC_SEQ) if self.mtp_ctx else None)

    def _holds_prefix(self, n: int) -> bool:
        """DOC_SEQ ends at position n - 1 and still holds the cells the next token attends to."""
        assert self.ctx is not None and self.model is not None
        if self.ctx.pos_max(DOC_SEQ) != n - 1:
            return False
        pos_min = self.ctx.pos_min(DOC_SEQ)
        if self.model.n_swa > 0:  # the sliding window must still reach back n_swa positions
            return 0 <= pos_min <= max(0, n - self.model.n_swa + 1)
        # A recurrent state reports only its last position; attention caches must start at 0.
        return self.model.is_recurrent or pos_min == 0


def _layout_for(model: Model) -> PromptLayout:
    """The GGUF chat template when the model has a usable one, else the plain base-model layout."""
    if model.chat_template:
        try:
            return chat_layout(
                model.chat_template, bos_text=model.token_text(model.bos), eos_text="", add_bos=model.add_bos
            )
        except Exception as exc:  # an exotic template we cannot render: fall back, but say so
            log.warning("chat template unusable (%s); using the plain layout", exc)
    return plain_layout(model.add_bos)
