"""Segment retrieval (store/index.py), two measurements.

1. Unspaced scripts: character bigrams in the ``porter unicode61`` table against FTS5's ``trigram``
   tokenizer beside it, and the old index (whole runs). Quality: top-1 of the questions in
   testkit/cjk_texts.py (a Chinese and a Japanese text in segments). Cost: build time and file size
   for a 2 MiB Chinese text in 16 segments, and mean query time.
2. Conversations (testkit/conversations.py, on the novel in ../shared/cases, skipped without it): the
   follow-up's segment by the latest turn alone (before), by one query of all the turns' words, and
   by store/index.py ``rank_conversation`` (two rankings combined) at several history weights.

    .venv/bin/python -m bench.retrieval      # writes bench/results/retrieval.md
"""

from __future__ import annotations

import functools
import re
import sqlite3
import tempfile
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

from store import index
from testkit.cjk_texts import CHINESE, CHINESE_QUESTIONS, JAPANESE, JAPANESE_QUESTIONS

OUT = Path(__file__).resolve().parent / "results" / "retrieval.md"
NOTES = """
Why bigrams: FTS5's `trigram` tokenizer cannot match a query term shorter than three characters,
and most Chinese words are two ("朝代", "电源", "邮票"): 3 of the 10 Chinese questions found nothing
or the wrong segment. A trigram table beside the `porter unicode61` one would also mean two
rankings to merge for mixed text. Bigrams of every run of unspaced script (Han, kana, Hangul, Thai,
Lao, Khmer, Myanmar), in the one table, find all 20; English is not touched (its words are not in
those scripts), and its stemming stays. The cost is index size (about 2.6 x the UTF-8 text for
Chinese, against 1.7 x for trigrams) and build time (0.3 s for 2 MiB); both are small next to the
prefill of the same segments.

Conversations, why one query: FTS5's `bm25()` weighs columns, not query terms, but it sums over the
query's phrases, so a phrase given twice weighs twice: one query can weigh the latest question's
words over the earlier turns'. Two rankings each scaled to its best lose the terms' rarity: a
follow-up's weak words ("What reward was offered?", "What was its name?") get a full 1.0 on
whatever segment has them most and outweigh the earlier turn's rare names. One query keeps BM25's
IDF for every word. Alone it can let a long earlier turn outweigh a short follow-up that names a
new subject ("Who built the chapel?" after a question and answer of nine rare words:
tests/store/test_index.py), so the latest question picks the segments (those it matches) and the
one query orders them; when it matches none, the earlier turns rank alone. The latest words count
twice (`LATEST_WEIGHT = 2`): 1 to 4 tie on these 8. The miss ("Why did she do it?" after "Who is
Aouda?") ranks the segment where Aouda's story goes on above the one that explains the suttee.
Eight conversations are a small sample: this decides the method, not a tuned constant.
"""


def _build(path: Path, texts: list[str], method: str) -> float:
    t0 = time.perf_counter()
    with closing(sqlite3.connect(path)) as db:
        tokenize = "trigram" if method == "trigram" else "porter unicode61"
        db.execute(f"CREATE VIRTUAL TABLE segments USING fts5(body, tokenize = '{tokenize}')")
        body = index.segmented if method == "bigram" else (lambda t: t)
        db.executemany("INSERT INTO segments (rowid, body) VALUES (?, ?)", ((i, body(t)) for i, t in enumerate(texts)))
        db.commit()
    return time.perf_counter() - t0


def _query(method: str, question: str) -> str | None:
    if method == "bigram":
        words = index.terms(question)
    elif method == "whole":  # the old index and query: unicode61 words of the question
        words = [w for w in re.findall(r"\w+", question.lower()) if w not in index.STOPWORDS]
    else:  # trigram: runs of word characters, at least 3 long (a shorter term matches nothing)
        words = [w for w in re.findall(r"\w+", question.lower()) if len(w) >= 3 and w not in index.STOPWORDS]
        # a CJK run is a whole clause; its substrings of 3 are what the trigram index can find
        words = [w[i : i + 3] for w in words for i in range(max(1, len(w) - 2))]
    if not words:
        return None
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in dict.fromkeys(words))


def _rank(path: Path, method: str, question: str) -> list[int]:
    query = _query(method, question)
    if query is None:
        return []
    with closing(sqlite3.connect(path)) as db:
        rows = db.execute(
            "SELECT rowid FROM segments WHERE segments MATCH ? ORDER BY bm25(segments), rowid", (query,)
        ).fetchall()
    return [int(r[0]) for r in rows]


def _two(directory: Path, question: str, history, weight: float) -> list[tuple[int, float]]:
    """The alternative: the latest question's ranking and the earlier turns', each scaled so its best
    is 1.0, summed with the earlier one x ``weight``; the earlier one alone when the latest is empty."""
    latest = index.rank(directory, question)
    earlier = index.rank(directory, " ".join(f"{q} {a}" for q, a in history))
    scores: dict[int, float] = {}
    for ranked, w in ((latest, 1.0), (earlier, weight if latest else 1.0)):
        for i, s in ranked:
            scores[i] = scores.get(i, 0.0) + w * s / ranked[0][1]
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


def _one(directory: Path, question: str, history) -> list[tuple[int, float]]:
    """One query without the rule that the latest question picks the segments."""
    latest = index.terms(question)
    earlier = [w for q, a in history for w in index.terms(f"{q} {a}") if w not in latest]
    return index._ranked(directory, [w for w in latest for _ in range(2)] + list(dict.fromkeys(earlier)))


def _conversations() -> list[str]:
    from ingest.segments import cuts, plan
    from testkit.conversations import AROUND, CONVERSATIONS

    path = Path(__file__).resolve().parents[2] / "shared" / "cases" / AROUND
    if not path.is_file():
        return ["", f"Conversations: skipped ({path} not found)."]
    text = path.read_text(encoding="utf-8-sig").replace("\r\n", "\n")
    spans = plan(cuts(text, [0]), lambda a, b: len(text[a:b].split()), 6000, 200)  # words as tokens
    texts = [text[a:b] for a, b in spans]
    methods: dict[str, Callable] = {"latest turn only (before)": lambda d, q, h: index.rank(d, q)}
    for w in (0.25, 0.5, 1.0):
        methods[f"two rankings, each scaled to its best, history x {w}"] = functools.partial(_two, weight=w)
    methods["one query, latest words x 2, over every segment"] = _one
    for r in (1, 2, 3, 4):
        name = f"the same among the segments the latest matches, x {r} (rank_conversation)"
        methods[name] = functools.partial(index.rank_conversation, latest_weight=r)
    out = ["", f"Conversations: {len(CONVERSATIONS)} two-turn conversations on the novel in {len(texts)} segments "
           "of at most 6,000 words (200 words of overlap); top-1 of the follow-up.", ""]  # fmt: skip
    out += ["| method | follow-ups answered from the right segment |", "|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        index.build(directory, texts)
        for name, method in methods.items():
            ok = 0
            for q1, a1, q2, target in CONVERSATIONS:
                right = {i for i, t in enumerate(texts) if target in t}
                assert right, target
                ranked = method(directory, q2, [(q1, a1)])
                ok += bool(ranked) and ranked[0][0] in right
            out.append(f"| {name} | {ok}/{len(CONVERSATIONS)} |")
    return out


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def main() -> None:
    import os

    lines = ["# Segment retrieval: unspaced scripts and conversations (issue 27 items 4 and 5)", ""]
    lines.append(f"Machine: {_cpu()}, load {os.getloadavg()[0]:.1f}; "
                 f"SQLite {sqlite3.sqlite_version}. `python -m bench.retrieval`.")  # fmt: skip
    lines += ["", "| method | Chinese top-1 | Japanese top-1 | build 2 MiB (s) | index size (MB) | query (ms) |"]
    lines.append("|---|---|---|---|---|---|")
    big = ["".join(CHINESE[(i + k) % len(CHINESE)] for k in range(780)) for i in range(16)]  # ~2 MiB UTF-8
    with tempfile.TemporaryDirectory() as tmp:
        for method in ("whole", "trigram", "bigram"):
            hits = []
            for texts, questions in ((CHINESE, CHINESE_QUESTIONS), (JAPANESE, JAPANESE_QUESTIONS)):
                path = Path(tmp) / f"{method}-{len(hits)}.sqlite3"
                _build(path, texts, method)
                ranked = [(_rank(path, method, q), want) for q, want in questions]
                ok = sum(bool(r) and r[0] == want for r, want in ranked)
                hits.append(f"{ok}/{len(questions)}")
            path = Path(tmp) / f"{method}-big.sqlite3"
            build = _build(path, big, method)
            t0 = time.perf_counter()
            for q, _ in CHINESE_QUESTIONS:
                _rank(path, method, q)
            query_ms = (time.perf_counter() - t0) / len(CHINESE_QUESTIONS) * 1000
            size = path.stat().st_size / 1024**2
            name = {"whole": "old: unicode61 runs", "trigram": "FTS5 trigram", "bigram": "bigrams in unicode61"}[method]
            lines.append(f"| {name} | {hits[0]} | {hits[1]} | {build:.2f} | {size:.1f} | {query_ms:.1f} |")
    lines += _conversations()
    lines += ["", f"Cost text: {sum(len(t.encode()) for t in big) / 1024**2:.1f} MiB of UTF-8 in 16 segments."]
    lines += ["", *NOTES.strip("\n").split("\n")]
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
