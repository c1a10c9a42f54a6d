"""More of the model's own signals for "does the chosen passage answer the question?" (issue 48), read
offline for the passages the served form chose (records of bench/answer_modes.py), and scored against
the served judgment (bench/results/quality.md, 7 December):

* ``served``: the served judgment's probability of yes (ingest/prompt.py ``passage_judge``, the passage
  then the question, "Does the passage answer the question?"), read again here;
* ``qlike``: in that same prompt, at no extra cost, the log-probability of each of the question's
  tokens after the passage: a detail of the question the passage does not hold should surprise the model;
* ``pmi``: the question's log-probabilities as the reply to "Write one question that this passage
  answers." after the passage, minus those after "Write one question about history." (no passage);
* ``stmt``: the probability of yes that the passage states the recorded answer to exactly this question.

``python -m bench.judge_signals RECORDS.json ... --out OUT.jsonl [--signals qlike,pmi,stmt]`` writes one
JSON line per record with a chosen passage (resumable); ``--report OUT.jsonl`` prints, per set, each
signal's AUC (answerable against unanswerable/absent) and the served threshold OR a signal threshold
chosen on one half of SQuAD and applied to the other half and to the other sets.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from bench.score import fmt_rate
from ingest.prompt import JUDGE_QUESTION_TOKENS, _judge_frame, passage_judge, single_turn
from runtime.config import ContextConfig
from runtime.context import Context
from runtime.model import Model
from runtime.models import model_path
from spec.quote import THRESHOLD, QuoteTokens, mass

GENERATE = "Passage: {p}\n\nWrite one question that this passage answers."
UNCONDITIONED = "Write one question about history."
STATEMENT = (
    "Passage: {p}\n\nQuestion: {q}\nProposed answer: {a}\n\nDoes the passage state this answer to exactly "
    "this question, with every detail of the question matching? Reply with yes or no."
)


class Reader:
    """The model in a 1k context of its own, read one prompt at a time."""

    def __init__(self, model: Model, threads: int) -> None:
        self.model = model
        config = ContextConfig(1024, 512, 512, threads, threads, flash_attn="off")
        self.ctx = Context(model, config)
        self.tokens = QuoteTokens.of(lambda s: model.tokenize(s, parse_special=False), "none", "yes", "no")

    def rows(self, ids: np.ndarray, first: int) -> np.ndarray:
        """Logits (float64 [len(ids) - first + 1, n_vocab]) after ids[first - 1:], each row the next
        token's."""
        self.ctx.clear()
        if first > 1:
            self.ctx.prefill(ids[: first - 1], 0)
        self.ctx.decode(ids[first - 1 :], first - 1, outputs="all")
        return self.ctx.logits().astype(np.float64)

    def p_yes(self, row: np.ndarray) -> float:
        yes, no = mass(row, self.tokens.yes), mass(row, self.tokens.no)
        return yes / (yes + no)

    def turn(self, text: str) -> np.ndarray:
        m = self.model
        ids = m.tokenize(single_turn(m, text), parse_special=True)
        lead = [m.bos] if m.add_bos and (not len(ids) or ids[0] != m.bos) else []
        return np.asarray([*lead, *ids], np.int32)

    def reply_logprobs(self, user: str, reply: str) -> list[float]:
        head = self.turn(user)
        said = np.asarray(self.model.tokenize(reply, parse_special=False), np.int32)
        lg = self.rows(np.concatenate([head, said]), len(head))[: len(said)]
        return _logprobs(lg, said)


def _logprobs(lg: np.ndarray, ids: np.ndarray) -> list[float]:
    top = lg.max(1, keepdims=True)
    lse = np.log(np.exp(lg - top).sum(1)) + top[:, 0]
    return (lg[np.arange(len(ids)), ids] - lse).tolist()


def signals(r: Reader, question: str, passage: str, answer: str, which: set[str]) -> dict:
    m = r.model
    ids = passage_judge(m, question, passage)
    _, (_, ask) = _judge_frame(m)
    asked = np.asarray(m.tokenize(" " + question, parse_special=False)[:JUDGE_QUESTION_TOKENS], np.int32)
    first = len(ids) - len(ask) - len(asked)
    lg = r.rows(ids, first)
    out = {"served": r.p_yes(lg[-1])}
    if "qlike" in which:
        out["qlike"] = _logprobs(lg[: len(asked)], asked)
    if "pmi" in which:
        cond = r.reply_logprobs(GENERATE.format(p=passage), question)
        out["pmi"] = np.subtract(cond, r.reply_logprobs(UNCONDITIONED, question)).tolist()
    if "stmt" in which:
        turn = r.turn(STATEMENT.format(p=passage, q=question, a=answer))
        out["stmt"] = r.p_yes(r.rows(turn, len(turn))[-1])
    return out


def auc(score: np.ndarray, positive: np.ndarray) -> float:
    pos, neg = score[positive], score[~positive]
    wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(wins / (len(pos) * len(neg)))


def features(row: dict) -> dict[str, float]:
    out = {"served": row["served"]}
    if "qlike" in row:
        out |= {"qlike_mean": float(np.mean(row["qlike"])), "qlike_min": float(np.min(row["qlike"]))}
    if "pmi" in row:
        out |= {"pmi_mean": float(np.mean(row["pmi"])), "pmi_min": float(np.min(row["pmi"]))}
    if "stmt" in row:
        out["stmt"] = row["stmt"]
    return out


def report(path: Path) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    sets = sorted({r["set"] for r in rows})
    for name in sets:
        part = [r for r in rows if r["set"] == name]
        y = np.array([r["answerable"] for r in part])
        if 0 < y.sum() < len(y):
            feats = {k: np.array([features(r)[k] for r in part]) for k in _common(part)}
            aucs = ", ".join(f"{k} {auc(v, y):.3f}" for k, v in feats.items())
            print(f"{name}: {len(part)} ({int(y.sum())} answerable) AUC {aucs}")
    squad = [r for r in rows if r["set"] == "squad"]
    for k in _common(squad):
        if k in ("served", "stmt"):
            continue
        for half in (0, 1):
            tune = squad[half::2]
            t = _threshold(tune, k)
            cells = [f"tuned on SQuAD half {half}: {k} < {t:.2f}"]
            others = ((s, [r for r in rows if r["set"] == s]) for s in sets if s != "squad")
            for name, part in (("other half", squad[1 - half :: 2]), *others):
                if k not in _common(part):
                    continue
                a, na, u, nu = _refused(part, k, t)
                cells.append(f"{name} answerable refused {fmt_rate(a, na)}, unanswerable {fmt_rate(u, nu)}")
            print("; ".join(cells))
    for name in sets:
        part = [r for r in rows if r["set"] == name]
        a, na, u, nu = _refused(part, "served", -np.inf)
        rates = f"answerable refused {fmt_rate(a, na)}, unanswerable {fmt_rate(u, nu)}"
        print(f"{name}, the served judgment alone (< {THRESHOLD}): {rates}")


def _common(rows: list[dict]) -> list[str]:
    """The signals every row of ``rows`` has."""
    return [k for k in features(rows[0]) if all(k in features(r) for r in rows)]


def _refused(rows: list[dict], k: str, t: float) -> tuple[int, int, int, int]:
    """Refused by the served judgment (the recorded probability below THRESHOLD) or by ``k`` below ``t``."""
    y = np.array([r["answerable"] for r in rows], bool)
    ref = np.array([(r["p_yes_rec"] or 0.0) < THRESHOLD or features(r)[k] < t for r in rows], bool)
    return int(ref[y].sum()), int(y.sum()), int(ref[~y].sum()), int((~y).sum())


def _threshold(rows: list[dict], k: str) -> float:
    """The highest threshold of ``k`` whose gate, with the served judgment, refuses at most 10 % of the
    answerable questions of ``rows``."""
    best = -np.inf
    for t in sorted({features(r)[k] for r in rows}):
        a, na, _, _ = _refused(rows, k, t)
        if a <= 0.10 * na:
            best = t
    return best


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("records", nargs="*", type=Path)
    p.add_argument("--out", type=Path, default=Path("bench/results/judge-signals/qwen-coder-1.5b.jsonl"))
    p.add_argument("--signals", default="qlike,pmi,stmt")
    p.add_argument("--model", default="qwen-coder-1.5b")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--report", type=Path)
    args = p.parse_args()
    if args.report:
        return report(args.report)
    done = set()
    if args.out.is_file():
        done = {json.loads(line)["qid"] for line in args.out.read_text().splitlines() if line.strip()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    reader = Reader(Model(model_path(args.model, Path("/tmp/docqa-models")), n_gpu_layers=0), args.threads)
    which = set(args.signals.split(","))
    with args.out.open("a") as out:
        for path in args.records:
            for rec in json.loads(path.read_text())["records"]:
                if rec["qid"] in done or not rec.get("quote_sentence"):
                    continue
                row = {"qid": rec["qid"], "set": rec["set"], "answerable": rec["kind"] != "refusal",
                       "p_yes_rec": rec["p_yes"], "question": rec["question"]}  # fmt: skip
                row |= signals(reader, rec["question"], rec["quote_sentence"], rec["answer"], which)
                out.write(json.dumps(row) + "\n")
                out.flush()


if __name__ == "__main__":
    main()
