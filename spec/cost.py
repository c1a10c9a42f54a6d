"""What a verify step costs, and the draft plan that maximises expected tokens per unit of time.

Costs are measured on the running hardware at start-up (:func:`calibrate`): the time of one target
decode with 1..17 rows, and of one MTP draft step. On a CPU 17 rows cost ~8x one row; on a GPU
nearly the same as one row, so the best window differs by two orders of magnitude in cost.

Acceptance model (as in Leviathan et al. 2023, §3.5): each draft token is accepted with probability
``a`` independently of the previous ones, so a draft of ``k`` tokens yields
``E[accepted] = a + a^2 + ... + a^k`` and a step emits ``1 + E[accepted]`` tokens. ``a`` is
estimated per source from recent steps (successes over successes + failures, exponentially decayed).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np

from runtime.llama import Context
from spec.limits import MAX_ROWS, MAX_WINDOW


@dataclass(frozen=True, slots=True)
class StepCosts:
    """verify[k]: seconds of a verify call with k draft tokens (k + 1 rows), k = 0..16;
    mtp: seconds of one MTP draft step (0 without MTP)."""

    verify: tuple[float, ...]
    mtp: float = 0.0

    def rows(self, n: int) -> float:
        """Seconds of one decode call with ``n`` rows in all (any sequences): measured up to 17 rows,
        extrapolated linearly beyond from the 9- and 17-row costs (compute grows with rows once a
        call is past its fixed overhead)."""
        if n <= len(self.verify):
            return self.verify[max(n, 1) - 1]
        top, mid = self.verify[-1], self.verify[8]
        return top + (top - mid) / (len(self.verify) - 9) * (n - len(self.verify))

    def share(self, k: int, load: int) -> float:
        """One sequence's share of a batched step in which each of ``load`` sequences verifies ``k``
        drafts: ``rows(load * (k + 1)) / load``. Equals ``verify[k]`` for one sequence; as the load
        grows the fixed overhead is spread thinner and each draft row costs relatively more, so
        the best window shrinks unless acceptance is high."""
        load = max(load, 1)
        return self.rows(load * (k + 1)) / load

    @classmethod
    def cpu_default(cls) -> StepCosts:
        """Relative costs measured on a 2-core CPU with Gemma 3 270M (bench/results/spec_costs.json),
        used until a context is calibrated."""
        ratios = {0: 1.0, 1: 1.76, 2: 2.19, 4: 3.65, 8: 5.08, MAX_WINDOW: 7.8}
        return cls(tuple(float(np.interp(k, list(ratios), list(ratios.values()))) for k in range(MAX_ROWS)), 0.5)


CALIBRATED_WINDOWS = (0, 1, 2, 4, 8, MAX_WINDOW)


def calibrate(ctx: Context, token: int, mtp_step=None, repeats: int = 1) -> StepCosts:
    """Time verify calls of 1, 2, 3, 5, 9 and 17 rows on sequence 0 from position 0 (removed
    afterwards; the sequence must be empty) and, if given, one MTP draft step (``mtp_step()``);
    other window sizes are interpolated. About 0.5 s on a 2-core CPU with the embedded model."""
    ctx.decode([token], 0, outputs="all")  # warm-up: first-call allocations
    ctx.seq_rm(0, 0)
    measured = []
    for k in CALIBRATED_WINDOWS:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            ctx.decode([token] * (k + 1), 0, outputs="all")
            ctx.logits().argmax(axis=1)
            times.append(time.perf_counter() - t0)
            ctx.seq_rm(0, 0)
        measured.append(statistics.median(times))
    measured = list(np.maximum.accumulate(measured))  # more rows never cost less; smooth timer noise
    verify = tuple(float(np.interp(k, CALIBRATED_WINDOWS, measured)) for k in range(MAX_ROWS))
    mtp = 0.0
    if mtp_step is not None:
        mtp_step()  # warm-up
        times = []
        for _ in range(max(repeats, 3)):
            t0 = time.perf_counter()
            mtp_step()
            times.append(time.perf_counter() - t0)
        mtp = statistics.median(times)
    return StepCosts(verify, mtp)


class AcceptanceRate:
    """Per-token acceptance probability of one source, from decayed success/failure counts."""

    def __init__(self, prior: float = 0.5, weight: float = 2.0, decay: float = 0.5) -> None:
        self.successes, self.failures = prior * weight, (1 - prior) * weight
        self.decay = decay

    def observe(self, drafted: int, accepted: int) -> None:
        if drafted == 0:
            return
        self.successes = self.successes * self.decay + accepted
        self.failures = self.failures * self.decay + (1 if accepted < drafted else 0)

    @property
    def value(self) -> float:
        return self.successes / (self.successes + self.failures)


def expected_accepted(rate: float, k: int) -> float:
    """a + a^2 + ... + a^k."""
    if k <= 0:
        return 0.0
    if rate >= 1.0:
        return float(k)
    return rate * (1 - rate**k) / (1 - rate)
