"""Ranking a segmented document's segments for a question: SQLite FTS5 with BM25, no new server.

Each segmented document has its own index, ``segments.sqlite3`` in its directory, so it goes with the
document's files (a DELETE removes it, nothing else to keep in step) and BM25's document frequencies
are those of the document's own segments. The table uses FTS5's ``porter unicode61`` tokenizer
(case-folded, diacritics removed, English stemming: "travelled" finds "travel").

A question becomes an OR of its words less stopwords (:func:`terms`), after NFKC (the stored text is
NFKC already, ingest/normalize.py, so "Ｓｅｃｒｅｔ ｃｏｄｅ" finds "Secret code"). FTS5's ``bm25()``
is lower for better matches; :func:`rank` returns ``-bm25`` so that higher is better. A term found
in every segment gets an IDF near zero (FTS5 clamps it to 1e-6), so it still counts as a match but
hardly moves the ranking.

Scripts written without spaces (Chinese, Japanese, Thai, Lao, Khmer, Myanmar; Korean too, whose
words carry attached particles): ``unicode61`` makes one token of a whole run of such characters
(a Chinese sentence up to its punctuation), so no question would match. Each run is indexed, and
asked, as its overlapping character bigrams (:func:`segmented`; the CJK bigram rule of Lucene's
CJKAnalyzer), in the same table, so BM25 weighs them with the other words: one table, with English
stemming and BM25 over both scripts at once, and no dependency per language. Chosen over FTS5's
``trigram`` tokenizer (most Chinese words are two characters, and a trigram query term needs three)
by measurement: bench/results/retrieval.md.

In a conversation, :func:`rank_conversation` ranks the latest question with the earlier turns'
words weighted lower (measured against two combined rankings in bench/results/retrieval.md).

:data:`INDEX_VERSION` is stored as the database's ``user_version``. An index written before
(version 0: no bigrams) still answers as it did, English included; store/repair.py
``ensure_index`` rebuilds it from the stored text and segment list when the server asks for it.
"""

from __future__ import annotations

import re
import sqlite3
import unicodedata
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path

from runtime.atomic import replacing

INDEX_FILE = "segments.sqlite3"
INDEX_VERSION = 1  # 0: before bigrams (issue 27)
_WORD = re.compile(r"\w+", re.UNICODE)
#: Runs of characters of scripts written without spaces between words: Thai, Lao, Myanmar, Khmer,
#: Hiragana, Katakana, CJK ideographs (and their extensions and compatibility forms), Hangul.
_UNSPACED = re.compile(
    "[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003134f]+"
)
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


def segmented(text: str) -> str:
    """``text`` with each run of unspaced script (see the module docstring) written as its
    overlapping character bigrams between spaces; a run of one character stays as it is.

    >>> segmented("王医生在北京。Hello")
    ' 王医 医生 生在 在北 北京 。Hello'
    """
    return _UNSPACED.sub(lambda m: " " + " ".join(_pairs(m.group())) + " ", text)


def _pairs(run: str) -> list[str]:
    return [run] if len(run) < 2 else [run[i : i + 2] for i in range(len(run) - 1)]


def terms(question: str) -> list[str]:
    """The question's words that can locate an answer: NFKC, lower-cased, unspaced scripts as
    bigrams (:func:`segmented`), without stopwords, each once.

    >>> terms("What did Phileas Fogg bet, and with whom?")
    ['phileas', 'fogg', 'bet']
    >>> terms("Ｓｅｃｒｅｔ ｃｏｄｅ？")
    ['secret', 'code']
    >>> terms("石桥是哪个朝代建的？")
    ['石桥', '桥是', '是哪', '哪个', '个朝', '朝代', '代建', '建的']
    """
    seen: dict[str, None] = {}
    for word in _WORD.findall(segmented(unicodedata.normalize("NFKC", question).lower())):
        if word not in STOPWORDS and (len(word) > 1 or word.isdigit()):
            seen.setdefault(word, None)
    return list(seen)


def build(directory: Path, texts: Sequence[str]) -> None:
    """Write the index of segment texts (row id = segment index) to ``directory`` (crash-safe: a temp
    database, then a rename)."""
    with replacing(directory / INDEX_FILE) as tmp, closing(sqlite3.connect(tmp)) as db:
        fill(db, texts)
        db.commit()


def fill(db: sqlite3.Connection, texts: Sequence[str]) -> None:
    """Make the index's table in the empty database ``db`` and fill it with ``texts`` (row id = their
    position), uncommitted: what :func:`build` writes, for an index with more tables of its own (a
    collection's, store/collection_index.py)."""
    db.execute("CREATE VIRTUAL TABLE segments USING fts5(body, tokenize = 'porter unicode61')")
    rows = ((i, segmented(t)) for i, t in enumerate(texts))
    db.executemany("INSERT INTO segments (rowid, body) VALUES (?, ?)", rows)
    db.execute(f"PRAGMA user_version = {INDEX_VERSION}")


def version(directory: Path) -> int:
    """The :data:`INDEX_VERSION` the index was written with (0: before versions). Raises
    FileNotFoundError without an index, sqlite3.DatabaseError for a damaged one."""
    path = directory / INDEX_FILE
    if not path.is_file():
        raise FileNotFoundError(path)
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return int(db.execute("PRAGMA user_version").fetchone()[0])


def rank(directory: Path, question: str) -> list[tuple[int, float]]:
    """``(segment index, score)`` of the segments that match any of the question's :func:`terms`,
    best first (score = -BM25, higher is better); [] when none matches. Raises FileNotFoundError when
    the document has no index."""
    return _ranked(directory, terms(question))


def _ranked(directory: Path, words: Sequence[str]) -> list[tuple[int, float]]:
    """The segments matching any of ``words`` (a word given k times weighs k times), best first."""
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


#: How many times the latest question's words count in a conversation's query; the earlier turns'
#: words count once. FTS5's bm25 sums over the query's phrases, so a phrase given twice weighs twice.
#: Chosen on bench/retrieval.py's conversations (bench/results/retrieval.md).
LATEST_WEIGHT = 2
MAX_TURNS = 2  # earlier turns whose words count, the most recent ones


def rank_conversation(
    directory: Path, question: str, history: Sequence[tuple[str, str]] = (), latest_weight: int = LATEST_WEIGHT
) -> list[tuple[int, float]]:
    """:func:`rank` for the latest ``question`` of a conversation whose earlier turns are ``history``
    (``(question, answer)`` pairs, oldest first), best first, score = -BM25.

    The latest question decides *which* segments: those that match it, as :func:`rank` finds them.
    One FTS5 query decides their *order*: the latest question's :func:`terms`, each
    ``latest_weight`` times, OR those of the last :data:`MAX_TURNS` turns' questions and answers
    (once each; a word of both counts as the latest's). BM25 weighs each word by its rarity, so a
    follow-up's weak words ("What was its name?", found in most segments) are ordered by the earlier
    turn's names, and a follow-up that names a new subject is answered where that subject is. When
    the latest question matches nothing ("Why did she do it?" is all stopwords), the earlier turns
    alone rank: the segment the previous turn would be answered from, rather than nothing. A pure
    function of the index; raises FileNotFoundError as :func:`rank` does.
    """
    latest = terms(question)
    matching = {i for i, _ in _ranked(directory, latest)}
    earlier = [w for q, a in list(history)[-MAX_TURNS:] for w in terms(f"{q} {a}") if w not in latest]
    phrases = [w for w in latest for _ in range(max(1, latest_weight))] + list(dict.fromkeys(earlier))
    ranked = _ranked(directory, phrases)
    return [(i, s) for i, s in ranked if i in matching] if matching else ranked


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
