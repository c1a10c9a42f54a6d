"""Ways for the model to judge whether a quote answers the question, compared on the same quotes (issue
48; bench/results/quality.md): each question is answered quote-first without a judgment (``--mode``,
bench/rag.py ``mode_params``), and the passage the quote is in is then judged three ways, each read as
the probability of yes against no:

* ``iso``: a short conversation of its own with the question and the passage, without the document;
* ``fewshot``: the same, after three worked examples written here (a passage that answers, one about
  another thing, one that lacks the asked detail);
* ``restate``: in the answer's own sequence after the quote (the document still in it), a turn that
  restates the passage and the question (what the server does: ingest/prompt.py ``quote_judge``).

JSONL records (question, quote, passage, whether it holds a gold answer, each judge's probability),
resumable. ``python -m bench.judges --help``."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from bench.rag import Whole
from bench.score import score, squad_norm
from bench.sets import build_sets
from ingest.extract import extract
from ingest.prompt import single_turn
from runtime.models import model_path

ISO = "Question: {q}\n\nPassage: {p}\n\nDoes the passage answer the question? Reply with yes or no."
FEWSHOT = (
    "Decide whether the passage answers the question. Reply with yes or no.\n\n"
    "Passage: The bridge over the Lenne was finished in 1887 by the engineer Karl Hauff.\n"
    "Question: Who finished the bridge over the Lenne?\nReply: yes\n\n"
    "Passage: The bridge over the Lenne was finished in 1887 by the engineer Karl Hauff.\n"
    "Question: Who designed the bridge over the Rhine?\nReply: no\n\n"
    "Passage: The bridge over the Lenne was finished in 1887 by the engineer Karl Hauff.\n"
    "Question: When did work on the bridge over the Lenne begin?\nReply: no\n\n"
    "Passage: {p}\nQuestion: {q}\nReply:"
)
RESTATE = (
    "Read only this passage, not the rest of the document.\n\nPassage: {p}\n\nQuestion: {q}\n\n"
    "Does the passage answer the question? Reply with yes or no."
)


def ingest_cached(w: Whole, text: str, model: str) -> tuple[int, float]:
    """Whole.ingest, with the prefix's state kept on disk (bench/.build/states) between runs."""
    import hashlib

    t0 = time.perf_counter()
    w.text, w.demos = text, []
    w.prefix = w.layout.document_prefix(w.model, text)
    key = hashlib.sha256(w.prefix.tobytes() + model.encode()).hexdigest()[:24]
    path = Path("bench/.build/states") / f"{key}.bin"
    if path.is_file():
        w.state = path.read_bytes()
        return len(w.prefix), time.perf_counter() - t0
    w.ctx.clear()
    w.ctx.prefill(w.prefix, 0)
    w.state = w.ctx.state_get(0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(w.state)
    return len(w.prefix), time.perf_counter() - t0


def open_whole(doc, path: Path, model: str, threads: int) -> Whole:
    """A Whole reader of ``doc``'s extracted text, its prefix state read back or prefilled and kept
    (:func:`ingest_cached`), sized for the text; prints its tokens and seconds."""
    text = extract(doc.data if doc.data is not None else doc.text.encode()).text
    w = Whole(path, threads, n_ctx=min(32768, 1024 + 256 * (len(text) // 900 + 4)))
    n, s = ingest_cached(w, text, model)
    print(f"{doc.doc_id}: {n} tokens in {s:.0f} s", flush=True)
    return w


def p_yes_row(row: np.ndarray, yes, no) -> float:
    row = row.astype(np.float64)
    top = row.max()
    py, pn = np.exp(row[yes] - top).sum(), np.exp(row[no] - top).sum()
    return float(py / (py + pn))


def iso(w: Whole, text: str, yes, no) -> float:
    ids = w.model.tokenize(single_turn(w.model, text), parse_special=True, add_bos=w.model.add_bos)
    w.ctx.clear()
    w.ctx.prefill(ids.astype(np.int32), 0)
    return p_yes_row(w.ctx.logits()[-1], yes, no)


def restate(w: Whole, question: str, quote: str, passage: str, yes, no) -> float:
    m, lay = w.model, w.layout
    suffix = lay.question_suffix(m, question, quote=True)
    extra = m.tokenize(f" {quote}\n" + (lay.next_turn or "\n") + RESTATE.format(p=passage, q=question) + lay.tail,
                       parse_special=True)  # fmt: skip
    w.ctx.clear()
    w.ctx.state_set(w.state, 0)
    w.ctx.prefill(np.concatenate([suffix, extra]).astype(np.int32), len(w.prefix))
    return p_yes_row(w.ctx.logits()[-1], yes, no)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="qwen-coder-1.5b")
    p.add_argument("--sets", default="squad")
    p.add_argument("--sample", type=int, default=208)
    p.add_argument("--seed", type=int, default=48)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--mode", default="quote:t=none/k=3")
    p.add_argument("--out", type=Path, default=Path("bench/results/tmp/judges.jsonl"))
    args = p.parse_args()
    done = set()
    if args.out.is_file():
        done = {json.loads(line)["qid"] for line in args.out.read_text().splitlines() if line.strip()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    path = model_path(args.model, Path("/tmp/docqa-models"))
    rng = np.random.default_rng(args.seed)
    for doc in build_sets(34, tuple(args.sets.split(","))):
        order = rng.permutation(len(doc.items))[: args.sample].tolist()
        items = [doc.items[k] for k in order if doc.items[k].qid not in done and doc.items[k].kind != "free"]
        if not items:
            continue
        w = open_whole(doc, path, args.model, args.threads)
        yes, no = w.quote_tokens.yes, w.quote_tokens.no
        for item in items:
            t0 = time.perf_counter()
            r = w.ask(item.question, item.max_tokens, args.mode)
            rec = {"qid": item.qid, "set": doc.set, "doc": doc.doc_id, "kind": item.kind, "question": item.question,
                   "gold": item.gold, "mode": args.mode, "answer": r.text, "quote": r.quote,
                   "passage": r.quote_sentence, "p_none": r.p_none}  # fmt: skip
            rec |= score(item, r.text, r.quote_sentence)
            if item.kind == "squad" and r.quote_sentence:
                golds = [f" {squad_norm(g[0])} " for g in item.accept]
                rec["passage_gold"] = any(g in f" {squad_norm(r.quote_sentence)} " for g in golds)
            if r.quote_sentence:
                rec["judges"] = {
                    "iso": iso(w, ISO.format(q=item.question, p=r.quote_sentence), yes, no),
                    "fewshot": iso(w, FEWSHOT.format(q=item.question, p=r.quote_sentence), yes, no),
                    "restate": restate(w, item.question, r.quote or "", r.quote_sentence, yes, no),
                }
            rec["seconds"] = time.perf_counter() - t0
            with args.out.open("a") as f:
                f.write(json.dumps(rec) + "\n")
            j = rec.get("judges", {})
            print(f"{item.qid} {item.kind} {rec['seconds']:.0f}s right={rec['right']} pg={rec.get('passage_gold')} "
                  + " ".join(f"{k}={v:.2f}" for k, v in j.items()), flush=True)  # fmt: skip
        w.close()


if __name__ == "__main__":
    main()
