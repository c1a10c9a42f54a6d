"""Decode tok/s of two docqa checkouts in one run, side by side (e.g. before and after a refactor).

Starts a real server (``python -m server``) from each checkout, both loaded at once, ingests the
documents of bench/ttft.py into each, then asks bench/ttft.py's decode questions in alternation
(A, B, then B, A, ...), so machine noise lands on both alike. B gets A's measured step costs, so the
adaptive policy makes the same choices in both. Reports the median decode tok/s per
workload and checkout, and their ratio.

Usage: .venv/bin/python -m bench.side_by_side OLD_DIR NEW_DIR [--repeats 5] [--env KEY=VALUE ...] [--out FILE.md]

``--env`` sets a setting for both servers, e.g. ``DOCQA_FLASH_ATTN=on DOCQA_CPU_REPACK=on`` to compare two
checkouts whose start-up chooses the kernel layout otherwise (the choice is measured per CPU since issue 52).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
from pathlib import Path

from bench.ttft import ALICE, CRAZY, EXACT, OPEN, QUOTE
from runtime.system import system_info
from testkit.live import Live

WORKLOADS = {  # name: (document, question, body) of bench/ttft.py, default (adaptive) mode
    "copy (Alice)": ("alice", QUOTE, {}),
    "exact copy (crazyones)": ("crazy", EXACT, {}),
    "open (sampled)": ("alice", OPEN, {"temperature": 0.8, "seed": 3, "stop": []}),
    # Fixed windows: the adaptive policy learns step costs from each server's own verify calls, so two
    # servers (even of one checkout) drift into other drafting choices; these rows draft alike in both.
    "copy, window 16": ("alice", QUOTE, {"draft_tokens": 16}),
    "open, no drafts": ("alice", OPEN, {"draft_tokens": 0, "stop": []}),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--env", nargs="*", default=[], metavar="KEY=VALUE", help="a setting for both servers")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    pinned = dict(item.split("=", 1) for item in args.env)
    alice = ALICE.read_bytes()[:40_000].decode("utf-8-sig", errors="ignore")[:20_000].encode()
    tmp = Path(tempfile.mkdtemp(prefix="docqa-sbs-"))
    servers = {}
    for name, tree in (("old", args.old), ("new", args.new)):
        # No thread drop (DOCQA_ADAPT_THREADS): in alternation each server would see the other's decode as
        # other work and drop a thread for its next answer (0.81-0.88x in a run with it on).
        env = {"DOCQA_N_CTX": "32768", "DOCQA_N_THREADS": str(args.threads), "DOCQA_ADAPT_THREADS": "false"}
        env |= pinned
        (tmp / name).mkdir()
        if name == "new":  # the same measured step costs, so the adaptive policy chooses the same windows
            shutil.copy(tmp / "old" / "calibration.json", tmp / "new" / "calibration.json")
        servers[name] = Live(tmp / name, _model(tmp), root=tree.resolve(), **env).start(timeout=600)
    try:
        docs = {name: {"alice": s.ingest("alice.txt", alice), "crazy": s.ingest("crazyones.pdf", CRAZY.read_bytes())}
                for name, s in servers.items()}  # fmt: skip
        rates: dict[str, dict[str, list[float]]] = {w: {"old": [], "new": []} for w in WORKLOADS}
        drafts: dict[str, dict[str, tuple[int, int]]] = {w: {} for w in WORKLOADS}
        for repeat in range(args.repeats):
            for workload, (doc, question, body) in WORKLOADS.items():
                order = list(servers.items())  # each goes first in every other repeat
                for name, s in order if repeat % 2 == 0 else order[::-1]:
                    url = f"/v1/documents/{docs[name][doc]}/answers"
                    status, reply = s.post_json(url, {"question": question, "max_tokens": 128, **body})
                    assert status == 200, reply
                    rates[workload][name].append(reply["stats"]["decode_tokens_per_s"])
                    drafts[workload][name] = (reply["stats"]["drafted_tokens"], reply["stats"]["accepted_tokens"])
    finally:
        for s in servers.values():
            s.stop()
    lines = [
        f"# Decode tok/s, default mode, {args.old} vs {args.new}",
        "",
        f"One run, both servers loaded at once, {args.repeats} alternating repeats (medians), 128-token answers, "
        f"{args.threads} threads, embedded Gemma 3 270M Q4_K_M. CPU: {platform.processor() or platform.machine()}; "
        f"{system_info()}",
        *([f"Both servers with {' '.join(args.env)}."] if args.env else []),
        "",
        "| workload | old tok/s | new tok/s | new / old | drafted / accepted, old | new |",
        "|---|---|---|---|---|---|",
    ]
    for workload, by in rates.items():
        old, new = statistics.median(by["old"]), statistics.median(by["new"])
        (od, oa), (nd, na) = drafts[workload]["old"], drafts[workload]["new"]
        lines.append(f"| {workload} | {old:.1f} | {new:.1f} | {new / old:.3f} | {od} / {oa} | {nd} / {na} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


def _model(tmp: Path) -> Path:
    from runtime.embedded import embedded_model_path

    return embedded_model_path(tmp / "model")


if __name__ == "__main__":
    main()
