"""The reading queue (issue 51): two small documents uploaded while a big one is being read, on the
default model. A 520-token PDF waited 11.7 minutes behind four other documents in arrival order.

Scenario, per server: a ~6k-token text is uploaded; once its reading has begun, two texts of about 500
tokens each. For each document: the time from its upload to ``ready``, its own reading time (from the
first look that found it being read to ``ready``), and the bound of the issue (twice its own reading
time plus a minute); what each small one showed while it waited (its place in the queue and the
expected wait, ``reading`` of GET /v1/documents/{id}).

Policies measured: this checkout's (shortest expected reading first; a much shorter document pauses
the reading under way: server/engine/scheduler.py) and, with ``--before DIR``, the code before it (a
checkout of the commit before, e.g. ``git archive 9180a68 | tar -x -C DIR``: arrival order). Reading
slices shared between the waiting documents (processor sharing) are simulated from the measured
reading rate and the same arrival times (no chunk overheads, which only add to the slices' cost).

Run: ``python -m bench.reading_queue [--before DIR]`` (``--help``). Writes bench/results/reading-queue.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from bench.quality import machine
from runtime.models import model_path
from runtime.system import system_info
from testkit.live import ROOT, Live

CASES = ROOT.parent / "shared" / "cases" / "text" / "gutenberg"
BOOK = (CASES / "around-the-world-in-80-days-pg103.txt").read_text(encoding="utf-8-sig")
BIG = BOOK[20_000:44_000]  # ~6k tokens
SMALLS = [BOOK[60_000:62_000], BOOK[90_000:92_000]]  # ~500 tokens each
POLL_S = 0.2


def run(model: Path, root: Path, threads: int) -> dict:
    """One server from ``root``: the scenario of the module docstring; per document its times (s)."""
    data = Path(tempfile.mkdtemp(prefix="docqa-queue-"))
    live = Live(data / "data", model, root=root, DOCQA_N_THREADS=str(threads), DOCQA_N_CTX="12288")
    live.start(timeout=900)
    docs: dict[str, dict] = {}
    try:
        t0 = time.monotonic()
        _, big = live.upload("big.txt", BIG.encode())
        docs[big["id"]] = {"name": "big (~6k tokens)", "uploaded": 0.0}
        while (r := live.get(f"/v1/documents/{big['id']}")[1].get("reading")) is None or r["tokens_done"] == 0:
            time.sleep(POLL_S)  # its reading has begun
        for k, text in enumerate(SMALLS):
            _, small = live.upload(f"small-{k}.txt", text.encode())
            docs[small["id"]] = {"name": f"small {k + 1} (~500 tokens)", "uploaded": time.monotonic() - t0}
        while any("ready" not in d for d in docs.values()):
            for doc_id, d in docs.items():
                if "ready" in d:
                    continue
                doc = live.get(f"/v1/documents/{doc_id}")[1]
                now = time.monotonic() - t0
                reading = doc.get("reading")
                if doc["status"] != "ingesting":
                    d["ready"], d["tokens"] = now, doc["tokens"]
                elif reading and not reading["waiting"]:
                    d.setdefault("began", now)
                elif reading and "shown" not in d and reading.get("seconds_left") is not None:
                    d["shown"] = {k: reading.get(k) for k in ("position", "documents_ahead", "seconds_left", "paused")}
            time.sleep(POLL_S)
    finally:
        live.stop()
    for d in docs.values():
        d["waited"] = d["ready"] - d["uploaded"]
        d["own"] = d["ready"] - d.get("began", d["ready"])
        d["bound"] = 2 * d["own"] + 60
    return {"root": str(root), "docs": list(docs.values())}


def shared_slices(docs: list[dict], rate: float, dt: float = 0.01) -> list[float]:
    """Upload-to-ready seconds of each document (``tokens``, ``uploaded``) when the documents waiting
    share the reading equally (processor sharing at ``rate`` tokens/s)."""
    left = [float(d["tokens"]) for d in docs]
    done: list[float | None] = [None] * len(docs)
    t = 0.0
    while any(x is None for x in done):
        active = [i for i, d in enumerate(docs) if d["uploaded"] <= t and done[i] is None]
        for i in active:
            left[i] -= rate * dt / len(active)
            if left[i] <= 0:
                done[i] = t + dt - docs[i]["uploaded"]
        t += dt
    return [float(x) for x in done]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="qwen-coder-1.5b")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--before", type=Path, default=None, help="a checkout of the code before (arrival order)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "reading-queue")
    args = p.parse_args()
    path = model_path(args.model, Path(tempfile.gettempdir()) / "docqa-models")
    load0 = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_suffix(".partial.json")  # each run as it ends: a run on a busy machine takes an hour
    runs = {"shortest first, pausing": run(path, ROOT, args.threads)}
    partial.write_text(json.dumps(runs, indent=1))
    if args.before is not None:
        runs["arrival order (before)"] = run(path, args.before, args.threads)
        partial.write_text(json.dumps(runs, indent=1))
    docs = runs["shortest first, pausing"]["docs"]
    # The engine reads from the first upload until the last document is ready: the tokens over that time.
    rate = sum(d["tokens"] for d in docs) / max(d["ready"] for d in docs)
    shared = shared_slices(docs, rate)
    results = {"model": args.model, "runs": runs, "shared_slices_simulated": shared, "rate_tokens_per_s": rate,
               "machine": {**machine(), "load_before": load0, "load_after": os.getloadavg(),
                           "system_info": system_info()}}  # fmt: skip
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    partial.unlink(missing_ok=True)
    m = results["machine"]
    lines = [
        f"# The reading queue ({args.model}, bench/reading_queue.py)",
        "",
        f"{m['cpu']}, {m['cores']} cores, {args.threads} threads; load before/after {m['load_before']} / "
        f"{m['load_after']}; {m['system_info']}",
        "",
        "| policy | document | tokens | uploaded at s | ready after s | its own reading s | bound 2x own + 60 s |"
        " within | shown while waiting |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for policy, result in runs.items():
        for d in result["docs"]:
            shown = d.get("shown")
            said = f"place {shown['position']}, about {shown['seconds_left']:.0f} s" if shown else ""
            lines.append(
                f"| {policy} | {d['name']} | {d['tokens']} | {d['uploaded']:.1f} | {d['waited']:.1f} | {d['own']:.1f} "
                f"| {d['bound']:.0f} | {'yes' if d['waited'] <= d['bound'] else 'no'} | {said} |"
            )
    for d, waited in zip(docs, shared, strict=True):
        lines.append(
            f"| shared slices (simulated, {rate:.0f} tok/s) | {d['name']} | {d['tokens']} | {d['uploaded']:.1f} | "
            f"{waited:.1f} | | | | |"
        )
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
