"""The llama.cpp wrappers, in one import: ``from runtime.llama import Model, Context, ContextConfig``.

runtime/backend.py (set-up, errors), runtime/model.py (``Model``), runtime/context.py (``Context``)
hold the code, split by the llama.cpp object each wraps.
"""

from runtime.backend import LLAMA_CPP_PYTHON_VERSION, DecodeError, LlamaError, init_backend
from runtime.config import ContextConfig
from runtime.context import Context
from runtime.model import Model, model_fingerprint

__all__ = [
    "LLAMA_CPP_PYTHON_VERSION",
    "Context",
    "ContextConfig",
    "DecodeError",
    "LlamaError",
    "Model",
    "init_backend",
    "model_fingerprint",
]
