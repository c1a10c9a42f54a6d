"""The device run's markdown table, and the speed a drafter would reach at a given acceptance.

A verify step with ``k`` drafts decodes ``k + 1`` rows and emits ``1 + a + a^2 + ... + a^k`` tokens on
average when each draft token is accepted with probability ``a`` given the ones before it (Leviathan et
al. 2023, §3.5); with a model drafter it also pays ``k`` draft steps. So the expected speed at window
``k`` is ``(1 + a + ... + a^k) / (verify(k + 1 rows) + k x draft step)``, and the best window the
largest of these. bench/device/measure.py measures the verify curve and the MTP draft step on the
random-weight model (which accepts nothing); :func:`expected` turns them into speeds at acceptances
measured elsewhere (bench/results/bench.md on the CPU models, the public MTP figure).
"""

from __future__ import annotations

#: Acceptances the table prices, with where each was measured.
ACCEPTANCE = {
    0.433: "docqa verify16 re-reading Alice 8k, Gemma 3 270M on CPU (bench/results/bench.md)",
    0.65: "llama.cpp MTP on Qwen3.6-27B Q4_K_M, RTX 3090 (public report)",
    0.681: "docqa adaptive re-reading Alice 8k, Gemma 3 270M on CPU (bench/results/bench.md)",
}


def expected(verify_ms: dict[int, float], a: float, k: int, draft_ms: float = 0.0) -> float:
    """Tokens per second at window ``k`` (``verify_ms[rows]``: one verify call of that many rows)."""
    tokens = sum(a**i for i in range(k + 1))
    return tokens / (verify_ms[k + 1] + k * draft_ms) * 1000.0


def best(verify_ms: dict[int, float], a: float, draft_ms: float = 0.0, max_k: int = 16) -> tuple[int, float]:
    """(window, tok/s) of the fastest window at acceptance ``a``."""
    ks = [k for k in range(max_k + 1) if k + 1 in verify_ms]
    return max(((k, expected(verify_ms, a, k, draft_ms)) for k in ks), key=lambda kv: kv[1])


def _f(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def markdown(r: dict) -> str:
    """The whole result as one markdown page (what run.sh prints last and writes to $OUT)."""
    m, model = r.get("machine", {}), r.get("model", {})
    if model.get("scale"):
        scale = f"{model['n_layer']} of Qwen3.5-27B's 64 blocks, all its widths: scale {model['scale']:.2f}"
    else:
        scale = "the tiny test model"
    lines = [
        f"# docqa on {m.get('gpu') or m.get('cpu', '?')} ({r.get('mode', '?')} mode)",
        "",
        f"Model: {model.get('name', '?')}, random weights, {_f(model.get('file_gb'), 2)} GB GGUF ({scale}); "
        f"build: {r.get('build', {}).get('summary', '?')}; context: {r.get('context', {}).get('summary', '?')}.",
        "",
        "| what | value |",
        "|---|---|",
    ]
    for p in r.get("prefill", []):
        lines.append(f"| prefill to {p['tokens']:,} tokens (from 0, MTP catch-up included) | {_f(p['tok_s'])} tok/s |")
    for s in r.get("snapshots", []):
        lines.append(
            f"| save / restore at {s['tokens']:,} tokens ({_f(s['bytes'] / 1e9, 2)} GB, ingest/snapshot.py) "
            f"| {_f(s['save_s'], 2)} s / {_f(s['load_s'], 2)} s |"
        )
    d = r.get("decode", {})
    if d:
        lines.append(f"| decode, no drafts, at {d['depth']:,} tokens (docqa's answer loop) | {_f(d['tok_s'])} tok/s |")
    if r.get("mtp_step_ms") is not None:
        lines.append(f"| MTP draft step (1 row + LM head) | {_f(r['mtp_step_ms'], 2)} ms |")
    eq = r.get("equality", {})
    if eq:
        lines.append(
            f"| greedy, drafting on = off ({eq['tokens']} tokens at {eq['depth']:,}) | "
            f"{'equal' if eq['equal'] else 'first differs at token ' + str(eq['first_divergence'])} |"
        )
    for a in r.get("accept_all", []):
        lines.append(
            f"| every draft accepted (debug), {a['source']} window {a['window']} | {_f(a['tok_s'])} tok/s "
            f"({_f(a['tokens_per_step'], 2)} tokens/step) |"
        )
    plan = r.get("plan", {})
    if plan.get("rows"):
        lines += ["", "Planner (runtime/plan.py) against the buffers llama.cpp allocated (MiB):", ""]
        lines += ["| buffer | planned | allocated | planned / allocated |", "|---|---|---|---|"]
        for row in plan["rows"]:
            ratio = row["planned"] / row["allocated"] if row["allocated"] else None
            planned, allocated = _f(row["planned"] / 2**20), _f(row["allocated"] / 2**20)
            lines.append(f"| {row['name']} | {planned} | {allocated} | {_f(ratio, 3)} |")
        if plan.get("gpu_used"):
            lines.append(
                f"| device total (nvidia-smi, after contexts) | {_f(plan['device_planned'] / 2**20)} "
                f"| {_f(plan['gpu_used'] / 2**20)} | {_f(plan['device_planned'] / plan['gpu_used'], 3)} |"
            )
    for depth, curve in sorted(r.get("verify", {}).items(), key=lambda kv: int(kv[0])):
        ms = {int(k): v for k, v in curve.items()}
        lines += ["", f"Verify calls at {int(depth):,} tokens (median ms per call, logits of every row read):", ""]
        lines += ["| rows | " + " | ".join(str(k) for k in sorted(ms)) + " |", "|---" * (len(ms) + 1) + "|"]
        lines.append("| ms | " + " | ".join(_f(ms[k], 2) for k in sorted(ms)) + " |")
        lines.append("| / 1 row | " + " | ".join(_f(ms[k] / ms[1], 2) for k in sorted(ms)) + " |")
        lines.append("| tok/s, every draft accepted | " + " | ".join(_f(k / ms[k] * 1000) for k in sorted(ms)) + " |")
        draft = r.get("mtp_step_ms") or 0.0
        lines += ["", "| acceptance | best window: lookup (tok/s) | MTP, window <= 3 (tok/s) | measured where |"]
        lines.append("|---|---|---|---|")
        for a, where in ACCEPTANCE.items():
            kl, vl = best(ms, a)
            km, vm = best(ms, a, draft, max_k=3)
            lines.append(f"| {a} | {kl} ({_f(vl)}) | {km} ({_f(vm)}) | {where} |")
    if r.get("skipped"):
        lines += ["", "Skipped (time): " + "; ".join(r["skipped"])]
    if r.get("errors"):
        lines += ["", "Errors: " + "; ".join(r["errors"])]
    lines += ["", f"Wall time: {_f(r.get('wall_s'), 0)} s in all, {_f(r.get('measure_s'), 0)} s measuring.", ""]
    return "\n".join(lines)
