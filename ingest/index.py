"""Ranking a segmented document's segments for a question: SQLite FTS5 with BM25, no new server.

Each segmented document has its own index, ``segments.sqlite3`` in its directory, so it goes with the
document's files (a DELETE removes it, nothing else to keep in step) and BM25's document frequencies
are those of the document's own segments. The table uses FTS5's ``porter unicode61`` tokenizer
(case-folded, diacritics removed, English stemming: "travelled" finds "travel").

A question becomes an OR of its words less stopwords (:func:`terms`). FTS5's ``bm25()`` is lower for
better matches; :func:`rank` returns ``-bm25`` so that higher is better. A term found in every
segment gets an IDF near zero (FTS5 clamps it to 1e-6), so it still counts as a match but hardly
moves the ranking.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path

from runtime.atomic import replacing

INDEX_FILE = "segments.sqlite3"
_WORD = re.compile(r"\w+", re.UNICODE)
#: Words that say nothing about where an answer is (English question words, articles, auxiliaries,
#: pronouns, prepositions). A question made only of them matches nothing.
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most
    my myself no nor not now of off on once only or other our ours ourselves out over own same she
    should so some such than that the their theirs them themselves then there these they this those
    through to too under until up very was we were what when where which while who whom why will with
    would you your yours yourself yourselves tell say said please does did whose document text book
    story mentioned mention""".split()
)


def terms(question: str) -> list[str]:
    """The question's words that can locate an answer: lower-cased, without stopwords, each once.

    >>> terms("What did Phileas Fogg bet, and with whom?")
    ['phileas', 'fogg', 'bet']
    """
    seen: dict[str, None] = {}
    for word in _WORD.findall(question.lower()):
        if word not in STOPWORDS and (len(word) > 1 or word.isdigit()):
            seen.setdefault(word, None)
    return list(seen)


def build(directory: Path, texts: Sequence[str]) -> None:
    """Write the index of segment texts (row id = segment index) to ``directory`` (crash-safe: a temp
    database, then a rename)."""
    with replacing(directory / INDEX_FILE) as tmp, closing(sqlite3.connect(tmp)) as db:
        db.execute("CREATE VIRTUAL TABLE segments USING fts5(body, tokenize = 'porter unicode61')")
        db.executemany("INSERT INTO segments (rowid, body) VALUES (?, ?)", enumerate(texts))
        db.commit()


def rank(directory: Path, question: str) -> list[tuple[int, float]]:
    """``(segment index, score)`` of the segments that match any of the question's :func:`terms`,
    best first (score = -BM25, higher is better); [] when none matches. Raises FileNotFoundError when
    the document has no index."""
    words = terms(question)
    path = directory / INDEX_FILE
    if not path.is_file():
        raise FileNotFoundError(path)
    if not words:
        return []
    query = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        rows = db.execute(
            "SELECT rowid, -bm25(segments) AS score FROM segments WHERE segments MATCH ? ORDER BY score DESC, rowid",
            (query,),
        ).fetchall()
    return [(int(i), float(s)) for i, s in rows]


def chosen(ranked: Sequence[tuple[int, float]], close: float) -> list[int]:
    """The segments to answer from: the best, and the second too when its score is at least
    ``close`` x the best's (they hold the words about as well; both answers are given). [] when
    nothing matched.

    >>> chosen([(2, 10.0), (0, 8.5), (1, 1.0)], 0.8)
    [2, 0]
    >>> chosen([(2, 10.0), (0, 7.0)], 0.8)
    [2]
    """
    if not ranked:
        return []
    best = [ranked[0][0]]
    if len(ranked) > 1 and close > 0 and ranked[1][1] >= close * ranked[0][1]:
        best.append(ranked[1][0])
    return best
