"""The multiple-choice reading sets of bench/quality.py, read from ../shared/cases/qa (never copied
into the repository):

* ``tpo``: the 10 TOEFL practice (TPO) lecture and conversation transcripts from L-Eval (about 4k
  tokens each, 184 four-option questions);
* ``quality``: every QuALITY article there (L-Eval's 9 and "The Girl in His Mind": 10 articles,
  124 questions, 3-7k tokens each);
* ``squad``: SQuAD 2.0's "Normans" article (every paragraph joined: one document of about 6k tokens)
  with its 208 crowd-written questions, 112 of them written to look answerable but not answerable
  from the article. Scored as SQuAD scores (bench/score.py ``squad_holds``): an answerable question is
  right when the answer holds a gold answer after SQuAD's normalisation, an unanswerable one when
  the answer is a refusal.

Each multiple-choice question is asked with its options and asked for the letter (bench/score.py
``mc_letter``); chance is 25 %.
"""

from __future__ import annotations

import json
import re

from bench.quality_sets import CASES, MC_SUFFIX, Doc, Item

QA = CASES / "qa"
_OPTION = re.compile(r"^\s*\(?([A-D])[.)]\s*(.*)$")


def _split(question: str) -> tuple[str, list[str]]:
    """A question with its options on the following lines ("A. ...", " (A) ...") -> (stem, options)."""
    stem, options = [], []
    for line in question.split("\n"):
        m = _OPTION.match(line)
        if m and (options or line.strip()[:3] in ("A. ", "(A)")):
            options.append(m.group(2).strip())
        elif options:
            options[-1] += " " + line.strip()
        else:
            stem.append(line)
    return "\n".join(stem).strip(), options


def _leval(name: str, set_name: str) -> list[Doc]:
    data = json.loads((QA / name).read_text())
    docs = []
    for d in data["docs"]:
        items = []
        for i, q in enumerate(d["questions"]):
            _, options = _split(q["question"])
            item = Item(
                f"{d['doc_id']}-q{i}", q["question"].strip() + MC_SUFFIX, "mc", q["gold_letter"], options=options
            )
            item.max_tokens = 12
            items.append(item)
        docs.append(Doc(d["doc_id"], set_name, f"{d['doc_id']}.txt", d["document"], items))
    return docs


def tpo_docs() -> list[Doc]:
    """L-Eval's 10 TPO transcripts (tpo.jsonl lines 1-10), 184 questions."""
    return _leval("leval_tpo.json", "tpo")


def quality_docs() -> list[Doc]:
    """Every QuALITY article of ../shared/cases/qa: L-Eval's 2 + 7, then "The Girl in His Mind"."""
    docs = _leval("quality_leval_sample2.json", "quality") + _leval("leval_quality_more.json", "quality")
    girl = json.loads((QA / "quality_girl_in_his_mind.json").read_text())
    items = []
    for i, q in enumerate(girl["questions"]):
        opts = "\n".join(f" ({'ABCD'[j]}) {o}" for j, o in enumerate(q["options"]))
        letter = "ABCD"[q["gold_label_1based"] - 1]
        item = Item(f"girl-q{i}", f"{q['question']}\n\n{opts}{MC_SUFFIX}", "mc", letter, options=list(q["options"]))
        item.max_tokens = 12
        items.append(item)
    docs.append(Doc("quality-girl", "quality", "quality-girl.txt", girl["document"], items))
    return docs


def squad_docs() -> list[Doc]:
    """SQuAD 2.0's "Normans" article as one document, its 208 questions in the file's order: answerable
    ones of kind ``squad`` (``accept``: the gold answers), unanswerable ones of kind ``refusal``."""
    data = json.loads((QA / "squad2_normans.json").read_text())
    docs = []
    for d in data["docs"]:
        items = [
            Item(f"squad-{q['id']}", q["question"], "refusal", "")
            if q["impossible"]
            else Item(f"squad-{q['id']}", q["question"], "squad", q["answers"][0], accept=[[a] for a in q["answers"]])
            for q in d["questions"]
        ]
        docs.append(Doc(d["doc_id"], "squad", f"{d['doc_id']}.txt", d["document"], items))
    return docs
