"""The draft policy against recorded answers: how fast each window choice would have been, offline.

With batch-invariant numerics (DOCQA_BATCH_INVARIANT) an answer's tokens do not depend on the draft
window, so one recorded greedy (or seeded sampled) answer fixes what every policy would have emitted:
a sampled row consumes one uniform draw per emitted token, so a draft is accepted exactly when it
matches the recorded token. At each step the lookup drafter proposes a draft from the document and
the answer so far; the accepted drafts are its common prefix with the recorded answer; the step
costs what a verify call of that many rows cost on the machine that recorded it, measured at the
answer's own position. The adaptive policy, like the server's, starts from the start-up calibration
(``calibrated``, taken on an empty sequence) and learns the real costs from the steps it makes
(spec/cost.py ``CostModel``). So tokens per second of any policy, adaptive or fixed, can be computed
without the model, and compared in a table test (tests/spec/test_policy.py). ``simulate`` replays one;
bench/policy_sim.py (needs the model) records them.

A trace is JSON: the document prefix and question suffix token ids, the answer's token ids, the
measured step costs and the start-up calibration, and the token pieces and unspaced spellings the
lookup drafter's resynchronisation reads.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spec.cost import CostModel, StepCosts
from spec.draft import DraftConfig, DraftPolicy
from spec.lookup import LookupDrafter, NgramIndex

TRACES = Path(__file__).resolve().parent.parent / "tests/spec/traces"


def _costs(raw: dict) -> StepCosts:
    """A trace's step costs (its "mtp": one MTP draft step, 0 when it was not measured)."""
    return StepCosts(tuple(raw["verify"]), {"mtp": raw["mtp"]} if raw.get("mtp") else {})


@dataclass(frozen=True)
class Trace:
    name: str
    prefix: list[int]
    suffix: list[int]
    answer: list[int]  # the emitted tokens, the first one chosen from the question's prefill
    costs: StepCosts  # verify calls of 1..17 rows at the answer's position: what steps really cost
    calibrated: StepCosts  # the start-up calibration the server would have begun with
    pieces: dict[int, bytes]
    unspaced: dict[int, list[int]]

    @classmethod
    def load(cls, path: Path) -> Trace:
        raw = json.loads(path.read_text())
        return cls(
            name=raw["name"],
            prefix=raw["prefix"],
            suffix=raw["suffix"],
            answer=raw["answer"],
            costs=_costs(raw["costs"]),
            calibrated=_costs(raw["calibrated"]),
            pieces={int(k): bytes.fromhex(v) for k, v in raw["pieces"].items()},
            unspaced={int(k): v for k, v in raw["unspaced"].items()},
        )


@dataclass(frozen=True)
class Outcome:
    tokens_per_s: float  # answer tokens over the summed verify costs
    steps: int
    drafted: int
    accepted: int


def simulate(
    trace: Trace,
    window: int | None,
    load: int = 1,
    policy: Callable[..., DraftPolicy] = DraftPolicy,
    seed: StepCosts | None = None,
    costs: CostModel | None = None,
) -> Outcome:
    """Replay ``trace`` with draft window ``window`` (None: the adaptive policy) at ``load``
    sequences per decode call; lookup drafts only (the embedded model has no MTP head). The policy's
    cost model starts from ``seed`` (default: the trace's start-up calibration) and is told each
    step's true cost, as server/engine/runner.py tells it. ``costs``: a cost model to go on with instead
    (one server answering about several documents keeps one)."""
    lookup = LookupDrafter(
        NgramIndex(np.asarray(trace.prefix, dtype=np.int32), 2, 4),
        lambda t: trace.pieces.get(t, b""),
        lambda t: list(trace.unspaced.get(t, [t])),
    )
    lookup.extend(trace.suffix)
    costs = costs or CostModel(seed or trace.calibrated)
    drafts = policy(DraftConfig(window, ("lookup",)), {"lookup": lookup}, costs)
    answer, decided = trace.answer, [trace.answer[0]]
    i, seconds, steps, drafted, accepted = 0, 0.0, 0, 0, 0
    while i < len(answer) - 1:
        lookup.extend(decided)
        max_draft = min(len(answer) - 2 - i, 16)
        draft = drafts.propose(answer[i], len(trace.prefix) + len(trace.suffix) + i, max_draft, load)
        m = 0
        while m < len(draft.tokens) and i + 1 + m < len(answer) and draft.tokens[m] == answer[i + 1 + m]:
            m += 1
        seconds += trace.costs.share(len(draft.tokens), load)
        rows = load * (len(draft.tokens) + 1)
        costs.observe(rows, trace.costs.rows(rows))
        target = answer[i + 1 + m]
        drafts.observe(draft, m, target)
        decided = answer[i + 1 : i + 2 + m]
        i += m + 1
        steps, drafted, accepted = steps + 1, drafted + len(draft.tokens), accepted + m
    return Outcome(len(answer) / seconds, steps, drafted, accepted)
