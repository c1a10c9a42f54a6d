"""Model and context wrappers over llama-cpp-python 0.3.36's ctypes bindings (``llama_cpp.llama_cpp``).

Why not the high-level ``Llama`` class: it crashes on prompts longer than ``n_batch`` with a draft
model, and ``logits_all`` allocates n_ctx x n_vocab floats (../shared/notes/llama-cpp.md §0, §10).
Here one ``llama_batch`` of ``n_batch`` rows is allocated once, filled through numpy views, and only
the rows we verify ask for logits.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import numpy as np
from llama_cpp import llama_cpp as C
from llama_cpp import llama_cpp_ext as X

from runtime.system import has_amx_kernels

log = logging.getLogger("docqa.llama")

GGML_TYPES = {
    "f32": C.GGML_TYPE_F32,
    "f16": C.GGML_TYPE_F16,
    "bf16": 30,
    "q8_0": C.GGML_TYPE_Q8_0,
    "q4_0": C.GGML_TYPE_Q4_0,
    "q4_1": C.GGML_TYPE_Q4_1,
    "q5_0": C.GGML_TYPE_Q5_0,
    "q5_1": C.GGML_TYPE_Q5_1,
    "iq4_nl": C.GGML_TYPE_IQ4_NL,
}
FLASH_ATTN = {
    "auto": C.LLAMA_FLASH_ATTN_TYPE_AUTO,
    "on": C.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    "off": C.LLAMA_FLASH_ATTN_TYPE_DISABLED,
}
LLAMA_CPP_PYTHON_VERSION: str = llama_cpp.__version__


class RuntimeError_(Exception):
    """A llama.cpp call failed (model load, context creation, decode, state I/O)."""


class DecodeError(RuntimeError_):
    """``llama_decode`` returned non-zero: 1 = no KV slot, 2 = aborted, <0 = invalid batch/fatal."""

    def __init__(self, rc: int, n_tokens: int) -> None:
        self.rc = rc
        hint = "the context is full" if rc == 1 else "see the server log"
        super().__init__(f"llama_decode failed with code {rc} on {n_tokens} tokens ({hint})")


_backend_lock = threading.Lock()
_backend_ready = False
_log_callback = None  # kept alive for as long as llama.cpp may call it


def _init_backend() -> None:
    """Initialise ggml once per process and route llama.cpp's log lines to Python logging."""
    global _backend_ready, _log_callback
    with _backend_lock:
        if _backend_ready:
            return
        C.llama_backend_init()

        @C.llama_log_callback
        def _on_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
            # ggml levels: 2 = info, 3 = warn, 4 = error; continuation lines (5) follow their parent.
            line = text.decode("utf-8", errors="replace").rstrip()
            if line:
                log.log(logging.ERROR if level == 4 else logging.DEBUG, "%s", line)

        _log_callback = _on_log
        C.llama_log_set(_log_callback, ctypes.c_void_p(0))
        _backend_ready = True


def model_fingerprint(path: Path) -> str:
    """A cheap identity for a GGUF file: size plus sha256 of its first and last 4 MiB.

    Hashing a 16 GB model in full would take a minute at every start; the GGUF header (tensor
    names, types, shapes and metadata) sits at the start and the last tensors at the end, so an
    edited or different file changes this value.
    """
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with path.open("rb") as f:
        digest.update(f.read(4 << 20))
        if size > 8 << 20:
            f.seek(-(4 << 20), 2)
            digest.update(f.read())
    return f"{size}-{digest.hexdigest()[:32]}"


class Model:
    """A loaded GGUF model and its vocabulary. Tokenizer calls are read-only and thread-safe."""

    def __init__(
        self, path: Path, n_gpu_layers: int = -1, load_mtp: bool = False, extra_bufts: bool | None = None
    ) -> None:
        _init_backend()
        self.path = Path(path)
        if not self.path.is_file():
            raise RuntimeError_(f"model file not found: {self.path}; set DOCQA_MODEL_PATH to a GGUF file")
        params = C.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        # MTP (nextn) tensors are skipped unless asked for; an MTP context on a model loaded without
        # them aborts the process inside llama.cpp (notes §2.1), so this flag is remembered.
        params.load_mtp = load_mtp
        # Extra CPU buffer types (AMX, CPU_REPACK) hold weights in kernel-specific layouts. None: on,
        # unless this build has AMX kernels, which crash on some Xeons (runtime/system.py).
        if extra_bufts is None:
            extra_bufts = not has_amx_kernels()
        params.use_extra_bufts = extra_bufts
        self.extra_bufts = extra_bufts
        self.ptr = C.llama_model_load_from_file(str(self.path).encode(), params)
        if not self.ptr:
            raise RuntimeError_(f"llama.cpp could not load {self.path}; is it a GGUF model file?")
        self.vocab = C.llama_model_get_vocab(self.ptr)
        self.n_vocab: int = C.llama_vocab_n_tokens(self.vocab)
        self.n_ctx_train: int = C.llama_model_n_ctx_train(self.ptr)
        self.n_swa: int = C.llama_model_n_swa(self.ptr)
        self.add_bos: bool = bool(C.llama_vocab_get_add_bos(self.vocab))
        self.bos: int = C.llama_vocab_bos(self.vocab)
        raw_template = C.llama_model_chat_template(self.ptr, None)
        self.chat_template: str | None = raw_template.decode("utf-8") if raw_template else None
        buf = ctypes.create_string_buffer(256)
        C.llama_model_desc(self.ptr, buf, len(buf))
        self.description = buf.value.decode("utf-8", errors="replace")
        self.fingerprint = model_fingerprint(self.path)
        self.n_embd: int = C.llama_model_n_embd(self.ptr)
        self.n_layer_nextn: int = C.llama_model_n_layer_nextn(self.ptr)
        self.mtp_loaded = load_mtp and self.n_layer_nextn > 0
        self.is_recurrent = bool(C.llama_model_is_recurrent(self.ptr)) or bool(C.llama_model_is_hybrid(self.ptr))
        self._pieces: dict[int, bytes] = {}
        self._unspaced: dict[int, list[int]] = {}

    def tokenize(self, text: str, *, parse_special: bool, add_bos: bool = False) -> np.ndarray:
        """Tokenize ``text``; returns int32 token ids, shape [n_tokens].

        ``parse_special=False`` keeps text such as ``<|im_start|>`` as plain text: use it for every
        user-supplied string. Only our own prompt scaffolding is tokenized with it on.
        """
        data = text.encode("utf-8", errors="replace")
        capacity = len(data) + 8
        while True:
            out = (C.llama_token * capacity)()
            n = C.llama_tokenize(self.vocab, data, len(data), out, capacity, add_bos, parse_special)
            if n >= 0:
                return np.frombuffer(out, dtype=np.int32, count=n).copy()
            capacity = -n

    def piece(self, token: int) -> bytes:
        """UTF-8 bytes of one token; control tokens render as b"" (cached per id)."""
        cached = self._pieces.get(token)
        if cached is None:
            buf = ctypes.create_string_buffer(128)
            n = C.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = C.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
            cached = buf.raw[:n]
            self._pieces[token] = cached
        return cached

    def unspaced(self, token: int) -> list[int]:
        """Token ids spelling ``token``'s text without its leading whitespace (" of" -> ["of"]);
        ``[token]`` when it has none. Cached per id."""
        ids = self._unspaced.get(token)
        if ids is None:
            text = self.piece(token)
            stripped = text.lstrip()
            ids = [token]
            if stripped and stripped != text:
                ids = self.tokenize(stripped.decode("utf-8", errors="replace"), parse_special=False).tolist()
            self._unspaced[token] = ids
        return list(ids)

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.piece(int(t)) for t in tokens).decode("utf-8", errors="replace")

    def token_text(self, token: int) -> str:
        """The vocabulary's text for a token, special tokens included ("" for -1)."""
        if token < 0:
            return ""
        raw = C.llama_vocab_get_text(self.vocab, token)
        return raw.decode("utf-8", errors="replace") if raw else ""

    def is_eog(self, token: int) -> bool:
        return bool(C.llama_vocab_is_eog(self.vocab, token))

    def is_control(self, token: int) -> bool:
        """True for control/special tokens (BOS, EOS, chat-template markers)."""
        return bool(C.llama_vocab_is_control(self.vocab, token))

    def close(self) -> None:
        if self.ptr:
            C.llama_model_free(self.ptr)
            self.ptr = None


@dataclass(frozen=True, slots=True)
class ContextConfig:
    """Context parameters. ``n_ubatch`` must hold a whole verify call (window + 1 rows)."""

    n_ctx: int
    n_batch: int
    n_ubatch: int
    n_threads: int
    n_threads_batch: int
    type_k: str = "f16"
    type_v: str = "f16"
    flash_attn: str = "auto"
    swa_full: bool = False
    n_seq_max: int = 1
    kv_unified: bool = False  # one KV pool for all sequences: seq_cp shares a prefix's cells (notes §6)
    n_rs_seq: int = 0  # recurrent-state snapshots kept for rollback (hybrid models; notes §5)
    mtp: bool = False  # an MTP draft context (LLAMA_CONTEXT_TYPE_MTP) instead of a target context

    def __post_init__(self) -> None:
        if self.type_k not in GGML_TYPES or self.type_v not in GGML_TYPES:
            raise ValueError(f"unknown KV cache type {self.type_k}/{self.type_v}; choose from {sorted(GGML_TYPES)}")
        if self.flash_attn not in FLASH_ATTN:
            raise ValueError(f"flash_attn must be one of {sorted(FLASH_ATTN)}")
        if self.n_ubatch > self.n_batch:
            raise ValueError(f"n_ubatch ({self.n_ubatch}) must be <= n_batch ({self.n_batch})")
        if self.n_rs_seq and self.n_ubatch <= self.n_rs_seq + 1:
            # llama.cpp asserts n_ubatch > n_keep_tail (= n_rs_seq + 1) and aborts the process.
            raise ValueError(f"n_ubatch ({self.n_ubatch}) must be > n_rs_seq + 1 ({self.n_rs_seq + 1})")


class Context:
    """One ``llama_context`` plus one reusable ``llama_batch`` of ``n_batch`` rows.

    Not thread-safe: exactly one thread (the server's engine thread) may use it.
    """

    def __init__(self, model: Model, config: ContextConfig) -> None:
        self.model = model
        self.config = config
        self.ptr = None
        if config.mtp and not model.mtp_loaded:
            # Guard: llama.cpp would hit GGML_ASSERT(eh_proj) and abort the whole process.
            raise RuntimeError_(f"{model.path.name} has no MTP layers loaded; cannot create an MTP context")
        params = C.llama_context_default_params()
        params.n_ctx = config.n_ctx
        params.n_batch = config.n_batch
        params.n_ubatch = config.n_ubatch
        params.n_seq_max = config.n_seq_max
        params.n_threads = config.n_threads
        params.n_threads_batch = config.n_threads_batch
        params.type_k = GGML_TYPES[config.type_k]
        params.type_v = GGML_TYPES[config.type_v]
        params.flash_attn_type = FLASH_ATTN[config.flash_attn]
        params.swa_full = config.swa_full
        params.kv_unified = config.kv_unified
        params.n_rs_seq = config.n_rs_seq
        params.ctx_type = 1 if config.mtp else 0  # LLAMA_CONTEXT_TYPE_MTP
        params.no_perf = True
        self.ptr = C.llama_init_from_model(model.ptr, params)
        if not self.ptr:
            raise RuntimeError_(
                f"llama.cpp could not create a context with {config}; a quantized V cache needs flash "
                "attention, and n_ctx must fit in memory"
            )
        self.n_ctx: int = C.llama_n_ctx(self.ptr)
        self.n_rs_seq: int = C.llama_n_rs_seq(self.ptr)  # effective value (some archs clamp it to 0)
        self.mem = C.llama_get_memory(self.ptr)
        self.n_batch = config.n_batch
        self.n_embd = C.llama_model_n_embd_out(model.ptr)
        # An MTP batch carries a token AND an embedding per row (notes §2.2): llama_batch_init with
        # embd allocates only the embeddings, so the token array is ours (and detached before free).
        self._batch = C.llama_batch_init(self.n_batch, self.n_embd if config.mtp else 0, 1)
        b = self._batch
        self._embd = None
        if config.mtp:
            self._token_buf = np.zeros(self.n_batch, dtype=np.int32)
            b.token = self._token_buf.ctypes.data_as(ctypes.POINTER(C.llama_token))
            self._embd = np.ctypeslib.as_array(b.embd, shape=(self.n_batch, self.n_embd))
        # Zero-copy numpy views over the batch arrays, shape [n_batch] each.
        self._tokens = np.ctypeslib.as_array(b.token, shape=(self.n_batch,))
        self._pos = np.ctypeslib.as_array(b.pos, shape=(self.n_batch,))
        self._n_seq_id = np.ctypeslib.as_array(b.n_seq_id, shape=(self.n_batch,))
        self._logits_flags = np.ctypeslib.as_array(b.logits, shape=(self.n_batch,))
        self._n_seq_id[:] = 1
        # Each row's seq_id array (one id per row) is pointed into one numpy array, so a multi-sequence
        # batch is filled with one slice assignment; llama.cpp's own arrays are put back before free.
        self._seq = np.zeros(self.n_batch, dtype=np.int32)
        self._seq_id_orig = [ctypes.cast(b.seq_id[i], ctypes.c_void_p).value for i in range(self.n_batch)]
        base = self._seq.ctypes.data
        for i in range(self.n_batch):
            b.seq_id[i] = ctypes.cast(base + 4 * i, ctypes.POINTER(C.llama_seq_id))
        self.n_outputs = 0
        self.n_decoded = 0

    # -- decoding -------------------------------------------------------------------------------
    def decode(
        self,
        tokens: Sequence[int] | np.ndarray,
        pos0: int,
        *,
        seq_id: int = 0,
        outputs: str = "last",
        embd: np.ndarray | None = None,
    ) -> int:
        """Decode ``tokens`` at positions ``pos0..pos0+n-1`` of ``seq_id`` in one ``llama_decode``.

        ``outputs``: "last" (logits for the final row), "all" (one row per token, as a verify call
        needs) or "none". ``embd`` (MTP contexts only): float32 [n, n_embd], the target hidden
        state paired with each token. Returns the number of logits rows; read them with
        :meth:`logits`. Raises DecodeError on a non-zero return code.
        """
        n = len(tokens)
        if not 0 < n <= self.n_batch:
            raise ValueError(f"decode takes 1..{self.n_batch} tokens, got {n}")
        self._seq[:n] = seq_id
        self._tokens[:n] = tokens
        if self._embd is not None:
            if embd is None:
                raise ValueError("an MTP context decodes tokens together with target hidden states")
            self._embd[:n] = embd
        self._pos[:n] = np.arange(pos0, pos0 + n, dtype=np.int32)
        flags = self._logits_flags
        if outputs == "all":
            flags[:n] = 1
            n_out = n
        else:
            flags[:n] = 0
            n_out = 0
            if outputs == "last":
                flags[n - 1] = 1
                n_out = 1
        self._batch.n_tokens = n
        rc = C.llama_decode(self.ptr, self._batch)
        if rc != 0:
            self.n_outputs = 0
            raise DecodeError(rc, n)
        self.n_outputs = n_out
        self.n_decoded = n
        return n_out

    def decode_rows(
        self,
        tokens: np.ndarray,
        pos: np.ndarray,
        seq_ids: np.ndarray,
        outputs: np.ndarray,
        embd: np.ndarray | None = None,
    ) -> int:
        """One ``llama_decode`` of rows from any sequences (continuous batching).

        All arrays have shape [n]: token id, position and seq_id of each row, and ``outputs`` (bool)
        marks the rows that get logits. Logits come back in row order of the marked rows; with
        ``export_hidden(masked=False)`` :meth:`hidden` has one row per batch row. ``embd`` (MTP
        contexts only): float32 [n, n_embd]. Raises DecodeError.
        """
        n = len(tokens)
        if not 0 < n <= self.n_batch:
            raise ValueError(f"decode_rows takes 1..{self.n_batch} rows, got {n}")
        if (embd is None) != (self._embd is None):
            raise ValueError("an MTP context decodes tokens with target hidden states (embd), a target context without")
        if embd is not None:
            self._embd[:n] = embd
        self._tokens[:n] = tokens
        self._pos[:n] = pos
        self._seq[:n] = seq_ids
        self._logits_flags[:n] = outputs
        self._batch.n_tokens = n
        rc = C.llama_decode(self.ptr, self._batch)
        if rc != 0:
            self.n_outputs = 0
            raise DecodeError(rc, n)
        self.n_outputs = int(np.count_nonzero(outputs))
        self.n_decoded = n
        return self.n_outputs

    # -- MTP hidden states (llama-ext.h, bound in llama_cpp_ext) ----------------------------------
    def export_hidden(self, masked: bool) -> None:
        """Make each decode export nextn hidden states: every row (``masked=False``, the target
        side) or only output rows (the MTP side)."""
        X.llama_set_embeddings_nextn(self.ptr, True, masked)

    def hidden(self) -> np.ndarray:
        """Hidden states of the last decode, float32 [rows, n_embd] (a view until the next decode):
        every batch row after ``export_hidden(masked=False)``, else the output rows."""
        rows = self.n_decoded if not self.config.mtp else self.n_outputs
        ptr = X.llama_get_embeddings_nextn(self.ptr)
        return np.ctypeslib.as_array(ptr, shape=(rows, self.n_embd))

    def prefill(
        self,
        tokens: np.ndarray,
        pos0: int,
        *,
        seq_id: int = 0,
        on_progress: Callable[[int], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        on_chunk: Callable[[np.ndarray, int], None] | None = None,
    ) -> bool:
        """Decode ``tokens`` in ``n_batch`` chunks; logits only for the very last token.

        ``on_chunk(chunk, pos0)`` runs after each chunk's decode (the MTP catch-up), then
        ``on_progress(n_done)``. Returns False if ``should_stop()`` turned true between chunks (the
        sequence then holds a partial prefix and must be cleared by the caller).
        """
        n = len(tokens)
        for start in range(0, n, self.n_batch):
            if should_stop is not None and should_stop():
                return False
            chunk = tokens[start : start + self.n_batch]
            last = start + len(chunk) >= n
            self.decode(chunk, pos0 + start, seq_id=seq_id, outputs="last" if last else "none")
            if on_chunk is not None:
                on_chunk(chunk, pos0 + start)
            if on_progress is not None:
                on_progress(start + len(chunk))
        return True

    def logits(self) -> np.ndarray:
        """Logits of the last decode, float32 shape [n_outputs, n_vocab]; a view valid until the next decode."""
        if self.n_outputs == 0:
            raise RuntimeError_("the last decode produced no logits")
        ptr = C.llama_get_logits(self.ptr)
        return np.ctypeslib.as_array(ptr, shape=(self.n_outputs, self.model.n_vocab))

    # -- memory (KV cache) ------------------------------------------------------------------------
    def seq_rm(self, seq_id: int, p0: int, p1: int = -1) -> bool:
        """Remove positions [p0, p1) of ``seq_id`` (p1 = -1: to the end). False if the cache refused."""
        return bool(C.llama_memory_seq_rm(self.mem, seq_id, p0, p1))

    def seq_cp(self, src: int, dst: int, p0: int = 0, p1: int = -1) -> None:
        """Give ``dst`` the cells of ``src`` at positions [p0, p1). With ``kv_unified`` the cells are
        shared, not copied; a recurrent state is shared copy-on-write whatever the range (notes §6)."""
        C.llama_memory_seq_cp(self.mem, src, dst, p0, p1)

    def pos_min(self, seq_id: int = 0) -> int:
        return int(C.llama_memory_seq_pos_min(self.mem, seq_id))

    def pos_max(self, seq_id: int = 0) -> int:
        return int(C.llama_memory_seq_pos_max(self.mem, seq_id))

    def clear(self) -> None:
        C.llama_memory_clear(self.mem, True)

    # -- state (llama_state_seq_*) ----------------------------------------------------------------
    def state_size(self, seq_id: int = 0) -> int:
        """Bytes :meth:`state_get` would return for ``seq_id``."""
        return int(C.llama_state_seq_get_size(self.ptr, seq_id))

    def state_get(self, seq_id: int = 0) -> bytes:
        """The whole state of ``seq_id`` (KV cells, recurrent state) as bytes."""
        size = C.llama_state_seq_get_size(self.ptr, seq_id)
        buf = (ctypes.c_uint8 * size)()
        written = C.llama_state_seq_get_data(self.ptr, buf, size, seq_id)
        if written != size:
            raise RuntimeError_(f"llama_state_seq_get_data wrote {written} of {size} bytes")
        return bytes(buf)

    def state_set(self, data: bytes, seq_id: int = 0) -> None:
        """Replace ``seq_id``'s state with ``data`` from :meth:`state_get`."""
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        read = C.llama_state_seq_set_data(self.ptr, buf, len(data), seq_id)
        if read != len(data):
            raise RuntimeError_(f"llama_state_seq_set_data read {read} of {len(data)} bytes (no free KV cells?)")

    def state_save_file(self, path: Path, seq_id: int, tokens: np.ndarray) -> int:
        """Stream ``seq_id``'s state plus ``tokens`` to ``path``; returns bytes written."""
        arr = np.ascontiguousarray(tokens, dtype=np.int32)
        ptr = arr.ctypes.data_as(ctypes.POINTER(C.llama_token))
        written = C.llama_state_seq_save_file(self.ptr, str(path).encode(), seq_id, ptr, len(arr))
        if written == 0:
            raise RuntimeError_(f"llama_state_seq_save_file could not write {path}")
        return int(written)

    def state_load_file(self, path: Path, seq_id: int, capacity: int) -> np.ndarray:
        """Load a state file into ``seq_id``; returns the token ids stored with it."""
        out = (C.llama_token * max(capacity, 1))()
        n_out = ctypes.c_size_t(0)
        read = C.llama_state_seq_load_file(
            self.ptr, str(path).encode(), seq_id, out, max(capacity, 1), ctypes.byref(n_out)
        )
        if read == 0:
            raise RuntimeError_(f"llama_state_seq_load_file could not load {path} (incompatible or no free cells)")
        return np.frombuffer(out, dtype=np.int32, count=n_out.value).copy()

    def close(self) -> None:
        if self.ptr:
            if self._embd is not None:
                self._batch.token = ctypes.POINTER(C.llama_token)()  # ours, not llama.cpp's to free
            for i, orig in enumerate(self._seq_id_orig):
                self._batch.seq_id[i] = ctypes.cast(orig, ctypes.POINTER(C.llama_seq_id))
            C.llama_batch_free(self._batch)
            C.llama_free(self.ptr)
            self.ptr = None
