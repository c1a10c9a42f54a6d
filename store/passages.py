"""Where in a document a quote-first answer's quote may start: the passages that best match the
question, by BM25 over the document's passages (its paragraphs, headings and tables), in memory.

The same SQLite FTS5 table and tokenizer as a segmented document's index (store/index.py ``fill``:
``porter unicode61``, unspaced scripts as bigrams), but over the passages of one document or segment,
kept in RAM for as long as the document is loaded. A question is every word of it, each once
(no stopword list: BM25's IDF weighs down the words every passage has, in any language; on SQuAD 2.0's
"Normans" article the top 3 of 40 paragraphs hold the gold answer of 88 of 96 answerable questions,
with or without the English stopwords: bench/results/quality.md).

Where fewer passages than asked for share a word with the question (an English question about a German
text: "script" is not "Skript"), the rest are filled by BM25 over character trigrams (FTS5's ``trigram``
tokenizer), which sees the letters words of related languages and inflections share. Never in place of
a word match: a question with enough word matches is ranked as before.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import unicodedata
from collections.abc import Sequence

from store.index import _WORD, fill, segmented


def _words(text: str) -> list[str]:
    """``text``'s words as the index reads them: NFKC, lower-cased, unspaced scripts as bigrams."""
    return _WORD.findall(segmented(unicodedata.normalize("NFKC", text).lower()))


def question_words(question: str) -> list[str]:
    """The question's words, each once: NFKC, lower-cased, unspaced scripts as bigrams (store/index.py
    ``segmented``); single letters other than digits left out (FTS5 would match them everywhere).

    >>> question_words("What city has the biggest port in Germany?")
    ['what', 'city', 'has', 'the', 'biggest', 'port', 'in', 'germany']
    """
    seen: dict[str, None] = {}
    for word in _words(question):
        if len(word) > 1 or word.isdigit():
            seen.setdefault(word, None)
    return list(seen)


#: Text a question puts in quotation marks: "...", “...”, „...“, «...», ‘...’, 「...」, 『...』 or '...'
#: (an apostrophe inside a word, as in "Alice's", neither opens nor closes one).
_QUOTED = re.compile(
    r'"([^"]+)"|\u201c([^\u201d]+)\u201d|\u201e([^\u201c\u201d]+)[\u201c\u201d]|\u00ab([^\u00bb]+)\u00bb'
    r"|\u2018([^\u2019]+)\u2019|\u300c([^\u300d]+)\u300d|\u300e([^\u300f]+)\u300f|(?<!\w)'(.+?)'(?!\w)"
)
#: The fewest words of quoted text that point at the passage holding them (fewer, as in "kin" or
#: "Davidian Revolution", name a term the question is about rather than the place it asks about). Words
#: as the passage index counts them: a run of an unspaced script is a word per two characters.
QUOTED_WORDS = 4


def quoted(question: str) -> list[str]:
    """The texts ``question`` puts in quotation marks that have at least :data:`QUOTED_WORDS` words,
    in question order. A user who quotes the document points at the passage that holds the quote
    ("Copy the paragraph that begins with 'There was nothing so VERY remarkable in that'"): the
    passages holding it are where the quote-first answer quotes from, with no judgment asked
    (server/engine/quotes.py). Any language; the words are counted and matched as the passage index
    reads them (:func:`question_words`, :meth:`PassageRanks.holding`).

    >>> quoted("Copy the paragraph that begins with 'There was nothing so VERY remarkable'.")
    ['There was nothing so VERY remarkable']
    >>> quoted('What is Alice\'s "kin"? What does \u201cthe White Rabbit\u201d mean?')
    []
    """
    found = ("".join(m.groups(default="")).strip() for m in _QUOTED.finditer(question))
    return [text for text in found if len(_words(text)) >= QUOTED_WORDS]


def question_grams(question: str) -> list[str]:
    """The character trigrams of the question's words of three letters or more, each once, lower-cased.

    >>> question_grams("Whose script?")
    ['who', 'hos', 'ose', 'scr', 'cri', 'rip', 'ipt']
    """
    seen: dict[str, None] = {}
    for word in question_words(question):
        for i in range(len(word) - 2):
            seen.setdefault(word[i : i + 3], None)
    return list(seen)


def _any_of(terms: Sequence[str]) -> str:
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


class PassageRanks:
    """A document's passages (``texts``, in document order), ranked for a question by BM25. Thread-safe
    (one connection, used under a lock): built by whichever thread first needs it."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.n = len(texts)
        self._texts: Sequence[str] | None = texts  # until the trigram table is made (at its first need)
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._lock = threading.Lock()
        with self._lock:
            fill(self._db, texts)

    def best(self, question: str, k: int) -> list[int]:
        """The (at most ``k``) passages that best match the question, best first: those sharing a word
        with it, then, when they are fewer than ``k``, those sharing the most letters (trigrams, see the
        module docstring); [] when the question has no word of three letters that any passage has."""
        words = question_words(question)
        if not words or not self.n:
            return []
        with self._lock:
            best = [int(r[0]) for r in self._ranked("segments", _any_of(words), k)]
            grams = question_grams(question)
            if len(best) < min(k, self.n) and grams:
                more = self._ranked("grams", _any_of(grams), k + len(best))
                best += [i for (i,) in more if i not in best][: k - len(best)]
        return best

    def holding(self, text: str, k: int) -> list[int]:
        """The (at most ``k``) passages that hold ``text``'s words in a row (an FTS5 phrase: the same
        tokenizer as the ranking, so case, punctuation and the word ending a stemmer drops do not
        count), best BM25 match first; [] when none does or ``text`` has no word."""
        words = _words(text)
        if not words or not self.n:
            return []
        with self._lock:
            return [int(r[0]) for r in self._ranked("segments", '"' + " ".join(words).replace('"', "") + '"', k)]

    def _ranked(self, table: str, query: str, k: int) -> list[tuple[int]]:
        if table == "grams" and self._texts is not None:
            self._db.execute("CREATE VIRTUAL TABLE grams USING fts5(body, tokenize = 'trigram')")
            self._db.executemany("INSERT INTO grams (rowid, body) VALUES (?, ?)", enumerate(self._texts))
            self._texts = None
        sql = f"SELECT rowid FROM {table} WHERE {table} MATCH ? ORDER BY bm25({table}) LIMIT ?"
        return self._db.execute(sql, (query, k)).fetchall()

    def close(self) -> None:
        with self._lock:
            self._db.close()
