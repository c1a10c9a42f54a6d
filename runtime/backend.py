"""llama.cpp process-wide set-up and the errors its wrappers raise.

Why not the high-level ``Llama`` class: with a draft model it raises on any prompt longer than
``n_batch`` unless ``logits_all`` is set, which allocates n_ctx x n_vocab float32 (138 GB at 139k
tokens of a 248k vocabulary), and it ignores a failed ``seq_rm`` (a hybrid model then keeps the
advanced recurrent state).
runtime/model.py and runtime/context.py wrap the low-level ctypes API (``llama_cpp.llama_cpp``)
instead.
"""

from __future__ import annotations

import ctypes
import logging
import threading

import llama_cpp
from llama_cpp import llama_cpp as C

log = logging.getLogger("docqa.llama")

LLAMA_CPP_PYTHON_VERSION: str = llama_cpp.__version__


class LlamaError(Exception):
    """A llama.cpp call failed (model load, context creation, decode, state I/O)."""


class DecodeError(LlamaError):
    """``llama_decode`` returned non-zero: 1 = no KV slot, 2 = aborted, <0 = invalid batch/fatal."""

    def __init__(self, rc: int, n_tokens: int) -> None:
        self.rc = rc
        hint = "the context is full" if rc == 1 else "see the server log"
        super().__init__(f"llama_decode failed with code {rc} on {n_tokens} tokens ({hint})")


_backend_lock = threading.Lock()
_backend_ready = False
_log_callback = None  # kept alive for as long as llama.cpp may call it


def init_backend() -> None:
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
