"""What a verify step costs, and the draft plan that maximises expected tokens per unit of time.

Costs are measured on the running hardware at start-up (:func:`calibrate`): the time of one target
decode with 1..17 rows, and of one draft step of each model source that can be timed alone (the MTP
head). On a CPU 17 rows cost ~8x one row; on a GPU
nearly the same as one row, so the best window differs by two orders of magnitude in cost.

Acceptance model (after Leviathan et al. 2023, §3.5, which takes one i.i.d. rate ``a``, so that a
``k``-token draft yields ``E[accepted] = a + a^2 + ... + a^k``): here the first draft token has its
own rate and later tokens share another (:class:`DraftAcceptance`), and a step emits
``1 + E[accepted]`` tokens. Rates are estimated per source from recent steps (successes over
successes + failures, exponentially decayed). Step costs start from the calibration and follow the
decode calls really made (:class:`CostModel`).
"""

from __future__ import annotations

import bisect
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from runtime.llama import Context
from spec.limits import MAX_ROWS, MAX_WINDOW


@dataclass(frozen=True, slots=True)
class StepCosts:
    """verify[k]: seconds of a verify call with k draft tokens (k + 1 rows), k = 0..16;
    draft_steps: seconds of one draft step of a model source, by name (those measured)."""

    verify: tuple[float, ...]
    draft_steps: Mapping[str, float] = field(default_factory=dict)

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
        used until a context is calibrated; an MTP step at half a one-row call."""
        ratios = {0: 1.0, 1: 1.76, 2: 2.19, 4: 3.65, 8: 5.08, MAX_WINDOW: 7.8}
        verify = tuple(float(np.interp(k, list(ratios), list(ratios.values()))) for k in range(MAX_ROWS))
        return cls(verify, {"mtp": 0.5})


CALIBRATED_WINDOWS = (0, 1, 2, 4, 8, MAX_WINDOW)


def calibrate(
    ctx: Context, token: int, draft_steps: Mapping[str, Callable[[], None]] | None = None, repeats: int = 1
) -> StepCosts:
    """Time verify calls of 1, 2, 3, 5, 9 and 17 rows on sequence 0 from position 0 (removed
    afterwards; the sequence must be empty) and one draft step of each model source in
    ``draft_steps`` (name -> a function that makes one); other window sizes are interpolated. About
    0.5 s on a 2-core CPU with the embedded model."""
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
    steps = {}
    for name, step in (draft_steps or {}).items():
        step()  # warm-up
        times = []
        for _ in range(max(repeats, 3)):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        steps[name] = statistics.median(times)
    return StepCosts(verify, steps)


class CostModel:
    """The step costs the adaptive window prices with: a seed (the start-up calibration, or
    :meth:`StepCosts.cpu_default`) corrected by the decode calls this context really makes (real steps
    attend over the document, carry the step's Python work and share the machine, which a calibration
    on an empty sequence does not see).

    The model is a level times a shape, ``rows(n) = seed(n) * level * shape(n)``, learnt from the wall
    time of every verify call (seconds, rows of all sequences in the call) as exponential averages
    (weight ``ALPHA``; a sample over 4x the average is clipped, so one preempted call does not price
    the next hundred). One-row calls move the ``level``: what changes with the document's length or
    the machine's load moves every price at once. A call of ``n > 1`` rows moves only ``shape(n)``
    (the first one sets it). ``shape(1)`` is 1; a row count not yet observed takes the shape
    interpolated between the observed ones around it (the nearest one's beyond them). The
    measurements behind this: bench/results/draft-policy.md. Engine thread only; O(log rows) per
    query.
    """

    ALPHA = 0.2

    def __init__(self, seed: StepCosts | None = None) -> None:
        """``seed``: the start-up calibration (default: :meth:`StepCosts.cpu_default`); the level is
        unknown until the first one-row call."""
        self.seed = seed or StepCosts.cpu_default()
        self.level: float | None = None  # None: no one-row call measured yet
        self._draft: dict[str, float] = {}  # model source -> seconds per drafted token per sequence
        self._shape: dict[int, float] = {1: 1.0}
        self._observed: list[int] = [1]  # the keys of _shape, sorted

    def draft_step(self, source: str) -> float:
        """Seconds one drafted token of model source ``source`` costs one sequence: learnt from its
        draft calls (:meth:`observe_draft`); before any, the calibration's step of that source, else
        one target row (a separate draft model is smaller than its target, so that is a price it
        beats; its first real calls correct it)."""
        if source in self._draft:
            return self._draft[source]
        return self.seed.draft_steps.get(source) or self.rows(1)

    def observe_draft(self, source: str, seconds: float, depth: int, n_seqs: int) -> None:
        """A draft call of ``source`` made ``depth`` tokens for each of ``n_seqs`` sequences in ``seconds``
        (its catch-up of the tokens emitted since it last drafted included)."""
        if depth <= 0 or n_seqs <= 0:
            return
        per = seconds / (depth * n_seqs)
        old = self._draft.get(source)
        self._draft[source] = per if old is None else old + self.ALPHA * (min(per, 4 * old) - old)

    def observe(self, rows: int, seconds: float) -> None:
        """One decode call of ``rows`` rows (all sequences) took ``seconds``, its accept work included."""
        if rows == 1:
            measured = seconds / self.seed.rows(1)
            if self.level is None:  # the first one-row call: the scale, keeping the prices measured so far
                for n in self._observed[1:]:
                    self._shape[n] *= self._level / measured
                self.level = measured
            else:
                self.level += self.ALPHA * (min(measured, 4 * self.level) - self.level)
            return
        measured = seconds / (self.seed.rows(rows) * self._level)
        old = self._shape.get(rows)
        if old is None:
            self._shape[rows] = min(measured, 4 * self.shape(rows))
            bisect.insort(self._observed, rows)
        else:
            self._shape[rows] = old + self.ALPHA * (min(measured, 4 * old) - old)

    @property
    def _level(self) -> float:
        return 1.0 if self.level is None else self.level

    def shape(self, n: int) -> float:
        """Measured / (seed * level) for ``n`` rows: observed, or interpolated between observed row counts."""
        n = max(n, 1)
        if n in self._shape:
            return self._shape[n]
        obs, i = self._observed, bisect.bisect_left(self._observed, n)
        lo, hi = obs[max(i - 1, 0)], obs[min(i, len(obs) - 1)]
        if lo == hi:
            return self._shape[lo]
        return self._shape[lo] + (self._shape[hi] - self._shape[lo]) * (n - lo) / (hi - lo)

    def rows(self, n: int) -> float:
        """Seconds of one decode call with ``n`` rows in all."""
        return self.seed.rows(max(n, 1)) * self._level * self.shape(n)

    def share(self, k: int, load: int) -> float:
        """One sequence's share of a step in which each of ``load`` sequences verifies ``k`` drafts
        (:meth:`StepCosts.share`, with the corrected costs)."""
        load = max(load, 1)
        return self.rows(load * (k + 1)) / load


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


class DraftAcceptance:
    """A source's acceptance by draft position: ``a[i]`` is the probability that draft token ``i`` is
    accepted given that the tokens before it were (positions past ``POSITIONS - 1`` share the last
    rate). ``E[accepted of k] = a[0] + a[0]a[1] + ... + a[0]...a[k-1]``.

    One rate for every position (Leviathan et al. 2023's i.i.d. model) is biased where acceptance
    depends on the position, and it does for lookup: the first token after a match is the easy one
    (bench/results/draft-policy.md). Each position's rate is fed by the steps that reached it:
    verify steps, and the free checks of undrafted candidates against the emitted text
    (spec/draft.py: the first token of every step's candidate, the later ones of one at a time).
    """

    POSITIONS = 2

    def __init__(self, prior: float, weight: float = 2.0, decay: float = 0.8, later: float | None = None) -> None:
        """``prior``: the first position's starting rate; ``later``: the later positions' (default ``prior``).
        ``decay`` 0.8: each rate rests on about 1 / (1 - decay) = 5 recent observations, since a draft
        pays on a CPU only at high acceptance (one more row costs ~0.9 of a plain step, so a 1-token
        draft needs ~0.9), which two observations cannot tell (bench/results/draft-policy.md)."""
        priors = [prior] + [prior if later is None else later] * (self.POSITIONS - 1)
        self.rates = [AcceptanceRate(p, weight, decay) for p in priors]

    def observe(self, drafted: int, accepted: int) -> None:
        """``accepted`` of ``drafted`` draft tokens were accepted (a failure at ``accepted`` unless all were)."""
        last = self.POSITIONS - 1
        for i in range(min(drafted, accepted + 1, last)):
            self.rates[i].observe(1, int(accepted > i))
        if drafted > last and accepted >= last:
            self.rates[last].observe(drafted - last, accepted - last)

    def follow(self, position: int, accepted: bool) -> None:
        """One token of a draft that was not made, checked as the text is emitted: the candidate's
        tokens before ``position`` matched, and the one at ``position`` did (``accepted``) or not.
        Called position by position, it leaves the rates where :meth:`observe` of the whole draft
        would, but each token counts as soon as it is seen: a run still going is a censored
        observation (successes so far, no failure), which the success / (success + failure)
        estimate takes without bias."""
        last = self.POSITIONS - 1
        rate = self.rates[min(position, last)]
        if position <= last:  # a new observation of this rate: decayed once, as in observe()
            rate.observe(1, int(accepted))
        elif accepted:  # a later position of the shared rate: the same observation goes on
            rate.successes += 1
        else:
            rate.failures += 1

    @property
    def value(self) -> float:
        """The first position's acceptance."""
        return self.rates[0].value

    def expected_upto(self, k: int) -> list[float]:
        """Expected accepted tokens of drafts of 1..``k`` tokens, in one O(k) pass."""
        out, total, reach = [], 0.0, 1.0
        for i in range(k):
            reach *= self.rates[min(i, self.POSITIONS - 1)].value
            total += reach
            out.append(total)
        return out
