"""The engine: one thread owns the model and its context; jobs queue behind it.

Jobs run one at a time in arrival order (FIFO). Sequence 0 holds the document in use; for a question
it is brought back to exactly the document prefix by truncation where the cache allows it, or by
restoring the snapshot (kept in RAM while the document is hot, else read from disk).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass, replace

import numpy as np

from ingest import snapshot
from ingest.atomic import write_atomic
from ingest.prompt import PromptLayout, chat_layout, plain_layout
from ingest.store import FAILED, INGESTING, READY, DocStore
from runtime.embedded import embedded_model_path
from runtime.llama import Context, ContextConfig, Model
from server.jobs import AnswerJob, IngestJob
from server.settings import MAX_WINDOW, Settings
from spec.cite import Citation, CitationIndex, TokenOffsets
from spec.cost import StepCosts, calibrate
from spec.lookup import LookupDrafter, NgramIndex
from spec.loop import AnswerRun, AnswerStats, generate
from spec.mtp import MtpDrafter

log = logging.getLogger("docqa.engine")
SEQ = 0  # the sequence that holds the document in use
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
        self._loaded: str | None = None  # doc whose prefix is at the start of SEQ (tail may follow)
        self.can_truncate = True

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
        return self._jobs.qsize()

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
        while (job := self._jobs.get()) is not None:
            self._purge_deleted()
            try:
                if isinstance(job, IngestJob):
                    self._ingest(job)
                else:
                    self._answer(job)
            except Exception as exc:  # keep serving; tell the waiting request what happened
                log.exception("engine job failed")
                self._loaded = None
                if isinstance(job, AnswerJob):
                    job.fail("engine_error", f"generation failed: {type(exc).__name__}: {exc}")
        self._close()

    def _load(self) -> None:
        s = self.settings
        path = s.model_path or embedded_model_path(s.data_dir)
        model = self.model = Model(path, n_gpu_layers=s.n_gpu_layers, load_mtp=s.mtp != "off")
        if s.mtp == "on" and not model.mtp_loaded:
            raise RuntimeError(
                f"DOCQA_MTP=on but {path.name} has no MTP layers (nextn_predict_layers is 0); use a GGUF "
                "with MTP layers, or set DOCQA_MTP=auto (lookup drafts only) or off"
            )
        # Hybrid/recurrent models roll back through per-token recurrent snapshots: keep one per
        # draft token of the widest window (notes §5).
        n_rs_seq = (MAX_WINDOW if s.n_rs_seq is None else s.n_rs_seq) if model.is_recurrent else 0
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
        )
        self.ctx = Context(model, config)
        if model.is_recurrent:
            self.max_window = self.ctx.n_rs_seq  # the effective value: some architectures clamp it to 0
        if model.mtp_loaded:
            self.mtp_ctx = Context(model, replace(config, mtp=True, n_rs_seq=0))
            self.mtp = MtpDrafter(self.ctx, self.mtp_ctx, SEQ)
        self.costs = self._calibrate()
        self.layout = _layout_for(model)
        # A sliding-window cache without swa_full reuses the cells of the window as the answer grows,
        # so truncating back to the prefix can leave holes (notes §5); a recurrent state cannot be
        # truncated past n_rs_seq. Both restore the snapshot instead.
        self.can_truncate = (model.n_swa == 0 or s.swa_full) and not model.is_recurrent
        log.info(
            "model %s loaded (%s layout, n_ctx %d, MTP %s, max window %d)",
            model.description,
            self.layout.kind,
            self.ctx.n_ctx,
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
                mtp_ctx.decode([token], 0, seq_id=SEQ, outputs="all", embd=zeros)
                mtp_ctx.logits()[0].argmax()
                mtp_ctx.hidden()[0].copy()
                mtp_ctx.seq_rm(SEQ, 0)

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
                seq_id=SEQ,
                on_progress=on_progress,
                should_stop=lambda: self._is_deleted(doc.id),
                on_chunk=self.mtp.process if self.mtp else None,
            )
            if not finished:
                self._clear()
                return
            mtp_h = self.mtp.pending_h.copy() if self.mtp else None
            snapshot.save(ctx, SEQ, prefix, self.store.dir(doc.id), self.mtp_ctx, mtp_h)
            self._remember(doc.id, prefix, *self._states_for_ram(), mtp_h)
            self._loaded = doc.id
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
        """Empty SEQ in both contexts."""
        assert self.ctx is not None
        self._loaded = None
        self.ctx.seq_rm(SEQ, 0)
        if self.mtp is not None and self.mtp_ctx is not None:
            self.mtp_ctx.seq_rm(SEQ, 0)
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
            hot.state, hot.mtp_state, hot.mtp_h = state, mtp_state, mtp_h
        self._hot[doc_id] = hot
        total = sum(h.ram_bytes for h in self._hot.values())
        for old_id, old in list(self._hot.items())[:-1]:
            if total <= s.snapshot_ram_bytes and len(self._hot) <= 64:
                break
            total -= old.ram_bytes
            del self._hot[old_id]
        return hot

    # -- answering ---------------------------------------------------------------------------------
    def _answer(self, job: AnswerJob) -> None:
        assert self.ctx is not None and self.model is not None and self.layout is not None
        if job.cancelled.is_set():
            return
        doc = self.store.get(job.doc_id)
        if doc is None or doc.status != READY:
            job.fail("document_not_ready", f"document {job.doc_id} is not ready (deleted or re-ingesting)")
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
        self._loaded = doc.id  # from here on SEQ holds prefix + question + answer
        stats = AnswerStats(prompt_tokens=len(suffix), cached_tokens=n_prefix)
        catch_up = self.mtp.process if self.mtp else None
        if not ctx.prefill(suffix, n_prefix, seq_id=SEQ, should_stop=job.cancelled.is_set, on_chunk=catch_up):
            return
        drafter = LookupDrafter(hot.index, model.piece, model.unspaced)
        drafter.extend(suffix.tolist())

        def recover(answer_tokens: list[int]) -> int:
            """Rebuild SEQ from the snapshot: prefix, then question + answer tokens."""
            log.warning("rollback failed on %s; restoring the snapshot and decoding again", doc.id)
            self._loaded = None
            self._restore(doc.id)
            self._loaded = doc.id
            replay = np.concatenate([suffix, np.asarray(answer_tokens, dtype=np.int32)])
            ctx.prefill(replay, n_prefix, seq_id=SEQ, on_chunk=catch_up)
            stats.prompt_tokens += len(replay)
            return n_prefix + len(replay)

        run = AnswerRun(
            ctx=ctx,
            model=model,
            drafter=drafter,
            n_past=n_prefix + len(suffix),
            stats=stats,
            t_start=job.t_start,
            seq_id=SEQ,
            mtp=self.mtp,
            max_window=self.max_window,
            costs=self.costs,
            should_stop=job.cancelled.is_set,
            recover=recover,
        )
        params = job.params
        if params.stops is None:
            params = replace(params, stops=self.layout.stops)
        parts: list[str] = []
        for event in generate(run, params):
            if event.text:
                parts.append(event.text)
                job.emit("token", {"text": event.text})
        citations = self._cite(doc.id, hot, "".join(parts), drafter.copied)
        job.emit("citations", {"citations": [c.as_dict() for c in citations]})
        job.emit("stats", asdict(stats))
        job.emit("done", {})

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
        """Bring SEQ to exactly the document prefix (in the MTP context too): truncate, else RAM
        state, else disk snapshot."""
        assert self.ctx is not None
        ctx = self.ctx
        hot = self._hot.get(doc_id)
        if hot is None:
            hot = self._remember(doc_id, self.store.read_prefix(doc_id))
        else:
            self._hot.move_to_end(doc_id)
        n = len(hot.prefix)
        if self._loaded == doc_id and self.can_truncate and ctx.seq_rm(SEQ, n) and self._holds_prefix(n):
            if self._restore_mtp_tail(hot, n):
                return hot
        self._loaded = None
        if hot.state is not None:
            ctx.state_set(hot.state, SEQ)
            if self.mtp_ctx is not None and hot.mtp_state is not None:
                self.mtp_ctx.state_set(hot.mtp_state, SEQ)
            if self._holds_prefix(n) and self._restore_mtp_tail(hot, n):
                self._loaded = doc_id
                return hot
            hot.state = hot.mtp_state = None  # unusable; fall back to disk
        mtp_h = snapshot.load(ctx, SEQ, hot.prefix, self.store.dir(doc_id), self.mtp_ctx)
        if not self._holds_prefix(n):
            raise snapshot.SnapshotIncompatible("the restored state does not end at the document prefix")
        self._remember(doc_id, hot.prefix, *self._states_for_ram(), mtp_h)
        if self.mtp is not None:
            self.mtp.reset(mtp_h)
        self._loaded = doc_id
        return hot

    def _restore_mtp_tail(self, hot: HotDoc, n: int) -> bool:
        """After the target holds the prefix: the MTP context must end at n - 1 too, with the saved
        pending hidden state."""
        if self.mtp is None or self.mtp_ctx is None:
            return True
        if hot.mtp_h is None or not self.mtp_ctx.seq_rm(SEQ, n) or self.mtp_ctx.pos_max(SEQ) != n - 1:
            return False
        self.mtp.reset(hot.mtp_h)
        return True

    def _states_for_ram(self) -> tuple[bytes | None, bytes | None]:
        """SEQ's state bytes (target, MTP) if they fit the RAM budget (checked before copying: a
        139k-token state of a 27B model is gigabytes)."""
        assert self.ctx is not None
        size = self.ctx.state_size(SEQ) + (self.mtp_ctx.state_size(SEQ) if self.mtp_ctx else 0)
        if size > self.settings.snapshot_ram_bytes:
            return None, None
        return self.ctx.state_get(SEQ), (self.mtp_ctx.state_get(SEQ) if self.mtp_ctx else None)

    def _holds_prefix(self, n: int) -> bool:
        """SEQ ends at position n - 1 and still holds the cells the next token attends to."""
        assert self.ctx is not None and self.model is not None
        if self.ctx.pos_max(SEQ) != n - 1:
            return False
        pos_min = self.ctx.pos_min(SEQ)
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
