"""Drafts from a document's earlier answers ("history"): repeated questions answered at copy speed.

A document is asked about again and again; the second asking of a question, or a colleague's
rewording of it, is answered with much of the same text as the first. :class:`AnswerHistory` keeps
the token sequences of earlier answers about one document (or one segment: each has its own), each
preceded by the end of the question it answered (:data:`QUESTION_TAIL` tokens: the question's last
words and the scaffolding the answer follows, which is what the current context ends with when an
answer begins). :class:`HistoryDrafter` continues the longest match of the current context's end in
that history, as prompt lookup (spec/lookup.py) does in the document: the same n-gram index and copy
cursor, over the history's tokens instead of the document's.

The index is an n-gram map (as SuffixDecoding's global tree answers "longest earlier match of the
current suffix", arXiv 2411.04975 §3, but bounded to ``max_n``-grams and the latest occurrence): it is
what prompt lookup already measures well on (bench/results/windows.md), the copy cursor carries a
match past ``max_n`` tokens, and a history of :data:`MAX_TOKENS` is indexed in milliseconds. The
history is bounded (oldest answers dropped first) and immutable: :meth:`AnswerHistory.add` returns a
new one, so a drafter made from the old one is never changed under it.

Entries are separated by :data:`SEP` (-1, a token id that never occurs): no n-gram spanning two
entries matches a context, and no draft runs past the end of an entry. Persisted as one int32 array
(:meth:`AnswerHistory.to_bytes`).
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence

import numpy as np

from spec.lookup import AGREE_CAP, LookupDrafter, NgramIndex

SEP = -1  # between entries; never a token id
QUESTION_TAIL = 48  # tokens of the question's end kept before each answer
MIN_QUESTION = 8  # the fewest question tokens that name an earlier answer as the same question's
MAX_TOKENS = 32_768  # default bound of one document's history (tokens, separators included)
FORMAT = 1  # of the persisted array


class AnswerHistory:
    """Earlier (question tail, answer) token sequences, oldest first, within ``max_tokens``."""

    def __init__(self, entries: Sequence[np.ndarray] = (), max_tokens: int = MAX_TOKENS, min_n=2, max_n=4) -> None:
        self.max_tokens, self.min_n, self.max_n = max_tokens, min_n, max_n
        kept, total = [], 0
        for entry in reversed(entries):  # the newest first, until the bound
            if total + len(entry) + 1 > max_tokens:
                break
            kept.append(np.asarray(entry, dtype=np.int32))
            total += len(entry) + 1
        self.entries: tuple[np.ndarray, ...] = tuple(reversed(kept))
        self.starts = np.cumsum([0] + [len(e) + 1 for e in self.entries])[:-1].tolist()  # of each entry
        parts = [p for e in self.entries for p in (e, np.array([SEP], np.int32))]
        tokens = np.concatenate(parts) if parts else np.empty(0, np.int32)
        self.index = NgramIndex(tokens, min_n, max_n)

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def n_tokens(self) -> int:
        return len(self.index.tokens)

    def add(self, question: Sequence[int], answer: Sequence[int]) -> AnswerHistory:
        """A history with one more entry: the last :data:`QUESTION_TAIL` tokens of ``question`` (the
        tokens the answer followed) and ``answer``; the oldest entries go to stay within bounds. An
        empty answer adds nothing."""
        if len(answer) == 0:
            return self
        entry = np.concatenate([np.asarray(question, np.int32)[-QUESTION_TAIL:], np.asarray(answer, np.int32)])
        return AnswerHistory([*self.entries, entry], self.max_tokens, self.min_n, self.max_n)

    def answer_to(self, question: Sequence[int]) -> int | None:
        """Where the newest earlier answer to ``question`` begins in the history's tokens (an entry that
        starts with the question's last :data:`QUESTION_TAIL` tokens, at least :data:`MIN_QUESTION` of
        them, and goes on after them), or None. Once per answer: O(entries x QUESTION_TAIL)."""
        tail = np.asarray(question, np.int32)[-QUESTION_TAIL:]
        if len(tail) < MIN_QUESTION:
            return None
        for start, entry in zip(reversed(self.starts), reversed(self.entries), strict=True):
            if len(entry) > len(tail) and np.array_equal(entry[: len(tail)], tail):
                return start + len(tail)
        return None

    def to_bytes(self) -> bytes:
        """The entries as one int32 array with separators (``.npy`` bytes, with a format header)."""
        out = io.BytesIO()
        np.save(out, np.concatenate([np.array([FORMAT], np.int32), self.index.tokens]), allow_pickle=False)
        return out.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes, max_tokens: int = MAX_TOKENS, min_n=2, max_n=4) -> AnswerHistory:
        """Raises ValueError when ``data`` is not a history of this format."""
        try:
            array = np.load(io.BytesIO(data), allow_pickle=False)
        except Exception as exc:  # numpy raises several types for damaged files
            raise ValueError(f"not a history file ({type(exc).__name__})") from None
        if array.dtype != np.int32 or array.ndim != 1 or len(array) == 0 or array[0] != FORMAT:
            raise ValueError("not a history file of this format")
        tokens = array[1:]
        if len(tokens) and tokens[-1] != SEP or (tokens < SEP).any():
            raise ValueError("a damaged history file")
        cuts = np.flatnonzero(tokens == SEP)
        entries = np.split(tokens, cuts + 1)[:-1] if len(cuts) else []
        return cls([e[:-1] for e in entries], max_tokens, min_n, max_n)


class HistoryDrafter(LookupDrafter):
    """Drafts for one answer from ``history``: the current context (question and answer so far,
    given to :meth:`extend`) is matched in the history's tokens only.

    ``earlier``: token sequences the request itself brings as history (a conversation's earlier
    answers): they are matched as the history is, for this answer only."""

    STOP = SEP

    def __init__(self, history: AnswerHistory, piece=None, unspaced=None, earlier: Iterable[Sequence[int]] = ()):
        entries = [*history.entries, *(np.asarray(e, np.int32) for e in earlier if len(e))]
        if len(entries) != len(history.entries):  # the request's own earlier answers, for it alone
            history = AnswerHistory(entries, history.max_tokens + sum(len(e) + 1 for e in entries), *_ns(history))
        super().__init__(history.index, piece, unspaced)
        self.history = history
        self._replay: int | None = None  # next token of an earlier answer to this question, while it agrees

    def extend(self, tokens: Iterable[int]) -> None:
        """Append decided tokens to the context; unlike prompt lookup, they are not themselves matched
        (continuing the answer from itself is lookup's job), so nothing is indexed: the overlay stays
        empty, and LookupDrafter's longest match finds continuations in the history alone.

        The first tokens given are the question (spec/loop.py ``AnswerRun.begin``): when an earlier
        answer followed the same question (:meth:`AnswerHistory.answer_to`), it is replayed while the
        answer agrees with it, token for token. Its first tokens may be shared by any answer (the
        scaffolding, "The"), so without this the longest n-gram match would continue the newest
        answer of whatever question."""
        new = [int(t) for t in tokens]
        if not self.tail:
            self._replay = self.history.answer_to(new)
        elif self._replay is not None:
            stream = self.index.tokens
            for t in new:
                if self._replay is None or stream[self._replay] != t:
                    self._replay = None
                    break
                self._replay += 1
        self.tail.extend(new)

    def propose(self, k: int, after: Sequence[int] = (), *, last: int = 0, pos: int = 0) -> list[int]:
        """The earlier answer to the same question from where this one is, while replaying (its
        :meth:`agreement` is then AGREE_CAP: a long copy); else LookupDrafter's longest match in the
        history."""
        if self._replay is None or after or k <= 0:
            return super().propose(k, after, last=last, pos=pos)
        draft = self._slice(self._replay, self._replay + k)
        if SEP in draft:
            draft = draft[: draft.index(SEP)]
        if not draft:  # the earlier answer ended here
            return super().propose(k, after, last=last, pos=pos)
        # The whole question (its last QUESTION_TAIL tokens) and every answer token so far agree with
        # the entry: the most agreement there is, however short the question (a 12-token question
        # would otherwise be priced as a copy just begun for its first steps).
        self._source, self._drafted, self._agreed = self._replay, len(draft), AGREE_CAP
        return draft

    def strong(self) -> bool:
        return self._replay is not None or super().strong()


def _ns(history: AnswerHistory) -> tuple[int, int]:
    return history.min_n, history.max_n
