"""Row-count-invariant CPU matmuls, for DOCQA_BATCH_INVARIANT (issue 17).

ggml-cpu, as vendored in llama-cpp-python 0.3.36, multiplies K-quant and IQ weights (Q2_K..Q6_K,
IQ1..IQ4; the bulk of a Q4_K_M file) by a tiled kernel once the activations have 8 rows or more
(``ggml/src/ggml-cpu/tiled/tiled.cpp``: ``ggml_tiled_min_batch`` is ``rows >= 8``) and by the
per-row ``vec_dot`` kernels below that. The two sum in different orders, so a row's logits depend on
whether its decode call has 1-7 rows or 8 and more: up to ~1.6 logits on Gemma 3 270M Q4_K_M, enough
to change a greedy answer (tests/spec/test_invariance.py). The environment variable
``GGML_CPU_TILED_MM=0`` turns the tiled kernel off (``ggml_tiled_matmul_enabled``); ggml reads it once
per process, at the first matmul, so it must be set before the first decode.

Measured on a 2-core Zen 4 with the embedded model (bench/results/invariance.md): with a q8_0 KV cache,
flash attention and no CPU repack, turning the tiled kernel off makes a row's logits bit-identical in
calls of 1, 8 and 17 rows; one-row decoding costs nothing (it never used the tiled kernel), a 17-row
verify call ~5 % and prefill ~10 % (on top of what the q8_0 KV cache costs).
"""

from __future__ import annotations

import os

import numpy as np

from runtime.context import Context

TILED_ENV = "GGML_CPU_TILED_MM"
#: Row counts whose first row the probe compares with a one-row call: the tiled kernel's threshold
#: (8) and the widest verify call (spec/limits.py MAX_ROWS).
PROBE_ROWS = (8, 17)
#: Text for the probe: any plain prose that tokenizes to at least 17 tokens.
PROBE_TEXT = (
    "The committee met on a cold morning in March to read the contract again, clause by clause, "
    "and to decide which of its terms still held after the merger."
)


def use_row_invariant_kernels() -> str | None:
    """Ask ggml-cpu for the per-row kernels at every row count; returns the variable's previous value
    for :func:`restore_kernels_env`. Takes effect only if no matmul has run in this process yet (ggml
    latches the switch at the first one); :func:`rows_agree` tells whether it did."""
    previous = os.environ.get(TILED_ENV)
    os.environ[TILED_ENV] = "0"
    return previous


def restore_kernels_env(previous: str | None) -> None:
    """Put the variable back once this process has latched it (after a decode), so processes started
    later (the self-test child, extraction workers) inherit the environment they were given."""
    if previous is None:
        os.environ.pop(TILED_ENV, None)
    else:
        os.environ[TILED_ENV] = previous


def rows_agree(ctx: Context, tokens: np.ndarray, seq_id: int = 0) -> bool:
    """Whether ``tokens`` (real text, at least ``max(PROBE_ROWS)`` of them) get bit-identical logits
    decoded one row per call and :data:`PROBE_ROWS` rows per call, from position 0 of the empty
    ``seq_id`` (removed afterwards). Real text: a repeated token at position 0 did not show the
    kernels' difference. About 0.5 s on a 2-core CPU with the embedded model."""
    n = min(max(PROBE_ROWS), len(tokens), ctx.n_batch)
    tokens = np.asarray(tokens[:n], dtype=np.int32)

    def logits(per_call: int) -> np.ndarray:
        out = []
        for i in range(0, n, per_call):
            ids = tokens[i : i + per_call]
            ctx.decode(ids, i, seq_id=seq_id, outputs="all")
            out.append(ctx.logits()[: len(ids)].copy())
        ctx.seq_rm(seq_id, 0)
        return np.concatenate(out)

    try:
        one = logits(1)
        return all(np.array_equal(logits(rows), one) for rows in PROBE_ROWS if rows <= n)
    finally:
        ctx.seq_rm(seq_id, 0)
