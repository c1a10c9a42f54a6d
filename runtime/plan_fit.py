"""What fits a device budget (the largest n_ctx / n_seq_max), sizes as text, and the plan as a table.

Built on runtime/plan.py's :func:`~runtime.plan.plan`; ``docqa plan`` prints :func:`render`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from runtime.plan import Plan, plan
from runtime.plan_compute import CTX_PAD
from runtime.plan_config import MAX_SEQ, GiB, MiB, PlanConfig
from runtime.shape import ModelShape


@dataclass(frozen=True, slots=True)
class Fit:
    """Largest sizes that fit a device budget (bytes); 0 when nothing fits.

    ``n_ctx`` is for the config's n_seq_max, ``n_seq_max`` for the config's n_ctx, and ``frontier``
    maps n_seq_max to the largest n_ctx for a few sequence counts."""

    budget: int
    n_ctx: int
    n_seq_max: int
    frontier: tuple[tuple[int, int], ...]


def largest_n_ctx(shape: ModelShape, cfg: PlanConfig, budget: int) -> int:
    """Largest padded n_ctx (<= n_ctx_train when known) whose plan fits ``budget`` device bytes."""
    limit = shape.n_ctx_train or 1 << 22
    lo, hi = 0, limit // CTX_PAD  # in units of 256 cells; memory grows with n_ctx
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if plan(shape, replace(cfg, n_ctx=mid * CTX_PAD)).device_total <= budget:
            lo = mid
        else:
            hi = mid - 1
    return plan(shape, replace(cfg, n_ctx=lo * CTX_PAD)).n_ctx if lo else 0


def largest_n_seq_max(shape: ModelShape, cfg: PlanConfig, budget: int, limit: int = MAX_SEQ) -> int:
    """Largest n_seq_max (<= ``limit``) whose plan at ``cfg.n_ctx`` fits ``budget`` device bytes."""
    best = 0
    for n in range(1, limit + 1):
        if plan(shape, replace(cfg, n_seq_max=n)).device_total > budget:
            break
        best = n
    return best


def fit(shape: ModelShape, cfg: PlanConfig, budget: int, seqs: Iterable[int] = (1, 2, 4, 8, 16)) -> Fit:
    """The largest n_ctx and n_seq_max that fit ``budget`` bytes of device memory (see :class:`Fit`)."""
    frontier = tuple((n, largest_n_ctx(shape, replace(cfg, n_seq_max=n), budget)) for n in seqs)
    return Fit(budget, largest_n_ctx(shape, cfg, budget), largest_n_seq_max(shape, cfg, budget), frontier)


_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*((?:[kmgt]i?)?b?)\s*$", re.IGNORECASE)


def parse_size(text: str | int) -> int:
    """Bytes from "24GiB", "24000MiB", "24GB" (10^9), "24G" (GiB) or a plain byte count."""
    if isinstance(text, int):
        return text
    m = _SIZE.match(text)
    if m is None:
        raise ValueError(f"cannot read a size from {text!r}; write e.g. 24GiB, 24000MiB or 24GB")
    number, unit = float(m[1]), m[2].lower()
    if unit in ("", "b"):
        return int(number)
    power = "kmgt".index(unit[0]) + 1
    base = 1000 if unit.endswith("b") and not unit.endswith("ib") else 1024
    return int(number * base**power)


def format_size(n: int) -> str:
    """1.23 GiB / 456.7 MiB / 8.0 KiB."""
    if n >= GiB:
        return f"{n / GiB:.2f} GiB"
    if n >= MiB:
        return f"{n / MiB:.1f} MiB"
    return f"{n / 1024:.1f} KiB" if n else "-"


def render(p: Plan, fitted: Fit | None = None) -> str:
    """A human-readable table of a plan, and of what fits when ``fitted`` is given."""
    c = p.config
    kv = f"K {c.type_k} / V {c.type_v}"
    head = [
        f"Memory plan: {p.model}",
        f"n_ctx {p.n_ctx:,} ({'unified' if c.kv_unified else f'{c.n_seq_max} x {p.n_ctx_seq:,}'}), "
        f"n_seq_max {c.n_seq_max}, n_rs_seq {p.n_rs_seq}, {kv}, flash attention {'on' if c.flash_attn else 'off'}, "
        f"n_ubatch {p.n_ubatch}, MTP {'on' if 'mtp_kv' in {r.name for r in p.rows} else 'off'}, "
        f"{'CPU only' if c.backend == 'cpu' else f'n_gpu_layers {c.n_gpu_layers}'}",
        f"KV {p.kv_bytes_per_token:,} B/token"
        + (f" (+ {p.mtp_kv_bytes_per_token:,} B/token MTP)" if p.mtp_kv_bytes_per_token else "")
        + (f", SWA layers {p.swa_cells:,} cells" if p.swa_cells else "")
        + (f", recurrent state {format_size(p.rs_bytes_per_seq)} per sequence and plane" if p.rs_bytes_per_seq else "")
        + f"; file tensors {format_size(p.weights_file)}",
        "",
        f"| {'component':<12} | {'GPU':>10} | {'host':>10} | rule (source) |",
        f"|{'-' * 14}|{'-' * 12}|{'-' * 12}|---------------|",
    ]
    body = [f"| {r.name:<12} | {format_size(r.device):>10} | {format_size(r.host):>10} | {r.rule} |" for r in p.rows]
    body.append(f"| {'total':<12} | {format_size(p.device_total):>10} | {format_size(p.host_total):>10} | |")
    tail: list[str] = []
    if fitted is not None:
        free = fitted.budget - p.device_total
        verdict = f"fits, {format_size(free)} free" if free >= 0 else f"does NOT fit, {format_size(-free)} over"
        tail = [
            "",
            f"Budget {format_size(fitted.budget)}: {verdict}.",
            f"Largest n_ctx at n_seq_max {c.n_seq_max}: {fitted.n_ctx:,}" + ("" if fitted.n_ctx else " (nothing fits)"),
            f"Largest n_seq_max at n_ctx {p.n_ctx:,}: {fitted.n_seq_max}" + ("" if fitted.n_seq_max else " (none)"),
            "Largest n_ctx by n_seq_max: "
            + ", ".join(f"{n}: {ctx:,}" if ctx else f"{n}: none" for n, ctx in fitted.frontier),
        ]
    return "\n".join(head + body + tail)
