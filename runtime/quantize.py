"""Rewrite a GGUF's weights in another type through llama.cpp's own quantizer (``llama_model_quantize``,
what llama.cpp's ``llama-quantize`` tool runs), e.g. an F16 copy of a Q4_K_M model for tests whose rows
must agree, or a Q4_0 copy for the reading-speed bench (bench/requant.py).

Requantizing an already quantized file (``allow_requantize``) loses more than quantizing from the
original weights would: the copy is for measurement, not for serving unless its accuracy was measured.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

from llama_cpp import llama_cpp as C

from runtime.atomic import replacing
from runtime.llama import init_backend

#: Names a caller may give for the target type, with llama.cpp's ftype (llama.h ``llama_ftype``).
FTYPES = {
    "f32": C.LLAMA_FTYPE_ALL_F32,
    "f16": C.LLAMA_FTYPE_MOSTLY_F16,
    "q8_0": C.LLAMA_FTYPE_MOSTLY_Q8_0,
    "q4_0": C.LLAMA_FTYPE_MOSTLY_Q4_0,
    "q4_k_s": C.LLAMA_FTYPE_MOSTLY_Q4_K_S,
    "q4_k_m": C.LLAMA_FTYPE_MOSTLY_Q4_K_M,
}


def requantize(src: Path, dst: Path, ftype: str, threads: int = 2, pure: bool = False) -> Path:
    """Write ``src`` with its weights in ``ftype`` (a key of :data:`FTYPES`) to ``dst``, unless ``dst``
    exists. ``pure``: every tensor in that type (llama-quantize ``--pure``), not the mix the type
    names (Q4_K_M keeps some tensors in Q6_K). Written to a temporary name and renamed, so a
    half-written copy is never found. Raises ValueError for an unknown type, RuntimeError when
    llama.cpp fails (its log says why)."""
    if ftype not in FTYPES:
        raise ValueError(f"unknown type {ftype!r}; one of {', '.join(FTYPES)}")
    if dst.exists():
        return dst
    init_backend()  # route llama.cpp's quantize log to Python logging
    params = C.llama_model_quantize_default_params()
    params.ftype = FTYPES[ftype]
    params.allow_requantize = True
    params.pure = pure
    params.nthread = threads
    with replacing(dst) as tmp:
        rc = C.llama_model_quantize(str(src).encode(), str(tmp).encode(), ctypes.byref(params))
        if rc != 0:
            raise RuntimeError(f"llama_model_quantize({src.name} -> {ftype}) failed with {rc}")
    return dst
