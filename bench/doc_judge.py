"""Two signals for a question that no single passage is judged to answer (issue 48), each read from the
model in the answer's own turn, the document's saved state restored (about fifty tokens per question;
nothing grows with the document's length but the state restore):

* ``doc``: the question and one line asking whether the document above answers it (:data:`DOC_JUDGE`);
  the probability of yes against no;
* ``refuse``: the probability that the direct answer is exactly the refusal sentence (teacher-forced).

Scored against the served form's records (bench/answer_modes.py): a refusal for want of a supporting
passage becomes the direct answer when the signal allows. Neither was kept (bench/results/quality.md,
6 December, night): ``doc`` says no to TPO's four-option questions more often than to absent facts, ``refuse``
lets TPO through only where it lets the needle sets' absent facts through too.
``python -m bench.doc_judge --signal doc|refuse [--stem]`` writes JSONL records (qid, set, kind,
p_doc), resumable; ``--report RECORDS --served ... --direct ...`` prints the policies' rates.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from bench.judges import open_whole, p_yes_row
from bench.rag import Whole
from bench.score import fmt_rate
from bench.sets import build_sets
from ingest.prompt import NOT_SAID
from runtime.models import model_path
from spec.quote import THRESHOLD

#: Asked after the question, the document read: whether the document as a whole answers it.
DOC_JUDGE = "\n\nDoes the document above answer the question? Reply with yes or no."


def p_doc(w: Whole, question: str, yes, no) -> float:
    """The model's probability of yes that the document in ``w``'s saved state answers ``question``."""
    suffix = w.layout.question_suffix(w.model, question + DOC_JUDGE)
    w.ctx.clear()
    w.ctx.state_set(w.state, 0)
    w.ctx.prefill(suffix.astype(np.int32), len(w.prefix))
    return p_yes_row(w.ctx.logits()[-1], yes, no)


def p_refuse(w: Whole, question: str) -> float:
    """The model's probability of answering ``question`` directly with exactly the refusal sentence
    (NOT_SAID, teacher-forced: the product of its tokens' probabilities), the document's state restored."""
    suffix = w.layout.question_suffix(w.model, question)
    said = w.model.tokenize(w.layout.answer_lead + NOT_SAID, parse_special=False)
    rows = np.concatenate([suffix, said]).astype(np.int32)
    w.ctx.clear()
    w.ctx.state_set(w.state, 0)
    w.ctx.decode(rows, len(w.prefix), outputs="all")
    logits = w.ctx.logits()[len(suffix) - 1 : -1].astype(np.float64)  # the rows that predict `said`
    logp = logits - logits.max(axis=1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(axis=1, keepdims=True))
    return float(np.exp(logp[np.arange(len(said)), said].sum()))


def measure(args) -> None:
    done = set()
    if args.out.is_file():
        done = {json.loads(line)["qid"] for line in args.out.read_text().splitlines() if line.strip()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    path = model_path(args.model, Path("/tmp/docqa-models"))
    limit = {k: int(v) for k, v in (x.split("=") for x in args.docs.split(",") if "=" in x)}
    seen: dict[str, int] = defaultdict(int)
    for doc in build_sets(args.seed, tuple(args.sets.split(","))):
        seen[doc.set] += 1
        if seen[doc.set] > limit.get(doc.set, 10**9):
            continue
        items = [i for i in doc.items if i.qid not in done]
        if not items:
            continue
        w = open_whole(doc, path, args.model, args.threads)
        yes, no = w.quote_tokens.yes, w.quote_tokens.no
        with args.out.open("a") as f:
            for item in items:
                t0 = time.perf_counter()
                q = item.question.split("\nA.")[0] if args.stem else item.question
                p = p_doc(w, q, yes, no) if args.signal == "doc" else p_refuse(w, q)
                rec = {"qid": item.qid, "set": doc.set, "doc": doc.doc_id, "kind": item.kind, "p_doc": p,
                       "seconds": time.perf_counter() - t0}  # fmt: skip
                f.write(json.dumps(rec) + "\n")
                f.flush()
                print(f"{item.qid} {item.kind} p_doc={p:.2f} {rec['seconds']:.1f}s", flush=True)
        w.close()


def _records(paths: list[Path]) -> list[dict]:
    return [r for path in paths for r in json.loads(path.read_text())["records"] if r["model"] == "qwen-coder-1.5b"]


def _refused(r: dict) -> bool:
    return bool(r.get("refused")) or (r["kind"] == "mc" and r["answer"].strip().startswith(NOT_SAID[:-1]))


def policy(served: dict, direct: dict, p: dict, t_doc: float, t_gate: float = 0.0) -> list[dict]:
    """Each question's record under the policy: an answer whose passages were judged (``served``, at the
    served threshold with the number check) stands when its doc judgment reaches ``t_gate``; a refusal
    for want of a supporting passage (not the number check's) becomes the ``direct`` answer when its
    doc judgment reaches ``t_doc``. Questions without a doc judgment or a needed direct answer are left
    out."""
    out = []
    for qid, r in served.items():
        if qid not in p:
            continue
        if not _refused(r):
            out.append(r if p[qid] >= t_gate else dict(r, right=r["kind"] == "refusal", refused=True))
        elif r.get("number_refused") or p[qid] < t_doc:
            out.append(r)
        elif qid in direct:
            out.append(direct[qid])
    return out


def rates(rows: list[dict]) -> str:
    answerable = [r for r in rows if r["kind"] != "refusal"]
    absent = [r for r in rows if r["kind"] == "refusal"]
    return " | ".join(
        [
            fmt_rate(sum(bool(r["right"]) for r in answerable), len(answerable)),
            fmt_rate(sum(_refused(r) for r in answerable), len(answerable)),
            fmt_rate(sum(_refused(r) for r in absent), len(absent)),
        ]
    )


def report(args) -> None:
    from bench.answer_modes import rejudge

    p = {}
    for path in args.report:
        p |= {r["qid"]: r["p_doc"] for r in map(json.loads, path.read_text().splitlines()) if r}
    served: dict[str, dict] = {}
    raw = _records(args.served)
    for mode in {r["mode"] for r in raw}:
        rows = [r for r in raw if r["mode"] == mode]
        if mode.startswith("quote:t=0"):  # judged at 0, re-scored at the served threshold
            base = rejudge(rows, mode, THRESHOLD, numbers=False)
            checked = rejudge(rows, mode, THRESHOLD, numbers=True)
            rows = [dict(c, number_refused=_refused(c) and not _refused(b)) for b, c in zip(base, checked, strict=True)]
        served |= {r["qid"]: r for r in rows}
    for r in served.values():
        r.setdefault("number_refused", False)
    direct = {r["qid"]: r for r in _records(args.direct) if r["mode"] == "direct"}
    by_set: dict[str, dict] = defaultdict(dict)
    for qid, r in served.items():
        by_set[r["set"]][qid] = r
    print("| policy | set | answerable right | answerable refused | absent refused |\n|---|---|---|---|---|")
    grid = [(1.01, 0.0), *((t, 0.0) for t in args.t_doc), *((t, g) for t in args.t_doc for g in args.t_gate)]
    for t_doc, t_gate in grid:
        for s, rows in by_set.items():
            got = policy(rows, direct, p, t_doc, t_gate)
            name = "served" if t_doc > 1 else f"doc >= {t_doc}" + (f", gate {t_gate}" if t_gate else "")
            print(f"| {name} | {s} n={len(got)} | {rates(got)} |")
    for s in by_set:
        ps = sorted(p[q] for q in by_set[s] if q in p)
        if ps:
            print(s, "p_doc deciles", [round(ps[int(k * (len(ps) - 1) / 10)], 2) for k in range(11)])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--report", type=Path, nargs="+", help="score these doc-judge records against --served")
    p.add_argument("--served", type=Path, nargs="*", default=[])
    p.add_argument("--direct", type=Path, nargs="*", default=[])
    p.add_argument("--t-doc", type=float, nargs="*", default=[0.5, 0.6, 0.7, 0.8, 0.9])
    p.add_argument("--t-gate", type=float, nargs="*", default=[])
    p.add_argument("--model", default="qwen-coder-1.5b")
    p.add_argument("--sets", default="tpo,squad,real-b,needles-c")
    p.add_argument("--docs", default="tpo=4")
    p.add_argument("--seed", type=int, default=34)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--signal", choices=("doc", "refuse"), default="doc", help="p_doc: the doc judgment, or p(refusal)")
    p.add_argument("--stem", action="store_true", help="a four-option question asked without its options")
    p.add_argument("--out", type=Path, default=Path("bench/results/tmp/doc-judge.jsonl"))
    args = p.parse_args()
    report(args) if args.report else measure(args)


if __name__ == "__main__":
    main()
