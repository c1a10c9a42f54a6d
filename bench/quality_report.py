"""bench/results/quality.md from bench/quality.py's records: every table is computed from the JSON."""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

from bench.score import fmt_rate

SETS = ("tpo", "quality", "needles", "long", "counterfactual", "injection", "pdf10")
ORDER = ("whole", "whole+demos", "whole-v1", "segments", "rag")


def _system(r: dict) -> str:
    """A record's system and way of answering (bench/quality.py ``--modes``): "whole / quote"."""
    return f"{r['system']} / {r['mode']}" if r.get("mode") else r["system"]


def _groups(records: list[dict]) -> dict[tuple[str, str], list[dict]]:
    g: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in records:
        g[(r["model"], _system(r))].append(r)
    return g


def _systems(records) -> list[str]:
    def order(s: str) -> tuple:
        base = s.split(" / ")[0]
        return (ORDER.index(base) if base in ORDER else 9, s)

    return sorted({_system(r) for r in records}, key=order)


def _rate(rows, pred=lambda r: r["right"]) -> str:
    return fmt_rate(sum(1 for r in rows if pred(r)), len(rows))


def _median(values) -> str:
    values = [v for v in values if v is not None]
    return f"{statistics.median(values):.1f}" if values else "-"


def accuracy_table(records: list[dict]) -> list[str]:
    """Rows model x system; a column per set (answerable questions only), then refusals."""
    sets = [s for s in SETS if any(r["set"] == s for r in records)]
    head = ["model", "system / answer", *sets, "not-in-doc refused", "answerable refused", "TTFT s (median)",
            "s / question (median)"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    models = list(dict.fromkeys(r["model"] for r in records))
    for model in models:
        for system in _systems(records):
            rows = [r for r in records if r["model"] == model and _system(r) == system]
            if not rows:
                continue
            cells = [model, system]
            for s in sets:
                cells.append(_rate([r for r in rows if r["set"] == s and r["kind"] != "refusal"]))
            cells.append(_rate([r for r in rows if r["kind"] == "refusal"]))
            answerable = [r for r in rows if r["kind"] in ("exact", "counterfactual", "injection")]
            cells.append(_rate(answerable, lambda r: r.get("refused")))
            fresh = [r for r in rows if not r.get("reused")]
            cells.append(_median([r["ttft_ms"] / 1000 if r.get("ttft_ms") else None for r in fresh]))
            cells.append(_median([r["seconds"] for r in fresh]))
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def detail_table(records: list[dict]) -> list[str]:
    """Needles by depth, false refusals, citation quality, loops, counterfactual memory, canaries."""
    head = ["model", "system / answer", *(f"needle {d}%" for d in (10, 30, 50, 70, 90)), "needles 2k / 8k / 24k",
            "absent: attribute / entity refused", "needle cited", "quote verified", "memory (cf)", "canary",
            "repetition stops", "length stops"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (model, system), rows in _groups(records).items():
        needles = [r for r in rows if r["kind"] == "exact" and r["set"] in ("needles", "long")]
        cells = [model, system]
        for d in (0.1, 0.3, 0.5, 0.7, 0.9):
            cells.append(_rate([r for r in needles if r.get("depth") == d]))
        sizes = [
            [r for r in needles if f"-{k}-" in r["doc"] + "-" or r["doc"].endswith(k)] for k in ("2k", "8k", "24k")
        ]
        cells.append(" / ".join(_rate(rs).split(" [")[0] + f" n={len(rs)}" for rs in sizes))
        absent = [r for r in rows if r["kind"] == "refusal"]
        kinds = [[r for r in absent if r.get("absent") == k] for k in ("attribute", "entity")]
        cells.append(" / ".join(_rate(rs) for rs in kinds))
        cited = [r for r in rows if r["kind"] == "exact" and r.get("cites_needle") is not None and r["right"]]
        cells.append(_rate(cited, lambda r: r["cites_needle"]) if not system.startswith("rag") else "n/a")
        quoted = [r for r in rows if r.get("quote") is not None]
        cells.append(_rate(quoted, lambda r: r.get("quote_verified")))
        cells.append(_rate([r for r in rows if r["kind"] == "counterfactual"], lambda r: r.get("memory")))
        cells.append(_rate([r for r in rows if r["kind"] == "injection"], lambda r: r.get("obeyed")))
        fresh = [r for r in rows if not r.get("reused")]
        cells.append(_rate(fresh, lambda r: r.get("finish_reason") == "repetition"))
        cells.append(_rate(fresh, lambda r: r.get("finish_reason") == "length"))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def ready_table(results: dict) -> list[str]:
    lines = ["| model / system | document | tokens | ready s | prefill tok/s |", "|---|---|---|---|---|"]
    for key, docs in results.get("ready", {}).items():
        if key.endswith("/rag"):
            continue
        for doc, (tokens, seconds) in docs.items():
            if seconds:
                lines.append(f"| {key} | {doc} | {tokens} | {seconds:.1f} | {tokens / seconds:.0f} |")
    return lines


def examples_table(records: list[dict]) -> list[str]:
    """The README's example questions: how each answer ended (repetition = the loop guard fired)."""
    lines = ["| model | system | question | finish | tokens | answer (start) |", "|---|---|---|---|---|---|"]
    for r in records:
        if r["kind"] == "free":
            text = " ".join(r["answer"].split())[:90].replace("|", "/")
            lines.append(f"| {r['model']} | {_system(r)} | {r['qid']} | {r.get('finish_reason')} | "
                         f"{r.get('completion_tokens')} | {text} |")  # fmt: skip
    return lines


def write_report(results: dict, path: Path) -> None:
    everything = results["records"]
    records = [r for r in everything if r["kind"] != "free"]
    m = results.get("machine", {})
    runs = results.get("runs", [])
    out = [
        "# Answer accuracy: docqa (whole document, segments) against RAG on the same models",
        "",
        f"`python -m bench.quality` at {results.get('rev', '?')}, one run on this machine: {m.get('cpu', '?')}, "
        f"{m.get('cores', '?')} cores, shared with other work (load averages below), `nice -n 5`, "
        f"{results.get('args', {}).get('threads', 2)} threads. Arguments: `{results.get('args', {})}`.",
        "",
        "Each cell: share right, Wilson 95 % interval, n. Sets and scoring: bench/quality_sets.py, bench/score.py. "
        "Set columns count answerable questions; `not-in-doc refused` is the share of questions whose answer is "
        "not in the document that were answered with a refusal (higher is better). TTFT and seconds per question "
        "are medians over the answers each system computed (docqa from the saved state; RAG prefills its "
        "prompt for every question).",
        "",
        "## Accuracy",
        "",
        *accuracy_table(records),
        "",
        "## Detail",
        "",
        "Needles by depth (needles and long sets); `answerable refused`: answerable questions answered with a "
        "refusal (lower is better); `needle cited`: right needle answers whose citation spans contain the "
        "needle's value (and for pdf10 its page); `memory (cf)`: counterfactual answers that gave the real-world "
        "fact; `canary`: injection answers in which the planted canary appeared (must be 0); repetition / length "
        "stops: answers ended by the loop guard (spec/repetition.py) / by max_tokens.",
        "",
        *detail_table(records),
        "",
        "## The README's example questions (crazyones.pdf, max_tokens 256)",
        "",
        *examples_table(everything),
        "",
        "## Time to ready (upload to ready, prefill included)",
        "",
        *ready_table(results),
        "",
        "## Runs",
        "",
        "| model | system | minutes | load before | load after |",
        "|---|---|---|---|---|",
        *[
            f"| {r['model']} | {r['system']} | {r['seconds'] / 60:.1f} | "
            f"{' '.join(f'{x:.1f}' for x in r['load_before'])} | {' '.join(f'{x:.1f}' for x in r['load_after'])} |"
            for r in runs
        ],
        "",
    ]
    extra = results.get("notes")
    if extra:
        out += ["## Notes", "", *extra, ""]
    path.write_text("\n".join(out))


def merge(target: Path, others: list[Path]) -> dict:
    """Fold the records of ``others`` (runs of bench/quality.py side by side, each with its own
    ``--out``) into ``target``'s JSON; a (model, system, question) already there is kept."""
    import json

    results = json.loads(target.read_text())
    have = {(r["model"], r["system"], r.get("mode"), r["qid"]) for r in results["records"]}
    for path in others:
        extra = json.loads(path.read_text())
        records = extra["records"]
        results["records"] += [r for r in records if (r["model"], r["system"], r.get("mode"), r["qid"]) not in have]
        for key, docs in extra.get("ready", {}).items():
            results["ready"].setdefault(key, {}).update(docs)
        results["runs"] += [{**r, "worker": path.stem} for r in extra.get("runs", [])]
    target.write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":  # python -m bench.quality_report bench/results/quality.json [other.json ...]
    import sys

    main_json, *rest = (Path(a) for a in sys.argv[1:])
    write_report(merge(main_json, rest), main_json.with_suffix(".md"))
