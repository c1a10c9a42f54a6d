"""Step costs of this machine for the adaptive draft window (spec.cost), measured at start-up and
kept while they still hold.

The measured costs are kept in ``data_dir/calibration.json`` (or DOCQA_CALIBRATION_FILE, which
several data directories on one machine may share), keyed by model fingerprint, threads, KV
types, flash attention and the model drafters timed (the MTP head), with the time they were
measured and the machine's load then. They seed spec/cost.py's ``CostModel``, which corrects them
from the real verify calls of each run. A
calibration taken on a busy machine is not kept as the truth (issue 29: one measured 16-token drafts
at 67x a one-row call and was reused at every later restart):

* it is measured again, up to :data:`ATTEMPTS` times, when it is implausible: a call of ``n`` rows
  never costs more than ``n`` one-row calls do (they would do the same work), so a ratio above
  ``n x SLACK`` is a measurement disturbed by other work;
* it is stored only when it is plausible and the 1-minute load average was below the number of
  cores while it was measured;
* a stored one is used only while younger than :data:`MAX_AGE_S` and while a quick check at start
  (a few one-row calls, ~30 ms) agrees with its one-row cost within a factor of :data:`AGREE`.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from pathlib import Path

from runtime.atomic import write_atomic
from runtime.llama import Context, Model
from runtime.system import busy
from server.engine.contexts import Contexts
from spec.cost import StepCosts, calibrate

log = logging.getLogger("docqa.engine")
ATTEMPTS = 3  # measurements at most, while implausible
SLACK = 1.5  # rows(n) may exceed n x rows(1) by this factor before it is called implausible
MAX_AGE_S = 7 * 24 * 3600.0  # a stored calibration older than this is measured again
AGREE = 2.0  # the start-up check's one-row cost must be within this factor of the stored one


def step_costs(contexts: Contexts, model: Model, path: Path, seq_id: int = 0) -> StepCosts:
    """Verify costs for 0..16 drafts (and one draft step of each companion that can be timed alone:
    the MTP head), from the calibration file ``path`` when they still hold, else measured on
    ``seq_id``, which must be empty and is left empty, and stored there when plausible. About 0.5-2 s
    to measure on a 2-core CPU (up to :data:`ATTEMPTS` times)."""
    ctx, token = contexts.target, max(model.bos, 0)
    steps = contexts.companions.calibration_steps(seq_id)
    cfg = ctx.config
    timed = "+".join(sorted(steps)) or "-"
    key = "/".join(map(str, (model.fingerprint, cfg.n_threads, cfg.type_k, cfg.type_v, cfg.flash_attn, timed)))
    stored = _stored(path, key)
    if stored is not None and still_holds(*stored, one_row_now(ctx, token, seq_id), time.time()):
        costs = stored[0]
    else:
        costs, why = _measure(ctx, token, steps)
        if why is None:
            _store(path, key, costs)
        else:
            log.warning("verify costs measured under load (%s): used for this run only, not stored", why)
    log.info(
        "verify cost per step: %s ms (windows 0/1/4/16)%s",
        "/".join(f"{costs.verify[k] * 1000:.1f}" for k in (0, 1, 4, 16)),
        "".join(f", {name} step {s * 1000:.2f} ms" for name, s in costs.draft_steps.items()),
    )
    return costs


def implausible(costs: StepCosts) -> str | None:
    """Why ``costs`` cannot be this machine's undisturbed costs, or None: a call of ``n`` rows
    measured at more than ``n x SLACK`` one-row calls."""
    one = costs.verify[0]
    worst = max(range(len(costs.verify)), key=lambda k: costs.verify[k] / (k + 1))
    if costs.verify[worst] > (worst + 1) * one * SLACK:
        return f"a {worst + 1}-row call measured {costs.verify[worst] / one:.0f}x a one-row call"
    return None


def _measure(ctx: Context, token: int, steps) -> tuple[StepCosts, str | None]:
    """A calibration, and why it must not be stored (None: it may)."""
    why = None
    for _ in range(ATTEMPTS):
        load = busy()  # before the measurement: the 1-minute average lags behind
        costs = calibrate(ctx, token, steps, repeats=3)
        why = implausible(costs)
        if why is None:
            return costs, load
    return costs, why


def still_holds(costs: StepCosts, measured_at: float, one_row_s: float, now: float) -> bool:
    """A stored calibration (``measured_at``, unix seconds) may be reused at ``now``: younger than
    MAX_AGE_S, and today's one-row decode (``one_row_s``) costs about what it says."""
    if now - measured_at > MAX_AGE_S:
        return False
    return costs.verify[0] / AGREE <= one_row_s <= costs.verify[0] * AGREE


def one_row_now(ctx: Context, token: int, seq_id: int) -> float:
    """Seconds of a one-row decode now (median of 4, after a warm-up call); ``seq_id`` is left empty."""
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        ctx.decode([token], 0, seq_id=seq_id, outputs="all")
        ctx.logits()[0].argmax()
        times.append(time.perf_counter() - t0)
        ctx.seq_rm(seq_id, 0)
    return statistics.median(times[1:])  # the first call pays for allocations


def _stored(path: Path, key: str) -> tuple[StepCosts, float] | None:
    try:
        entry = json.loads(path.read_text()).get(key)
        if not entry:
            return None
        costs = StepCosts(tuple(entry["verify"]), dict(entry["drafts"]))
        return (costs, float(entry["measured_at"])) if implausible(costs) is None else None
    except (OSError, ValueError, KeyError, TypeError):  # no file, or one written before measured_at or drafts
        return None


def _store(path: Path, key: str, costs: StepCosts) -> None:
    try:
        table = json.loads(path.read_text()) if path.is_file() else {}
    except ValueError:
        table = {}
    table[key] = {"verify": list(costs.verify), "drafts": dict(costs.draft_steps), "measured_at": time.time()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(table, indent=1).encode())
    except OSError as exc:  # a shared file's folder we may not write: measured again at the next start
        log.warning("verify costs not stored in %s: %s", path, exc)
