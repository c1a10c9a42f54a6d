"""One ``llama_context`` plus one reusable ``llama_batch``: decode, logits, hidden states, memory and
state I/O.

One ``llama_batch`` of ``n_batch`` rows is allocated once and filled through numpy views, and only
the rows we verify ask for logits.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from llama_cpp import llama_cpp as C
from llama_cpp import llama_cpp_ext as X

from runtime.backend import DecodeError, LlamaError
from runtime.config import FLASH_ATTN, ContextConfig
from runtime.kvtypes import GGML
from runtime.model import Model


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
            raise LlamaError(f"{model.path.name} has no MTP layers loaded; cannot create an MTP context")
        params = C.llama_context_default_params()
        params.n_ctx = config.n_ctx
        params.n_batch = config.n_batch
        params.n_ubatch = config.n_ubatch
        params.n_seq_max = config.n_seq_max
        params.n_threads = config.n_threads
        params.n_threads_batch = config.n_threads_batch
        params.type_k = GGML[config.type_k].ggml_id
        params.type_v = GGML[config.type_v].ggml_id
        params.flash_attn_type = FLASH_ATTN[config.flash_attn]
        params.swa_full = config.swa_full
        params.kv_unified = config.kv_unified
        params.n_rs_seq = config.n_rs_seq
        params.ctx_type = 1 if config.mtp else 0  # LLAMA_CONTEXT_TYPE_MTP
        params.no_perf = True
        self.ptr = C.llama_init_from_model(model.ptr, params)
        if not self.ptr:
            raise LlamaError(
                f"llama.cpp could not create a context with {config}; a quantized V cache needs flash "
                "attention, and n_ctx must fit in memory"
            )
        self.n_ctx: int = C.llama_n_ctx(self.ptr)
        self.n_rs_seq: int = C.llama_n_rs_seq(self.ptr)  # effective value (some archs clamp it to 0)
        self.mem = C.llama_get_memory(self.ptr)
        self.n_batch = config.n_batch
        self.n_embd = C.llama_model_n_embd_out(model.ptr)
        # An MTP batch carries a token AND an embedding per row (the pair x_p, h_{p-1}): llama_batch_init with
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
        flags = np.zeros(n, dtype=np.int8)
        if outputs == "all":
            flags[:] = 1
        elif outputs == "last":
            flags[-1] = 1
        pos = np.arange(pos0, pos0 + n, dtype=np.int32)
        return self.decode_rows(np.asarray(tokens, dtype=np.int32), pos, np.full(n, seq_id, np.int32), flags, embd)

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
            raise LlamaError("the last decode produced no logits")
        ptr = C.llama_get_logits(self.ptr)
        return np.ctypeslib.as_array(ptr, shape=(self.n_outputs, self.model.n_vocab))

    # -- memory (KV cache) ------------------------------------------------------------------------
    def seq_rm(self, seq_id: int, p0: int, p1: int = -1) -> bool:
        """Remove positions [p0, p1) of ``seq_id`` (p1 = -1: to the end). False if the cache refused."""
        return bool(C.llama_memory_seq_rm(self.mem, seq_id, p0, p1))

    def seq_cp(self, src: int, dst: int, p0: int = 0, p1: int = -1) -> None:
        """Give ``dst`` the cells of ``src`` at positions [p0, p1). With ``kv_unified`` the cells are
        shared, not copied; a recurrent state ignores the range and shares the source's current cell
        copy-on-write, so copy only from a sequence that ends exactly at the prefix."""
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
        return bytes(self._state_buffer(seq_id))

    def _state_buffer(self, seq_id: int) -> ctypes.Array:
        """``seq_id``'s state in a ctypes buffer of its exact size (llama_state_seq_get_data)."""
        size = C.llama_state_seq_get_size(self.ptr, seq_id)
        buf = (ctypes.c_uint8 * size)()
        written = C.llama_state_seq_get_data(self.ptr, buf, size, seq_id)
        if written != size:
            raise LlamaError(f"llama_state_seq_get_data wrote {written} of {size} bytes")
        return buf

    def state_set(self, data: bytes, seq_id: int = 0) -> None:
        """Replace ``seq_id``'s state with ``data`` from :meth:`state_get`."""
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        read = C.llama_state_seq_set_data(self.ptr, buf, len(data), seq_id)
        if read != len(data):
            raise LlamaError(f"llama_state_seq_set_data read {read} of {len(data)} bytes (no free KV cells?)")

    def state_into(self, other: Context, seq_id: int, dst_seq: int) -> int:
        """Copy ``seq_id``'s state into ``dst_seq`` of ``other`` (a context of another instance of the
        same model, with the same cache types), through one buffer: :meth:`state_get` then
        :meth:`state_set` without the ``bytes`` copy between them. ``dst_seq`` is emptied first.
        Returns the bytes copied. Raises LlamaError when ``other`` refuses them (no free KV cells)."""
        buf = self._state_buffer(seq_id)
        size = len(buf)
        C.llama_memory_seq_rm(other.mem, dst_seq, 0, -1)
        read = C.llama_state_seq_set_data(other.ptr, buf, size, dst_seq)
        if read != size:
            raise LlamaError(f"llama_state_seq_set_data read {read} of {size} bytes (no free KV cells?)")
        return int(size)

    def state_save_file(self, path: Path, seq_id: int, tokens: np.ndarray) -> int:
        """Stream ``seq_id``'s state plus ``tokens`` to ``path``; returns bytes written."""
        arr = np.ascontiguousarray(tokens, dtype=np.int32)
        ptr = arr.ctypes.data_as(ctypes.POINTER(C.llama_token))
        written = C.llama_state_seq_save_file(self.ptr, str(path).encode(), seq_id, ptr, len(arr))
        if written == 0:
            raise LlamaError(f"llama_state_seq_save_file could not write {path}")
        return int(written)

    def state_load_file(self, path: Path, seq_id: int, capacity: int) -> np.ndarray:
        """Load a state file into ``seq_id``; returns the token ids stored with it."""
        out = (C.llama_token * max(capacity, 1))()
        n_out = ctypes.c_size_t(0)
        read = C.llama_state_seq_load_file(
            self.ptr, str(path).encode(), seq_id, out, max(capacity, 1), ctypes.byref(n_out)
        )
        if read == 0:
            raise LlamaError(f"llama_state_seq_load_file could not load {path} (incompatible or no free cells)")
        return np.frombuffer(out, dtype=np.int32, count=n_out.value).copy()

    def set_threads(self, n_threads: int, n_threads_batch: int | None = None) -> None:
        """Threads for the next decodes (llama_set_n_threads): ``n_threads`` for single-token batches,
        ``n_threads_batch`` (default the same) for larger ones. Takes effect on the next decode."""
        C.llama_set_n_threads(self.ptr, n_threads, n_threads_batch or n_threads)

    def close(self) -> None:
        if self.ptr:
            if self._embd is not None:
                self._batch.token = ctypes.POINTER(C.llama_token)()  # ours, not llama.cpp's to free
            for i, orig in enumerate(self._seq_id_orig):
                self._batch.seq_id[i] = ctypes.cast(orig, ctypes.POINTER(C.llama_seq_id))
            C.llama_batch_free(self._batch)
            C.llama_free(self.ptr)
            self.ptr = None
