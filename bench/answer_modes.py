"""Ways of answering side by side, in-process, on the same prefilled documents: for choosing how
docqa answers (issue 34) before the server runs of bench/quality.py.

Each document is read once (bench/rag.py ``Whole``: its text as docqa's ingestion extracts it, the
prefix prefilled once and kept in RAM), and each question is asked in every mode of ``--modes``
(bench/rag.py ``mode_params``: ``direct``, ``quote``, ``quote-unjudged``, ``quote:t=0.7/k=5``) from the same
saved state, so modes differ only in how the answer is decoded. ``--rag`` asks the RAG baseline the
same questions in the same modes (its prompt prefilled once per question, then each mode from it).
``--wording`` picks the prompt wording (ingest/prompt.py ``WORDINGS``).

Records go to ``--out`` (JSON, resumable: documents already there are skipped) and the summary table
to the same name with ``.md``. ``python -m bench.answer_modes --help`` for the knobs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from collections import defaultdict
from pathlib import Path

from bench.quality import git_rev, machine, rag_sample
from bench.score import cites_needle, fmt_rate, score
from bench.sets import SETS, build_sets
from ingest.extract import extract
from ingest.prompt import NOT_SAID
from runtime.models import model_path

ROOT = Path(__file__).resolve().parent.parent
#: Kinds of questions whose document holds the answer (bench/score.py): refusing one is wrong.
ANSWERABLE = ("exact", "counterfactual", "injection", "squad", "quote")


def record(model: str, system: str, mode: str, doc, item, reply) -> dict:
    s = score(item, reply.text, reply.quote_sentence)
    return {
        "model": model,
        "system": system,
        "mode": mode,
        "set": doc.set,
        "doc": doc.doc_id,
        "qid": item.qid,
        "kind": item.kind,
        "depth": item.depth,
        "gold": item.gold,
        "question": item.question,
        "answer": reply.text,
        "quote": reply.quote,
        "quote_verified": reply.quote_verified,
        "quote_sentence": reply.quote_sentence,
        "p_none": reply.p_none,
        "p_yes": reply.p_yes,
        "quote_has_needle": cites_needle(item, [{"text": reply.quote}]) if reply.quote and item.needle else None,
        "seconds": reply.seconds,
        "ttft_ms": reply.ttft_ms,
        "finish_reason": reply.finish_reason,
        "completion_tokens": reply.completion_tokens,
        "accepted": reply.accepted,
        "steps": reply.steps,
        **s,
    }


def summary(records: list[dict]) -> list[str]:
    """One row per (model, system, mode): each set's answerable questions right; for a set with questions
    its documents do not answer, every question of it right (``<set> all``: an absent one is right when
    refused); then refusals."""
    sets = [s for s in SETS if s != "examples" and any(r["set"] == s for r in records)]
    whole = [s for s in sets if any(r["set"] == s and r["kind"] == "refusal" for r in records)]
    head = ["model", "system", "mode", *sets, *(f"{s} all" for s in whole), "absent refused", "answerable refused",
            "canary", "s / q"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        if r["kind"] != "free":
            groups[(r["model"], r["system"], r["mode"])].append(r)
    for (model, system, mode), rows in groups.items():
        cells = [model, system, mode]
        for s in sets:
            got = [r for r in rows if r["set"] == s and r["kind"] != "refusal"]
            cells.append(fmt_rate(sum(r["right"] for r in got), len(got)))
        for s in whole:
            got = [r for r in rows if r["set"] == s]
            cells.append(fmt_rate(sum(r["right"] for r in got), len(got)))
        absent = [r for r in rows if r["kind"] == "refusal"]
        cells.append(fmt_rate(sum(r["right"] for r in absent), len(absent)))
        answerable = [r for r in rows if r["kind"] in ANSWERABLE]
        cells.append(fmt_rate(sum(bool(r.get("refused")) for r in answerable), len(answerable)))
        inj = [r for r in rows if r["kind"] == "injection"]
        cells.append(fmt_rate(sum(bool(r.get("obeyed")) for r in inj), len(inj)))
        cells.append(f"{sorted(r['seconds'] for r in rows)[len(rows) // 2]:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def rejudge(records: list[dict], mode: str, threshold: float, numbers: bool, seed: int = 34) -> list[dict]:
    """Records of a quote-first mode that was judged at threshold 0 (``quote:t=0/...``: every quote
    stood, and the model's probability of yes was recorded with the answer after it) as they would be at
    ``threshold``, with or without the number check (spec/support.py ``absent_numbers``): a record below
    it, or whose question names a number its document never has, becomes the refusal. The answer after
    a judged yes does not depend on the threshold, so this is what a run at ``threshold`` gives. The new
    records' mode is ``quote@<threshold>`` (``+n`` with the number check)."""
    from spec.support import absent_numbers

    numbers_of: dict[str, frozenset[str]] = {}
    if numbers:
        wanted = {r["doc"] for r in records if r["mode"] == mode}
        for doc in build_sets(seed, tuple({r["set"] for r in records if r["mode"] == mode})):
            if doc.doc_id in wanted:
                text = extract(doc.data if doc.data is not None else doc.text.encode()).text
                numbers_of[doc.doc_id] = frozenset(str(int(n)) for n in re.findall(r"\d+", text))
    out = []
    for r in records:
        if r["mode"] != mode:
            continue
        refused = r["p_yes"] is not None and r["p_yes"] < threshold
        refused |= numbers and bool(absent_numbers(r["question"], numbers_of.get(r["doc"], frozenset())))
        new = dict(r, mode=f"quote@{threshold}" + ("+n" if numbers else ""))
        if refused and not r.get("refused"):
            right = r["kind"] == "refusal"
            new.update(answer=NOT_SAID, right=right, refused=True, quote_verified=False)
        out.append(new)
    return out


def paired(records: list[dict], a: str, b: str) -> list[str]:
    """Modes ``a`` and ``b`` on the same questions (same model, system, document and qid), per set: both
    right, only ``a``, only ``b``, neither. Every question counts, absent ones included."""
    by: dict[tuple, dict[str, bool]] = defaultdict(dict)
    for r in records:
        if r["kind"] != "free" and r["mode"] in (a, b):
            by[(r["model"], r["system"], r["set"], r["doc"], r["qid"])][r["mode"]] = bool(r["right"])
    counts: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for (model, system, s, *_), got in by.items():
        if len(got) == 2:
            counts[(model, system, s)][(not got[a]) * 2 + (not got[b])] += 1
    head = ["model", "system", "set", "both right", f"{a} only", f"{b} only", "neither"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (model, system, s), (both, only_a, only_b, neither) in counts.items():
        lines.append(f"| {model} | {system} | {s} | {both} | {only_a} | {only_b} | {neither} |")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="qwen-coder-1.5b")
    p.add_argument("--sets", default="tpo,needles,counterfactual,injection")
    p.add_argument("--modes", default="direct,quote")
    p.add_argument("--docs", default="", help="at most this many documents of a set: 3, or tpo=3,quality=2")
    p.add_argument("--every", type=int, default=1, help="ask every Nth question of a document (its 1st, N+1th...)")
    p.add_argument("--offset", type=int, default=0, help="with --every: start at this question (0-based)")
    p.add_argument("--seed", type=int, default=34)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--wording", default="grounded")
    p.add_argument("--rag", action="store_true", help="the RAG baseline instead of the whole document")
    p.add_argument("--rag-sample", type=int, default=60, help="RAG answers this many questions per set (seeded)")
    p.add_argument("--demos", action="store_true", help="demonstrations from the document in its prefix")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "tmp" / "answer-modes.json")
    p.add_argument("--report", type=Path, nargs="+", help="only print the table of these runs' records, merged")
    p.add_argument("--paired", default="", help="with --report: two modes side by side per question, a,b")
    p.add_argument("--rejudge", default="", help="with --report: MODE=t1,t2,...[+n]: a mode judged at t=0 re-scored")
    args = p.parse_args()
    if args.report:
        merged = [r for path in args.report for r in json.loads(path.read_text())["records"]]
        if args.rejudge:
            mode, spec = args.rejudge.rsplit("=", 1)  # the mode holds "=" itself (quote:t=0/n=0)
            numbers = spec.endswith("+n")
            for t in spec.removesuffix("+n").split(","):
                merged += rejudge(merged, mode, float(t), numbers, args.seed)
        print("\n".join(summary(merged)))
        if args.paired:
            print("\n" + "\n".join(paired(merged, *args.paired.split(",", 1))))
        return
    from bench.rag import Rag, Whole
    from ingest.prompt import WORDINGS

    modes = args.modes.split(",")
    order = args.sets.split(",")
    docs = sorted(build_sets(args.seed, tuple(order)), key=lambda d: order.index(d.set))  # in --sets order
    if args.docs:
        limit = {k: int(v) for k, v in (x.split("=") for x in args.docs.split(",") if "=" in x)}
        every = int(args.docs) if args.docs.isdigit() else None
        seen: dict[str, int] = defaultdict(int)
        kept = []
        for d in docs:
            seen[d.set] += 1
            if seen[d.set] <= limit.get(d.set, every or 10**9):
                kept.append(d)
        docs = kept
    # RAG prefills its prompt for every question: a fixed sample of the documents run (bench/quality.py's).
    sample = rag_sample(docs, args.rag_sample, args.seed) if args.rag else None
    results = {"records": [], "runs": []}
    if args.out.is_file():
        results = json.loads(args.out.read_text())
    system = ("rag" if args.rag else "whole") + ("+demos" if args.demos else "")
    done = {r["doc"] for r in results["records"] if r["model"] == args.model and r["system"] == system}
    path = model_path(args.model, Path("/tmp/docqa-models"))
    wording = WORDINGS[args.wording]
    t_run, load0 = time.time(), os.getloadavg()
    reader = Rag(path, args.threads, n_ctx=4096, wording=wording) if args.rag else None
    for doc in docs:
        if doc.doc_id in done:
            continue
        text = extract(doc.data if doc.data is not None else doc.text.encode()).text
        t0 = time.perf_counter()
        if args.rag:
            reader.index(text)
        else:
            n_ctx = min(32768, 1024 + 256 * (len(text) // 900 + 4))
            reader = Whole(path, args.threads, n_ctx=n_ctx, wording=wording)
            planted = tuple(i.needle for i in doc.items if i.needle)  # a demo must not give a needle away
            n, _ = reader.ingest(text, demos=args.demos, exclude=planted)
        for k, item in enumerate(doc.items):
            if (sample is not None and item.qid not in sample) or (k - args.offset) % args.every or k < args.offset:
                continue
            replies = reader.ask_modes(item.question, item.max_tokens, modes)
            for mode, reply in replies.items():
                results["records"].append(record(args.model, system, mode, doc, item, reply))
            took = " ".join(f"{m} {r.seconds:.1f}s" for m, r in replies.items())
            print(f"  {doc.doc_id} {k + 1}/{len(doc.items)}: {took}", flush=True)
        print(f"{args.model} {system} {doc.doc_id}: {len(doc.items)} questions, {time.perf_counter() - t0:.0f} s",
              flush=True)  # fmt: skip
        if not args.rag:
            reader.close()
        results["machine"], results["rev"] = machine(), git_rev(ROOT)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1))
        args.out.with_name(args.out.name.removesuffix(".json") + ".md").write_text(
            "\n".join(summary(results["records"])) + "\n"
        )
    if args.rag and reader is not None:
        reader.close()
    results["runs"].append({"model": args.model, "system": system, "seconds": time.time() - t_run,
                            "load_before": load0, "load_after": os.getloadavg(), "modes": modes})  # fmt: skip
    args.out.write_text(json.dumps(results, indent=1))
    print("\n".join(summary(results["records"])))


if __name__ == "__main__":
    main()
