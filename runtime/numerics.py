"""Row-count-invariant CPU matmuls, for DOCQA_BATCH_INVARIANT (issue 17).

ggml-cpu, as vendored in llama-cpp-python 0.3.36, multiplies K-quant and IQ weights (Q2_K..Q6_K,
IQ1..IQ4; the bulk of a Q4_K_M file) by a tiled kernel once the activations have 8 rows or more
(``ggml/src/ggml-cpu/tiled/tiled.cpp``: ``ggml_tiled_min_batch`` is ``rows >= 8``) and by the
per-row ``vec_dot`` kernels below that. The two sum in different orders, so a row's logits depend on
whether its decode call has 1-7 rows or 8 and more: up to ~1.6 logits on Gemma 3 270M Q4_K_M, enough
to change a greedy answer (tests/spec/test_invariance.py). The environment variable
``GGML_CPU_TILED_MM=0`` turns the tiled kernel off (``ggml_tiled_matmul_enabled``); ggml reads it once
per process, at the first K-quant matmul, so it must be set before the first decode.

Measured on a 2-core Zen 4 with the embedded model (bench/results/invariance.md): with a q8_0 KV cache,
flash attention and no CPU repack, turning the tiled kernel off makes a row's logits bit-identical in
calls of 1, 8 and 17 rows; one-row decoding costs nothing (it never used the tiled kernel), a 17-row
verify call ~2 % and prefill ~10 %.
"""

from __future__ import annotations

import os

import numpy as np

from runtime.context import Context

TILED_ENV = "GGML_CPU_TILED_MM"
#: Row counts whose first row the probe compares with a one-row call: the tiled kernel's threshold
#: (8) and the widest verify call (spec/limits.py MAX_ROWS).
PROBE_ROWS = (8, 17)


def use_row_invariant_kernels() -> None:
    """Ask ggml-cpu for the per-row kernels at every row count. Takes effect only if no K-quant matmul
    has run in this process yet; :func:`rows_agree` tells whether it did."""
    os.environ[TILED_ENV] = "0"


def rows_agree(ctx: Context, token: int, seq_id: int = 0) -> bool:
    """Whether a row's logits are bit-identical when decoded alone and as the first row of calls of
    :data:`PROBE_ROWS` rows (``token`` repeated, from position 0 of the empty ``seq_id``, removed
    afterwards). Row 0 attends only to itself in every call, so any difference is the kernels'.
    About 0.1 s on a 2-core CPU with the embedded model."""
    n_batch = ctx.n_batch
    try:
        ctx.decode([token], 0, seq_id=seq_id, outputs="all")
        one = ctx.logits()[0].copy()
        ctx.seq_rm(seq_id, 0)
        for rows in PROBE_ROWS:
            if rows > n_batch:
                continue
            ctx.decode([token] * rows, 0, seq_id=seq_id, outputs="all")
            first = ctx.logits()[0]
            ctx.seq_rm(seq_id, 0)
            if not np.array_equal(first, one):
                return False
        return True
    finally:
        ctx.seq_rm(seq_id, 0)
