"""Loop detection: end an answer that repeats one line or n-gram over and over.

A base model, and a small instruct model, often repeats its last line until ``max_tokens``. The
guard watches the emitted token ids and reports a loop once the answer's tail is periodic: the same
block of ``p`` tokens (1 <= p <= ``max_period``) repeated back to back, the periodic tail spanning at
least ``max(min_span, repeats * p)`` tokens. It only decides where the answer ends: every token it
has seen was emitted, and the answer ends right after the token that completed the loop.

A quote is not a loop: when the periodic tail also occurs in the document (a refrain, a table rule,
"ha ha ha" in the text), the answer is copying it and goes on; it is stopped only once it repeats
the block more often than the document does.

Cost per token: a few numpy operations on ``max_period``-long arrays, whatever the answer's or the
document's length. For each period ``p`` the guard keeps ``runs[p]``, the number of trailing tokens
``t[i]`` with ``t[i] == t[i - p]``; the tail of ``runs[p] + p`` tokens then has period ``p``. The
document check is made once per loop (when it is first seen, or its period changes): one dict lookup
in the lookup drafter's n-gram index (spec/lookup.py) finds where the document last ends like the
answer, and one vectorized scan (at most MAX_BACK tokens) measures the document's periodic run
there. While the loop goes on, each token costs one comparison with that length.

Worked example (max_period 4, min_span 6, repeats 3), tokens ``7 1 2 1 2 1 2``: after the last token
``runs[2] = 5`` (positions 2..6 equal the token two back), so the tail ``1 2 1 2 1 2`` of 6 tokens
has period 2 and 6 >= max(6, 3 * 2): a loop, unless ``1 2 1 2 1 2`` occurs in the document.
"""

from __future__ import annotations

import numpy as np

from spec.lookup import NgramIndex, ngram_hash

MAX_PERIOD = 64  # longest repeated block, in tokens (a line of about 40 words)
MIN_SPAN = 16  # fewest tokens a loop spans (a short block must repeat more often)
REPEATS = 3  # fewest copies of the block: the first one and two repeats
MAX_BACK = 1 << 15  # longest periodic run of the document the quote check measures, in tokens


class RepetitionGuard:
    """Watches one answer's tokens; :meth:`push` says when the answer has started to loop.

    ``index``: the document prefix's n-gram index (the lookup drafter's), for the quote exemption;
    None: no exemption (every periodic tail is a loop).
    """

    def __init__(
        self,
        index: NgramIndex | None = None,
        max_period: int = MAX_PERIOD,
        min_span: int = MIN_SPAN,
        repeats: int = REPEATS,
    ) -> None:
        if max_period < 1 or min_span < 2 or repeats < 2:
            raise ValueError(
                f"need max_period >= 1, min_span >= 2, repeats >= 2; got {max_period}, {min_span}, {repeats}"
            )
        self.index = index
        self.periods = np.arange(1, max_period + 1, dtype=np.int64)  # [P]: p for each slot
        self.need = np.maximum(min_span, repeats * self.periods)  # [P]: tail length that makes a loop
        self.ring = np.full(max_period, -1, dtype=np.int64)  # [P]: the last P tokens, token i at i % P
        self.runs = np.zeros(max_period, dtype=np.int64)  # [P]: trailing matches t[i] == t[i - p]
        self.ids: list[int] = []  # every token pushed (the tail the document check compares)
        self.quote: tuple[int, int] | None = None  # (period, length of its run in the document) while looping
        self.doc_checks = 0  # document checks made (for the tests: they must stay rare)

    def push(self, token: int) -> bool:
        """Add the next emitted token; True when the answer now loops (and is not quoting a repeated
        passage of the document)."""
        i, size = len(self.ids), len(self.ring)
        prev = self.ring[(i - self.periods) % size]  # token i - p for each p (garbage where p > i)
        same = (prev == token) & (self.periods <= i)
        self.runs = np.where(same, self.runs + 1, 0)
        self.ring[i % size] = token
        self.ids.append(int(token))
        span = self.runs + self.periods
        looping = span >= self.need
        if not looping.any():
            self.quote = None
            return False
        slot = int(np.argmax(looping))  # the shortest period that loops
        return not self._quoted(slot + 1, int(span[slot]))

    def _quoted(self, period: int, length: int) -> bool:
        """The periodic tail (``length`` tokens of period ``period``) is a quote: the document holds
        the same block repeated back to back over at least ``length`` tokens. Looked up once per
        loop (the run's length in the document is kept), then one comparison per token."""
        if self.index is None:
            return False
        if self.quote is None or self.quote[0] != period:
            self.quote = (period, self._document_run(period))
        return length <= self.quote[1]

    def _document_run(self, period: int) -> int:
        """Length of the periodic run in the document that ends like the answer: found through the
        latest occurrence of the answer's last n-gram, then extended backwards while
        ``doc[j] == doc[j + period]`` (at most MAX_BACK tokens). 0: the document has no such run."""
        self.doc_checks += 1
        index, doc = self.index, self.index.tokens
        n = min(index.max_n, len(self.ids))
        if n < index.min_n:
            return 0
        end = index.maps[n].get(ngram_hash(self.ids[-n:]))  # position after the latest occurrence
        if end is None or end < period:
            return 0
        if not np.array_equal(doc[end - period : end], np.asarray(self.ids[-period:], dtype=doc.dtype)):
            return 0
        lo = max(0, end - period - MAX_BACK)
        same = doc[lo : end - period] == doc[lo + period : end]  # [j - lo]: doc[j] == doc[j + period]
        breaks = np.flatnonzero(~same)
        first = lo + (int(breaks[-1]) + 1 if len(breaks) else 0)  # the run's first position
        return end - first
