"""Step costs of this machine for the adaptive draft window (spec.cost), measured once and kept.

The measured costs are kept in ``data_dir/calibration.json``, keyed by model fingerprint, threads,
KV types, flash attention and MTP: the same machine and model cost the same after a restart. They
seed spec/cost.py's ``CostModel``, which corrects them from the real verify calls of each run.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from runtime.atomic import write_atomic
from runtime.llama import Context, Model
from spec.cost import StepCosts, calibrate

log = logging.getLogger("docqa.engine")


def step_costs(ctx: Context, model: Model, mtp_ctx: Context | None, data_dir: Path, seq_id: int = 0) -> StepCosts:
    """Verify costs for 0..16 drafts (and one MTP step), from ``data_dir`` or measured on ``seq_id``,
    which must be empty and is left empty. About 0.5 s to measure on a 2-core CPU."""
    token = max(model.bos, 0)
    mtp_step = None
    if mtp_ctx is not None:
        zeros = np.zeros((1, mtp_ctx.n_embd), dtype=np.float32)

        def mtp_step() -> None:
            mtp_ctx.decode([token], 0, seq_id=seq_id, outputs="all", embd=zeros)
            mtp_ctx.logits()[0].argmax()
            mtp_ctx.hidden()[0].copy()
            mtp_ctx.seq_rm(seq_id, 0)

    cfg = ctx.config
    key = "/".join(
        map(str, (model.fingerprint, cfg.n_threads, cfg.type_k, cfg.type_v, cfg.flash_attn, mtp_step is not None))
    )
    path = data_dir / "calibration.json"
    stored = _stored(path, key)
    costs = stored or calibrate(ctx, token, mtp_step, repeats=3)
    if stored is None:
        _store(path, key, costs)
    log.info(
        "verify cost per step: %s ms (windows 0/1/4/16), MTP step %.2f ms",
        "/".join(f"{costs.verify[k] * 1000:.1f}" for k in (0, 1, 4, 16)),
        costs.mtp * 1000,
    )
    return costs


def _stored(path: Path, key: str) -> StepCosts | None:
    try:
        entry = json.loads(path.read_text()).get(key)
        return StepCosts(tuple(entry["verify"]), entry["mtp"]) if entry else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _store(path: Path, key: str, costs: StepCosts) -> None:
    try:
        table = json.loads(path.read_text()) if path.is_file() else {}
    except ValueError:
        table = {}
    table[key] = {"verify": list(costs.verify), "mtp": costs.mtp}
    write_atomic(path, json.dumps(table, indent=1).encode())
