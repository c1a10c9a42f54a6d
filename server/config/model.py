"""The settings of the model and how it decodes: the GGUF, its contexts (n_ctx, batches, threads,
KV cache types), concurrency, MTP, the draft window and the batch-invariant mode. A part of
:class:`server.config.settings.Settings`; every field is documented in docs/settings.md.

Defaults suit the embedded Gemma 3 270M model on a CPU: its full 32k context, ``n_ubatch`` large
enough that a 17-row verify call (16 drafts + 1) fits in one ubatch, and one thread per core.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings

from runtime.kvtypes import GGML, KV_TYPES
from runtime.models import NAMES as MODEL_NAMES
from runtime.plan_fit import parse_size
from spec.limits import MAX_MTP_DRAFT, MAX_ROWS, MAX_WINDOW
from spec.quote import THRESHOLD

KvType = Literal[KV_TYPES]  # runtime/kvtypes.py
#: Most questions answered at once (sequences besides the document's); llama.cpp allows 256 in all.
MAX_SEQS = 64
#: DOCQA_ANSWER_MODE=auto, per embedded model ("": a GGUF of the user's own), as measured side by side
#: in bench/results/quality-quote.md: quote first on the 1.5B refused 80 % of not-in-document questions
#: (direct: 0 %) for 92 % against 95 % of planted facts, TPO equal; on Gemma it cost 15 points of needles and TPO.
#: The 0.5B was not measured with quotes: it keeps direct answers.
AUTO_MODES = {"": "direct", "qwen-coder-1.5b": "quote", "qwen-coder-0.5b": "direct", "gemma-270m": "direct"}


class ModelSettings(BaseSettings):
    """The model, its contexts, and decoding."""

    model_path: Path | None = Field(
        default=None,
        description="GGUF file to serve; wins over DOCQA_MODEL. Unset: the embedded model DOCQA_MODEL names.",
    )
    model: Literal[MODEL_NAMES] = Field(  # runtime/models.py; the default chosen by bench/results/quality.md
        default="qwen-coder-1.5b",
        description="Embedded model, assembled into data_dir: gemma-270m | qwen-coder-0.5b | qwen-coder-1.5b.",
    )
    n_ctx: int = Field(default=32768, ge=256, description="Context size in tokens (document + question + answer).")
    n_batch: int = Field(default=512, ge=32, description="Tokens per llama_decode call during prefill.")
    n_ubatch: int = Field(default=512, ge=MAX_ROWS, description="Physical micro-batch; must hold a verify call.")
    n_threads: int = Field(default_factory=lambda: os.cpu_count() or 1, ge=1, description="Decode threads.")
    n_threads_batch: int | None = Field(default=None, ge=1, description="Prefill threads (default: n_threads).")
    adapt_threads: bool = Field(
        default=True,
        description=(
            "Decode with one thread fewer for each core other processes keep busy (measured every 0.5 s "
            "from /proc/stat, Linux), and back when they stop: a thread without its core stalls the others."
        ),
    )
    n_gpu_layers: int = Field(default=-1, description="Layers offloaded to the GPU (-1 = all; ignored on CPU builds).")
    type_k: KvType = Field(default="f16", description="KV cache type for K.")
    type_v: KvType = Field(default="f16", description="KV cache type for V (quantized V needs flash attention).")
    flash_attn: Literal["auto", "on", "off"] = Field(
        default="auto",
        description=(
            "Flash attention. auto: on a CPU, timed at the first start after a document's first tokens with it "
            "on and off (server/engine/layout.py), off where verify calls are faster without it; elsewhere "
            "llama.cpp's choice. A quantized V cache needs it on."
        ),
    )
    swa_full: bool = Field(
        default=False,
        description="Keep full-size sliding-window caches (lets answers be truncated instead of restored).",
    )
    cpu_repack: Literal["auto", "on", "off", "pair"] = Field(
        default="auto",
        description=(
            "llama.cpp's extra CPU buffer types (repacked weights, AMX): auto = chosen at the first start "
            "(server/engine/layout.py): on, unless the self-test crashed with them, the plain weights read "
            "faster without slowing answers (off), or they read faster and answer slower (pair); off = "
            "llama-server's --no-repack; pair = read documents with the plain weights and answer with the "
            "repacked ones (a second model instance)."
        ),
    )
    selftest: bool = Field(
        default=True,
        description="Before binding the port, load the model in a child process and decode once (cached per build).",
    )
    selftest_timeout_s: float = Field(default=600.0, gt=0, description="Time limit of one self-test child.")
    calibration_file: Path | None = Field(
        default=None,
        description=(
            "Where the start-up verify costs are kept (keyed by model, threads and KV types), default "
            "data_dir/calibration.json: one file lets the servers of several data directories on one "
            "machine measure once."
        ),
    )
    mtp: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="Draft with the model's MTP head: auto = when the GGUF has MTP layers; on = require them.",
    )
    mtp_draft_tokens: int = Field(default=2, ge=1, le=MAX_MTP_DRAFT, description="MTP draft tokens per verify step.")
    draft_model_path: Path | None = Field(
        default=None,
        description=(
            "A second, small GGUF that shares the model's vocabulary (checked at start-up), drafting for it "
            "as llama-server's -md does: for models without MTP layers. Its state for each document is "
            "prefilled at ingestion and saved beside the snapshot."
        ),
    )
    draft_model_tokens: int = Field(
        default=6, ge=1, le=MAX_WINDOW, description="Most tokens the draft model drafts per verify step."
    )
    n_rs_seq: int | None = Field(
        default=None,
        ge=0,
        le=MAX_WINDOW,
        description="Recurrent-state snapshots for rollback on hybrid models (default: 16, the widest window).",
    )
    n_seq_max: int = Field(
        default=4,
        ge=1,
        le=MAX_SEQS,
        description="Questions answered concurrently, batched into one decode call per step (continuous batching).",
    )
    batch_invariant: bool = Field(
        default=False,
        description=(
            "Answers that do not depend on what else is decoded at the same time: a quantized KV cache, "
            "flash attention, no CPU repack, and ggml-cpu's per-row matmul kernels at every row count "
            "(GGML_CPU_TILED_MM=0, runtime/numerics.py; where a start-up probe finds them not in force, "
            "decode calls of at most spec/limits.py INVARIANT_MAX_ROWS rows instead). The README gives "
            "the measured cost."
        ),
    )
    debug_reject_drafts: bool = Field(
        default=False,
        description=(
            "Debug: every draft is rejected after its verify call (the target's token at the first row "
            "is emitted, the draft's cells are rolled back), so answers stay the target's own while every "
            "step takes the rollback path; for leak tests (tests/server/engine/test_rejection_leaks.py). "
            "Slow: never in production."
        ),
    )
    debug_accept_drafts: bool = Field(
        default=False,
        description=(
            "Debug: every draft is accepted whatever the target says (then the target's token after them), so "
            "a step goes as fast as a drafter that is always right; the answer is not the model's own. For "
            "speed on random-weight models, which accept no drafts (bench/device/). Never in production."
        ),
    )
    parallel_ingest: bool = Field(
        default=True,
        description=(
            "Prefill a new document in a sequence of its own while questions about another are answered "
            "(needs KV room for both; hybrid models hold one more recurrent state). Off: ingestion waits for "
            "the running questions to finish."
        ),
    )
    ask_while_reading: bool = Field(
        default=True,
        description=(
            "A question about a document in its first reading is answered from the part read so far (the "
            "answer says how far that is) instead of a 409; needs parallel_ingest. Off: 409 until it is ready."
        ),
    )
    answer_reserve: int = Field(
        default=1024, ge=16, description="Tokens kept free for the question and answer; documents get n_ctx - this."
    )
    vram_bytes: int | None = Field(
        default=None,
        ge=1,
        description="GPU memory budget (bytes, or 24GiB / 24000MiB / 24GB); the model is checked against it at load.",
    )
    preset: Literal["rtx3090-27b"] | None = Field(
        default=None,
        description="Fill unset settings for a known GPU + model (rtx3090-27b: Qwen3.6-27B Q4_K_M on 24 GiB).",
    )

    # -- decoding ----------------------------------------------------------------------------
    default_draft_tokens: int | None = Field(
        default=None,
        ge=0,
        le=MAX_WINDOW,
        description="Draft window when a request names none: unset = adaptive (cost-calibrated), 0 = off.",
    )
    max_ngram: int = Field(default=4, ge=1, le=16, description="Longest n-gram the lookup drafter matches.")
    min_ngram: int = Field(default=2, ge=1, le=16, description="Shortest n-gram the lookup drafter accepts.")
    default_max_tokens: int = Field(default=256, ge=1, description="max_tokens when a request names none.")
    prefill_slice_s: float = Field(
        default=0.5,
        gt=0.0,
        le=60.0,
        description=(
            "Seconds of prefill one engine step decodes next to other work (a document being read, a long "
            "question): its chunk is as many tokens as the measured prefill rate gives in this time, so "
            "a question asked during a reading waits about this long per step."
        ),
    )
    prefill_alone_s: float = Field(
        default=2.0,
        gt=0.0,
        le=600.0,
        description=(
            "Most seconds of prefill one engine step decodes with nothing else to do (at most n_ubatch "
            "tokens): a question that arrives in the middle of such a chunk waits for it to end."
        ),
    )
    answer_mode: Literal["auto", "quote", "direct"] = Field(
        default="auto",
        description=(
            "How answers are written when a request names no mode: quote (the passage of the document that "
            "answers, copied from it once the model has judged that it answers the question, then the answer; no "
            "such passage: 'The document does not say.'), direct (the answer alone), or auto: the better of "
            "the two for the model, by bench/results/quality.md."
        ),
    )
    quote_support: float = Field(
        default=THRESHOLD,
        ge=0.0,
        le=1.0,
        description=(
            "Quote-first answers: before the quote the model is asked of each of the passages that best match "
            "the question whether it answers it; the quote starts in the one with the highest probability of "
            "yes when that is at or above this, else the answer is 'The document does not say.' with the "
            "reason. Higher refuses more of both kinds of question; 0 asks nothing and lets every quote stand "
            "(bench/results/quality.md measures both kinds)."
        ),
    )
    answer_history: bool = Field(
        default=True,
        description=(
            "Draft from the document's earlier answers (kept with it, spec/history.py), so a question asked "
            "again is answered at copy speed. Off: no history is read or written (one user's answers never "
            "speed up another's)."
        ),
    )
    answer_history_tokens: int = Field(
        default=32_768, ge=256, description="Tokens of earlier answers kept per document (oldest dropped first)."
    )

    def answer_mode_for_model(self) -> str:
        """``answer_mode``, with ``auto`` resolved: :data:`AUTO_MODES` for an embedded model; a GGUF of
        the user's own (``model_path``) answers as ``AUTO_MODES[""]`` says (directly)."""
        if self.answer_mode != "auto":
            return self.answer_mode
        return AUTO_MODES.get(self.model if self.model_path is None else "", AUTO_MODES[""])

    @field_validator("vram_bytes", mode="before")
    @classmethod
    def _size(cls, value: object) -> object:
        return parse_size(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check_model(self) -> ModelSettings:
        if self.batch_invariant:
            self._make_batch_invariant()
        if self.debug_accept_drafts and self.debug_reject_drafts:
            raise ValueError("debug_accept_drafts and debug_reject_drafts exclude each other")
        if self.min_ngram > self.max_ngram:
            raise ValueError(f"min_ngram ({self.min_ngram}) must be <= max_ngram ({self.max_ngram})")
        if self.n_ubatch > self.n_batch:
            raise ValueError(f"n_ubatch ({self.n_ubatch}) must be <= n_batch ({self.n_batch})")
        if self.type_v not in ("f32", "f16", "bf16") and self.flash_attn == "off":
            raise ValueError(
                f"type_v={self.type_v} is a quantized V cache, which llama.cpp supports only with flash "
                "attention: set DOCQA_FLASH_ATTN=on (or auto), or DOCQA_TYPE_V=f16"
            )
        if self.answer_reserve >= self.n_ctx:
            raise ValueError(f"answer_reserve ({self.answer_reserve}) must be < n_ctx ({self.n_ctx})")
        return self

    def _make_batch_invariant(self) -> None:
        """Fill the settings under which a row's logits do not depend on the other rows of its decode
        call nor on other sequences' cells (measured on the CPU backend, bench/results/invariance.md):
        a quantized KV cache and flash attention, so ggml-cpu's flash attention takes its one-row
        reference path (ops.cpp ``ggml_compute_forward_flash_attn_ext_f16_one_chunk``: no KV split,
        no query tiling, masked cells skipped), and no CPU repack (whose gemm and gemv differ). What
        the user set explicitly is kept, unless it contradicts the mode. The matmul kernel is chosen
        at load (server/engine/loading.py, runtime/numerics.py)."""
        explicit = self.model_fields_set
        if GGML[self.type_k].quantized is False:
            if "type_k" in explicit:
                raise ValueError(f"batch_invariant needs a quantized K cache (q8_0, q4_0, ...), not {self.type_k}")
            self.type_k = "q8_0"
        if GGML[self.type_v].quantized is False:
            if "type_v" in explicit:
                raise ValueError(f"batch_invariant needs a quantized V cache (q8_0, q4_0, ...), not {self.type_v}")
            self.type_v = "q8_0"
        for name, value in (("flash_attn", "on"), ("cpu_repack", "off")):
            if getattr(self, name) != value:
                if name in explicit:
                    raise ValueError(f"batch_invariant needs {name}={value}, not {getattr(self, name)}")
                setattr(self, name, value)

    @property
    def extra_bufts(self) -> bool | None:
        """``cpu_repack`` as runtime.llama.Model's ``extra_bufts`` (None: the build decides)."""
        return {"auto": None, "on": True, "off": False, "pair": True}[self.cpu_repack]

    @property
    def read_plain(self) -> bool:
        """Documents are read by a second instance of the model with plain weights (``cpu_repack`` pair;
        server/engine/loading.py), the answers decoded with the repacked ones."""
        return self.cpu_repack == "pair"

    @property
    def document_budget(self) -> int:
        """Largest document prefix, in tokens: n_ctx minus the answer reserve."""
        return self.n_ctx - self.answer_reserve
