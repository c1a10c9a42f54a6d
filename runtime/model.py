"""A loaded GGUF model and its vocabulary (``llama_model``, ``llama_vocab``)."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from llama_cpp import llama_cpp as C

from runtime.backend import LlamaError, init_backend


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


#: Model.max_token_chars by model_fingerprint(), for this process.
_MAX_TOKEN_CHARS: dict[str, int] = {}
#: Loaded models nobody holds (:func:`release`), newest last, at most :data:`KEEP_IDLE`: the next
#: :func:`acquire` of the same file with the same parameters takes one instead of loading it again.
_IDLE: list[Model] = []
_IDLE_LOCK = threading.Lock()
KEEP_IDLE = 1


def acquire(path: Path, n_gpu_layers: int = -1, load_mtp: bool = False, extra_bufts: bool | None = None) -> Model:
    """A loaded ``Model(path, ...)``: an idle one of the same file (path, size and mtime) and
    parameters when this process released one (:func:`release`), else a new load. The caller holds it
    alone until it releases it. A server started again in the same process (the tests' in-process
    servers; a reload) skips the load: 0.7 s for the embedded Gemma on 2 cores, most of it its
    262,144-token vocabulary (docs/testing.md)."""
    params = {"n_gpu_layers": n_gpu_layers, "load_mtp": load_mtp, "extra_bufts": extra_bufts}
    key = _key(Path(path), params)
    with _IDLE_LOCK:
        for i, model in enumerate(_IDLE):
            if model.key == key and model.ptr:
                return _IDLE.pop(i)
    return Model(path, **params)


def release(model: Model) -> None:
    """Hand back a model from :func:`acquire`: kept loaded for the next acquire of it (the most recent
    :data:`KEEP_IDLE`), the older idle ones freed."""
    with _IDLE_LOCK:
        _IDLE.append(model)
        freed = _IDLE[: max(0, len(_IDLE) - KEEP_IDLE)]
        del _IDLE[: len(freed)]
    for old in freed:
        old.close()


def _key(path: Path, params: dict) -> tuple:
    """What makes two loads the same: the file (resolved path, size, mtime) and the load parameters."""
    stat = path.resolve().stat()
    return (str(path.resolve()), stat.st_size, stat.st_mtime_ns, tuple(sorted(params.items())))


class Model:
    """A loaded GGUF model and its vocabulary. Tokenizer calls are read-only and thread-safe."""

    def __init__(
        self, path: Path, n_gpu_layers: int = -1, load_mtp: bool = False, extra_bufts: bool | None = None
    ) -> None:
        init_backend()
        self.path = Path(path)
        if not self.path.is_file():
            raise LlamaError(f"model file not found: {self.path}; set DOCQA_MODEL_PATH to a GGUF file")
        params_given = {"n_gpu_layers": n_gpu_layers, "load_mtp": load_mtp, "extra_bufts": extra_bufts}
        params = C.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        # MTP (nextn) tensors are skipped unless asked for; an MTP context on a model loaded without
        # them aborts the process inside llama.cpp (a ``GGML_ASSERT`` on the null ``nextn.eh_proj`` while
        # the graph is built), so this flag is remembered.
        params.load_mtp = load_mtp
        # Extra CPU buffer types (AMX, CPU_REPACK) hold weights in kernel-specific layouts. None: on; the
        # start-up self-test turns them off if they crash the model here (server/engine/selftest.py).
        # Measured on a 2-core Xeon with AMX (bench/results/prefill.md): the patched AMX kernels read
        # 1.4-1.6x faster than the repacked ones (runtime/llama_build.py).
        if extra_bufts is None:
            extra_bufts = True
        params.use_extra_bufts = extra_bufts
        self.extra_bufts = extra_bufts
        self.ptr = C.llama_model_load_from_file(str(self.path).encode(), params)
        if not self.ptr:
            raise LlamaError(f"llama.cpp could not load {self.path}; is it a GGUF model file?")
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
        self.key = _key(self.path, params_given)  # what :func:`acquire` matches

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

    @functools.cached_property
    def max_token_chars(self) -> int:
        """The most characters one token spells: a text of n characters is at least n / this many
        tokens (a bound that needs no tokenizing). Kept per model file for the process, so a process
        that loads the same file again (a reload; the tests' many servers) reads the vocabulary once.

        Every token's UTF-8 length comes from one ctypes call into a reused buffer; only the tokens
        that could beat the best so far are decoded (a character is at least one byte), longest
        first. 0.55 s for Gemma's 262,144 tokens on a 2-core Zen 4, against 1.2 s decoding them all.
        """
        known = _MAX_TOKEN_CHARS.get(self.fingerprint)
        if known is not None:
            return known
        buf = ctypes.create_string_buffer(256)
        to_piece, vocab = C.llama_token_to_piece, self.vocab
        n_bytes = np.fromiter(
            (to_piece(vocab, t, buf, len(buf), 0, False) for t in range(self.n_vocab)), np.int64, self.n_vocab
        )
        n_bytes = np.abs(n_bytes)  # negative: the piece needs that many bytes (longer than the buffer)
        best = 0
        for t in np.argsort(-n_bytes, kind="stable"):
            if n_bytes[t] <= best:
                break
            best = max(best, len(self.piece(int(t)).decode("utf-8", errors="replace")))
        _MAX_TOKEN_CHARS[self.fingerprint] = best
        return best

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

    def close(self) -> None:
        if self.ptr:
            C.llama_model_free(self.ptr)
            self.ptr = None
