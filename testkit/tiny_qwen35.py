"""A tiny random-weight ``qwen35`` GGUF with one MTP (nextn) layer, written with the ``gguf`` package.

Shape (testkit/qwen35_shapes.py ``TINY``) follows llama.cpp's ``conversion/qwen.py`` (Qwen3.5's text
model with its MTP mixin): n_embd 128, 4 trunk layers (0-2 Gated DeltaNet, 3 full attention), the MTP
block as ``blk.4``, f32 weights.

The weights are random but structured so that speculation is exercised both ways: small trunk and
block weights keep each position's hidden state close to its token's embedding, so the next-token
logits act like a random bigram map with a context-dependent perturbation, and ``eh_proj`` close to
``[I | 0]`` makes the MTP head predict roughly that bigram map. Its drafts are then sometimes
accepted and sometimes rejected. The Gated DeltaNet decay is kept small so the recurrent state
carries memory across tokens (a wrongly restored state changes the output).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from testkit.qwen35_shapes import TINY, Shape, Tensor, tensors, write_metadata

EH_NOISE = 0.01  # MTP eh_proj = [I | 0] + noise: drafts track the bigram map, imperfectly


def _value(t: Tensor, rng: np.random.Generator, n_embd: int) -> np.ndarray:
    shape = tuple(reversed(t.ne))  # ggml lists ne0 first; numpy the slowest axis first
    if t.init == "normal":
        return rng.standard_normal(shape) * t.scale
    if t.init == "ones":
        return np.ones(shape)
    if t.init == "zeros":
        return np.zeros(shape)
    if t.init == "ssm_a":
        return -rng.uniform(0.1, 0.9, shape)  # |A| <= 1: long memory
    if t.init == "eh_proj":  # numpy (out, in): h' = eh @ [enorm(e); hnorm(h)]
        eh = np.zeros(shape)
        eh[:, :n_embd] = np.eye(n_embd)
        return eh + rng.standard_normal(shape) * EH_NOISE
    raise ValueError(f"unknown init {t.init!r} of {t.name}")


def write_tiny_qwen35(path: Path, seed: int = 0, with_mtp: bool = True, shape: Shape = TINY) -> Path:
    """Write the model to ``path`` (deterministic for a given seed). ``with_mtp=False`` omits blk.4."""
    import gguf

    shape = replace(shape, mtp=with_mtp)
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "qwen35")
    write_metadata(w, shape)
    for t in tensors(shape):
        value = _value(t, rng, shape.n_embd)
        w.add_tensor(t.name, np.ascontiguousarray(value, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
