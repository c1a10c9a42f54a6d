"""Where in a document a quote-first answer's quote may start: the passages that best match the
question, by BM25 over the document's passages (its paragraphs, headings and tables), in memory.

The same SQLite FTS5 table and tokenizer as a segmented document's index (store/index.py ``fill``:
``porter unicode61``, unspaced scripts as bigrams), but over the passages of one document or segment,
kept in RAM for as long as the document is loaded. A question is every word of it, each once
(no stopword list: BM25's IDF weighs down the words every passage has, in any language; on SQuAD 2.0's
"Normans" article the top 3 of 40 paragraphs hold the gold answer of 88 of 96 answerable questions,
with or without the English stopwords: bench/results/quality.md).
"""

from __future__ import annotations

import sqlite3
import threading
import unicodedata
from collections.abc import Sequence

from store.index import _WORD, fill, segmented


def question_words(question: str) -> list[str]:
    """The question's words, each once: NFKC, lower-cased, unspaced scripts as bigrams (store/index.py
    ``segmented``); single letters other than digits left out (FTS5 would match them everywhere).

    >>> question_words("What city has the biggest port in Germany?")
    ['what', 'city', 'has', 'the', 'biggest', 'port', 'in', 'germany']
    """
    seen: dict[str, None] = {}
    for word in _WORD.findall(segmented(unicodedata.normalize("NFKC", question).lower())):
        if len(word) > 1 or word.isdigit():
            seen.setdefault(word, None)
    return list(seen)


class PassageRanks:
    """A document's passages (``texts``, in document order), ranked for a question by BM25. Thread-safe
    (one connection, used under a lock): built by whichever thread first needs it."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.n = len(texts)
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._lock = threading.Lock()
        with self._lock:
            fill(self._db, texts)

    def best(self, question: str, k: int) -> list[int]:
        """The (at most ``k``) passages that best match the question, best first; [] when no word of the
        question is in any passage (or the question has no words)."""
        words = question_words(question)
        if not words or not self.n:
            return []
        query = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
        with self._lock:
            rows = self._db.execute(
                "SELECT rowid FROM segments WHERE segments MATCH ? ORDER BY bm25(segments) LIMIT ?", (query, k)
            ).fetchall()
        return [int(r[0]) for r in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()
