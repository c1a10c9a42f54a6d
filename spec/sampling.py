"""Token choice from one logits row: greedy at temperature 0, else temperature / top-k / top-p sampling.

Each sampled token consumes exactly one uniform draw from the request's seeded generator, in the order
tokens are emitted. Verification samples row by row and stops at the first disagreement, so a
speculative run consumes the same draws as a plain run: with the same seed and the same logits it
emits the same tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Temperatures below this are greedy. Logits are float32, so two distinct logits differ by at least
# 2**-149 (the smallest float32 subnormal), and float64 ``exp`` underflows to exactly 0 below -745.2:
# at T < 2**-149 / 746 every candidate but the argmax gets probability 0, so sampling *is* greedy
# (ties aside, where greedy takes the lowest id). Below ~1e-307 the old ``logits / T`` also overflowed
# to inf and gave NaN probabilities (issue 27); above this bound ``(l - max) / T`` stays finite.
GREEDY_BELOW = 2.0**-149 / 746


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """temperature 0 (or below :data:`GREEDY_BELOW`) = greedy; top_k 0 = off; top_p 1.0 = off;
    seed None = random."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if not self.temperature >= 0:  # also refuses NaN
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW


class Sampler:
    """Chooses the next token from a logits row, shape [n_vocab] float32."""

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self.rng = np.random.default_rng(params.seed)

    def choose(self, row: np.ndarray) -> int:
        if self.params.greedy:
            return int(np.argmax(row))
        ids, probs = self.distribution(row)
        u = self.rng.random()
        # Inverse CDF; the clip guards against cumsum rounding leaving u past the last bin.
        i = int(np.searchsorted(np.cumsum(probs), u * probs.sum(), side="right"))
        return int(ids[min(i, len(ids) - 1)])

    def distribution(self, row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Candidate ids and their probabilities after temperature, top-k and top-p (in that order,
        as llama.cpp's default chain applies them).

        No full-vocabulary sort: top-k uses ``argpartition``, and top-p sorts only the smallest head
        of the distribution that holds mass >= p (found by doubling), which is exact.
        """
        p = self.params
        logits = row.astype(np.float64)
        if 0 < p.top_k < len(logits):
            ids = np.argpartition(-logits, p.top_k - 1)[: p.top_k]  # the order does not depend on T > 0
        else:
            ids = np.arange(len(logits))
        vals = logits[ids]
        probs = np.exp((vals - vals.max()) / p.temperature)  # <= 0 before the division: no overflow
        probs /= probs.sum()
        if p.top_p >= 1.0:
            return ids, probs
        m = min(64, len(probs))
        while True:
            head = np.argpartition(-probs, m - 1)[:m] if m < len(probs) else np.arange(len(probs))
            head = head[np.argsort(-probs[head], kind="stable")]
            cum = np.cumsum(probs[head])
            if cum[-1] >= p.top_p or m == len(probs):
                keep = min(int(np.searchsorted(cum, p.top_p)) + 1, m)
                kept = probs[head[:keep]]
                return ids[head[:keep]], kept / kept.sum()
            m = min(2 * m, len(probs))
