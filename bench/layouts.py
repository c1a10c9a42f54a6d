"""The weight layout for each job, end to end (issue 52): reading and answering speed through a real
server with each ``DOCQA_CPU_REPACK`` layout, in the same run.

For each layout (``on``: repacked weights for both jobs; ``off``: plain weights for both; ``pair``: a
second instance with plain weights reads, the repacked one answers; server/engine/layout.py), a fresh
``python -m server`` on the given model:

* **reading**: a ~3k-token text (``--chars``) uploaded, upload to ``ready``, in tokens/s of its prompt
  prefix;
* **answering**: ``--questions`` questions about it, each answered openly (``"mode": "direct"``) and
  in the served form, 64 tokens at most; the answers' own ``decode_tokens_per_s`` (after the first
  token), medians;
* the server's resident memory after the answers (VmRSS, which counts the mapped weights it touched).

A layout may name flash attention after a colon (``pair:off``: ``DOCQA_FLASH_ATTN=off``), which the
start-up measurement otherwise chooses (it is skipped here: each server gets the layout named).
Layouts run in turn, ``--repeats`` times round-robin (so a change of load hits every layout alike).
Results: ``--out`` (.json and .md). Run on an idle machine: ``python -m bench.layouts``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.prefill import cpu_flags, read_text, resolve

QUESTIONS = [
    "What did Alice find when she looked into the bottle?",
    "Who does Alice meet in this part of the story?",
    "How does Alice feel at the end of this passage?",
    "What is Alice holding?",
]


def run(model: Path, layout: str, threads: int, chars: int, questions: list[str]) -> dict:
    from testkit.live import Live

    data = Path(tempfile.mkdtemp(prefix="docqa-layouts-"))
    repack, _, flash_attn = layout.partition(":")
    env = {"DOCQA_N_THREADS": str(threads), "DOCQA_N_CTX": "8192", "DOCQA_CPU_REPACK": repack}
    if flash_attn:
        env["DOCQA_FLASH_ATTN"] = flash_attn
    live = Live(data / "data", model, **env)
    t0 = time.perf_counter()
    live.start(timeout=900)
    started = time.perf_counter() - t0
    try:
        doc_id, info, seconds = read_text(live, chars)
        assert info["status"] == "ready", info
        rates: dict[str, list[float]] = {"direct": [], "served": []}
        for q in questions:
            for form, extra in (("direct", {"mode": "direct"}), ("served", {})):
                status, answer = live.post_json(
                    f"/v1/documents/{doc_id}/answers", {"question": q, "max_tokens": 64, **extra}, 600
                )
                assert status == 200, answer
                if answer["stats"]["completion_tokens"] > 1:
                    rates[form].append(answer["stats"]["decode_tokens_per_s"])
        health = live.get("/health")[1]
        rss = live.rss_kib()
    finally:
        live.stop()
    return {
        "layout": layout,
        "start_s": started,
        "tokens": info["tokens"],
        "read_s": seconds,
        "read_tps": info["tokens"] / seconds,
        "decode_direct": statistics.median(rates["direct"]) if rates["direct"] else None,
        "decode_served": statistics.median(rates["served"]) if rates["served"] else None,
        "rss_mib": rss / 1024,
        "reader": health.get("reader"),
    }


def report(results: dict) -> str:
    m = results["machine"]
    lines = [
        "| layout | read tok/s | decode tok/s, direct | decode tok/s, served form | RSS MiB | runs |",
        "|---|---|---|---|---|---|",
    ]
    by: dict[str, list[dict]] = {}
    for r in results["rows"]:
        by.setdefault(r["layout"], []).append(r)

    def cell(rows: list[dict], key: str, fmt: str = ".1f") -> str:
        values = [r[key] for r in rows if r.get(key) is not None]
        return " / ".join(format(v, fmt) for v in values) if values else "-"

    for layout, rows in by.items():
        lines.append(
            f"| {layout} | {cell(rows, 'read_tps')} | {cell(rows, 'decode_direct')} | {cell(rows, 'decode_served')} "
            f"| {cell(rows, 'rss_mib', '.0f')} | {len(rows)} |"
        )
    first = next(iter(by))  # the baseline: the first layout named
    base = by[first]
    for layout, rows in by.items():
        if layout == first:
            continue

        lines.append(
            f"\n`{layout}` against `{first}` (medians): reading {_ratio(rows, base, 'read_tps')}, direct decoding "
            f"{_ratio(rows, base, 'decode_direct')}, served-form decoding {_ratio(rows, base, 'decode_served')}."
        )
    reader = next((r["reader"] for r in results["rows"] if r.get("reader")), None)
    if reader:
        lines.append(f"\nThe pair's start-up line: {reader}.")
    lines.append(
        f"\n{m['cpu']}, {m['cores']} cores; flags: {m['flags']}; load before/after: {m['load_before']} / "
        f"{m['load_after']}. `python -m bench.layouts {' '.join(results['argv'])}`"
    )
    return "\n".join(lines) + "\n"


def _ratio(rows: list[dict], base: list[dict], key: str) -> str:
    a = [r[key] for r in rows if r.get(key)]
    b = [r[key] for r in base if r.get(key)]
    return f"{statistics.median(a) / statistics.median(b):.2f}x" if a and b else "-"


def main() -> None:
    import sys

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="qwen-coder-1.5b", help="a runtime/models.py name or a GGUF path")
    p.add_argument("--layouts", default="on,off,pair")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--chars", type=int, default=12_000, help="characters of the text read (~4 per token)")
    p.add_argument("--questions", type=int, default=3)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "layouts")
    args = p.parse_args()
    from bench.quality import machine

    model, load0, rows = resolve(args.model), os.getloadavg(), []
    for _ in range(args.repeats):
        for layout in args.layouts.split(","):
            rows.append(run(model, layout, args.threads, args.chars, QUESTIONS[: args.questions]))
            print(json.dumps(rows[-1]), flush=True)  # noqa: T201
    results = {
        "rows": rows,
        "argv": sys.argv[1:],
        "machine": {**machine(), "flags": cpu_flags(), "load_before": load0, "load_after": os.getloadavg()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    args.out.with_suffix(".md").write_text(report(results))
    print(report(results))  # noqa: T201


if __name__ == "__main__":
    main()
