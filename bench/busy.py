"""Decoding beside other work, with the server's default settings (issue 36): decode tok/s and accepted
drafts per step of an open answer and of a quote, alone and beside busy processes, in one run.

A fresh server (``python -m server``, the default model unless ``--model``, nothing set but the
context size) reads ~2.5k tokens of Alice once. Then, in rounds whose order alternates (alone, busy,
then busy, alone), it is asked an open question (greedy, 64 tokens) and to copy a paragraph (128
tokens), ``--repeats`` times each way. "Busy" is ``--busy`` single-threaded Python loops started just
before the round and stopped after it, as a browser tab or a build would take a core.

Reported: the median decode tok/s and accepted drafts per step of each, the busy/alone ratio, and the
thread counts the server logged (``DOCQA_ADAPT_THREADS``). Run on an otherwise idle machine:
``python -m bench.busy`` (``--help``). Writes bench/results/busy.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.policy_sim import QUOTED
from bench.quality import machine
from runtime.models import model_path
from runtime.system import system_info
from testkit.live import Live

ROOT = Path(__file__).resolve().parent.parent
ALICE = ROOT.parent / "shared" / "cases" / "text" / "gutenberg" / "alice-in-wonderland-pg11.txt"
WORKLOADS = {
    "open": ("Write a short poem about the sea.", {"max_tokens": 64, "stop": []}),
    "quote": (f"Copy, word for word, the paragraph that begins with '{QUOTED}'.", {"max_tokens": 128}),
}


def busy_loops(n: int) -> list[subprocess.Popen]:
    """``n`` processes that each keep one core busy until killed."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen-coder-1.5b")
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--busy", type=int, default=1, help="busy processes beside the server")
    p.add_argument("--threads", type=int, default=None, help="DOCQA_N_THREADS (default: unset, the server's own)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "busy")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="docqa-busy-"))
    path = model_path(args.model, Path(tempfile.gettempdir()) / "docqa-models")
    load0 = os.getloadavg()
    # The user's defaults, but the context size: testkit's own (2 threads, no answer history) are unset.
    threads = None if args.threads is None else str(args.threads)
    live = Live(tmp / "data", path, DOCQA_N_CTX="8192", DOCQA_N_THREADS=threads, DOCQA_ANSWER_HISTORY=None)
    live.start(timeout=900)
    got: dict[str, dict[str, list[dict]]] = {w: {"alone": [], "busy": []} for w in WORKLOADS}
    try:
        text = ALICE.read_text(encoding="utf-8-sig")[:10_000]
        doc = live.ingest("alice.txt", text.encode())
        for repeat in range(args.repeats):
            for way in ("alone", "busy") if repeat % 2 == 0 else ("busy", "alone"):
                loops = busy_loops(args.busy) if way == "busy" else []
                time.sleep(1.5 if loops else 0.0)  # the server's load sampling sees them
                try:
                    for name, (question, body) in WORKLOADS.items():
                        status, r = live.post_json(f"/v1/documents/{doc}/answers", {"question": question, **body})
                        assert status == 200, r
                        got[name][way].append(r["stats"])
                finally:
                    for proc in loops:
                        proc.kill()
                        proc.wait()
                time.sleep(1.5)
        log = live.log.read_text(errors="replace")
    finally:
        live.stop()
    rows = {}
    for name, ways in got.items():
        row = {}
        for way, stats in ways.items():
            row[way] = {
                "decode_tok_s": statistics.median(s["decode_tokens_per_s"] for s in stats),
                "accepted_per_step": statistics.median(s["mean_accepted_per_step"] for s in stats),
                "runs": stats,
            }
        row["busy_vs_alone"] = row["busy"]["decode_tok_s"] / row["alone"]["decode_tok_s"]
        rows[name] = row
    threads = [line.split("docqa.engine: ", 1)[1] for line in log.splitlines() if "decoding with" in line]
    result = {"machine": machine(), "system_info": system_info(), "model": args.model, "busy": args.busy,
              "repeats": args.repeats, "load_before": load0, "load_after": os.getloadavg(), "rows": rows,
              "thread_changes": threads}  # fmt: skip
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    lines = [
        f"# Decoding beside {args.busy} busy process(es), default settings ({args.model}, bench/busy.py"
        + (f", DOCQA_N_THREADS={args.threads})" if args.threads else ")"),
        "",
        f"{machine()}; load before/after {load0} / {os.getloadavg()}; {system_info()}",
        "",
        "| answer | alone tok/s | beside busy tok/s | busy / alone | accepted per step alone | beside busy |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        a, b = row["alone"], row["busy"]
        lines.append(
            f"| {name} | {a['decode_tok_s']:.1f} | {b['decode_tok_s']:.1f} | {row['busy_vs_alone']:.2f}x | "
            f"{a['accepted_per_step']:.2f} | {b['accepted_per_step']:.2f} |"
        )
    lines += ["", f"Thread changes the server logged: {len(threads)} ({'; '.join(threads[:6])})"]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
