"""A random-weight ``qwen35`` GGUF with its MTP block at a real model's shape, quantized like Q4_K_M.

For speed and memory on a GPU, not for answers: the kernels, buffers and graph are those of the real
model (testkit/qwen35_shapes.py ``QWEN35_27B``), the values are random. Nothing is quantized: each
block of a k-quant is random bytes with its scale fields set so that the weights are finite, centred
and about 0.02 in size. The blocks repeat a 16 MiB random pattern whose quants each pass over it shifts
by another constant (no two rows of the 248,320-row output layer alike, so the logits have no exact
ties), which writes the 16.8 GB file at about file speed.

Types per tensor follow llama.cpp's Q4_K_M rules (src/llama-quant.cpp ``llama_tensor_get_type_impl``)
for the names this file has: ``output`` q6_K, ``token_embd`` q4_K, Gated DeltaNet ``attn_qkv`` q5_K,
``attn_v`` and ``ffn_down`` q6_K on the ``use_more_bits`` layers (the first and last eighth and every
third between) and q4_K elsewhere, every other matrix q4_K; norms, ``ssm_conv1d``, ``ssm_a`` and the dt
bias stay f32 (1-D or excluded by name). Random weights accept no drafts: the decode and verify costs
are the model's, acceptance is not.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from testkit.qwen35_shapes import Shape, Tensor, tensors, write_metadata

QK_K = 256
PATTERN_BYTES = 16 << 20


@dataclass(frozen=True, slots=True)
class KQuant:
    """A k-quant's block: bytes, where its f16 scales sit, and how to make random blocks sane."""

    name: str
    block_bytes: int
    d: float  # value of the f16 super-block scale
    d_offset: int
    quants: tuple[int, int]  # the byte range of the quants (any byte value is a valid one)
    dmin_offset: int | None = None
    dmin: float = 0.0  # the min's scale: d x the mean quant, so the weights are centred
    scales: tuple[int, int, int] | None = None  # (offset, count, bound): int8 sub-block scales


# Weights w = d * sc * q - dmin * m (q4_K, q5_K: 6-bit sc, m) or d * sc * (q - 32) (q6_K: int8 sc).
Q4_K = KQuant("q4_K", 144, d=2.0**-14, d_offset=0, quants=(16, 144), dmin_offset=2, dmin=7.5 * 2.0**-14)
Q5_K = KQuant("q5_K", 176, d=2.0**-15, d_offset=0, quants=(16, 176), dmin_offset=2, dmin=15.5 * 2.0**-15)
Q6_K = KQuant("q6_K", 210, d=1e-4, d_offset=208, quants=(0, 192), scales=(192, 16, 16))
TYPES = {"q4_K": Q4_K, "q5_K": Q5_K, "q6_K": Q6_K}


def use_more_bits(i: int, n: int) -> bool:
    """llama-quant.cpp: the layers Q4_K_M gives q6_K for attn_v and ffn_down."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def q4_k_m_types(shape: Shape) -> dict[str, str]:
    """Tensor name -> ggml type name, as Q4_K_M assigns them (module docstring)."""
    out: dict[str, str] = {}
    specs = tensors(shape)
    counters = {"attn_v": [t.name for t in specs if t.role == "attn_v"]}
    counters["ffn_down"] = [t.name for t in specs if t.role == "ffn_down"]
    for t in specs:
        if t.role == "f32" or len(t.ne) < 2:
            out[t.name] = "f32"
        elif t.role == "output":
            out[t.name] = "q6_K"
        elif t.role == "attn_qkv":
            out[t.name] = "q5_K"
        elif t.role in counters:
            names = counters[t.role]
            out[t.name] = "q6_K" if use_more_bits(names.index(t.name), len(names)) else "q4_K"
        else:
            out[t.name] = "q4_K"
        if out[t.name] != "f32" and t.ne[0] % QK_K:
            out[t.name] = "f32"  # rows too short for a k-quant (the tiny shape)
    return out


def _pattern(q: KQuant, rng: np.random.Generator) -> np.ndarray:
    """PATTERN_BYTES of random blocks of ``q`` with its scale fields set (uint8 [n_blocks, block_bytes])."""
    blocks = rng.integers(0, 256, size=(PATTERN_BYTES // q.block_bytes, q.block_bytes), dtype=np.uint8)
    blocks[:, q.d_offset : q.d_offset + 2] = np.array([q.d], dtype=np.float16).view(np.uint8)
    if q.dmin_offset is not None:
        blocks[:, q.dmin_offset : q.dmin_offset + 2] = np.array([q.dmin], dtype=np.float16).view(np.uint8)
    if q.scales is not None:
        off, count, bound = q.scales
        sc = rng.integers(-bound, bound + 1, size=(len(blocks), count), dtype=np.int8)
        blocks[:, off : off + count] = sc.view(np.uint8)
    return blocks


def file_bytes(shape: Shape) -> int:
    """Bytes of tensor data the file will hold."""
    types = q4_k_m_types(shape)
    total = 0
    for t in tensors(shape):
        n = int(np.prod(t.ne))
        total += 4 * n if types[t.name] == "f32" else n // QK_K * TYPES[types[t.name]].block_bytes
    return total


def _f32(t: Tensor, rng: np.random.Generator) -> np.ndarray:
    shape = tuple(reversed(t.ne))
    if t.init == "ones":
        return np.ones(shape, np.float32)
    if t.init == "zeros":
        return np.zeros(shape, np.float32)
    if t.init == "ssm_a":
        return -rng.uniform(0.1, 0.9, shape).astype(np.float32)
    scale = t.scale or 0.02
    return (rng.standard_normal(shape, dtype=np.float32) * scale).astype(np.float32)


def write_random_qwen35(path: Path, shape: Shape, seed: int = 0) -> Path:
    """Write ``shape`` with random Q4_K_M-typed weights to ``path`` (streamed: one tensor in memory)."""
    import gguf

    rng = np.random.default_rng(seed)
    types = q4_k_m_types(shape)
    patterns = {name: _pattern(q, rng) for name, q in TYPES.items()}
    w = gguf.GGUFWriter(str(path), "qwen35")
    write_metadata(w, shape)
    specs = tensors(shape)
    for t in specs:
        kind = types[t.name]
        if kind == "f32":
            w.add_tensor_info(t.name, tuple(reversed(t.ne)), np.dtype(np.float32), 4 * int(np.prod(t.ne)))
            continue
        q = TYPES[kind]
        row = t.ne[0] // QK_K * q.block_bytes
        byte_shape = (*reversed(t.ne[1:]), row)
        raw = gguf.GGMLQuantizationType[kind.upper()]
        w.add_tensor_info(t.name, byte_shape, np.dtype(np.uint8), row * int(np.prod(t.ne[1:])), raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    [out] = w.fout  # tensor data streamed as gguf's write_tensor_data lays it out, without a copy per tensor
    for t in specs:
        out.write(b"\0" * (-out.tell() % w.data_alignment))
        kind = types[t.name]
        if kind == "f32":
            _f32(t, rng).tofile(out)
            continue
        q, pattern = TYPES[kind], patterns[kind]
        left = t.ne[0] // QK_K * q.block_bytes * int(np.prod(t.ne[1:]))
        lo, hi = q.quants
        shift = int(rng.integers(1, 256))
        while left:  # each pass over the pattern adds another constant to its quants: no two rows alike
            chunk = pattern.copy()
            chunk[:, lo:hi] += np.uint8(shift)
            n = min(left, chunk.nbytes)
            out.write(memoryview(chunk.reshape(-1))[:n])
            left, shift = left - n, (shift + 97) % 256 or 1
    w.close()
    return path
