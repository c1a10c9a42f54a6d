"""Prompt-lookup drafting: continue the longest recent n-gram match in the document and the answer.

The document's n-grams are hashed once (numpy, at ingest time or when the document becomes hot)
into one dict per n-gram size, mapping hash -> position right after the latest occurrence. Each
question adds a small overlay for its own tokens (question + answer so far), so a step costs at
most ``max_n - min_n + 1`` dict lookups, whatever the document's length.

Worked example (min_n=2, max_n=3), document ``[5, 6, 7, 8, 5, 6, 9]``, context ends ``... 5, 6``:
the 3-gram ``(x, 5, 6)`` is unknown, the 2-gram ``(5, 6)`` last occurred at 4..5, so the draft is
the continuation from position 6: ``[9]`` (the most recent occurrence wins, as in llama.cpp's
ngram-simple).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

_P = np.uint64(0x100000001B3)  # FNV-64 prime as the polynomial base
_MASK = (1 << 64) - 1
AGREE_CAP = 32  # the most tokens LookupDrafter.agreement() counts


def ngram_hash(tokens: Iterable[int]) -> int:
    """Polynomial hash of a token n-gram, identical to :func:`_rolling_hashes` for one window."""
    h = 0
    for t in tokens:
        h = (h * 0x100000001B3 + int(t) + 1) & _MASK
    return h


def _rolling_hashes(tokens: np.ndarray, n: int) -> np.ndarray:
    """Hashes of every n-gram ``tokens[i:i+n]``, uint64 shape [len(tokens) - n + 1]."""
    t = tokens.astype(np.uint64) + np.uint64(1)
    count = len(tokens) - n + 1
    h = np.zeros(count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(n):
            h = h * _P + t[j : j + count]
    return h


class NgramIndex:
    """Immutable n-gram index over a document prefix (token ids), sizes ``min_n..max_n``."""

    def __init__(self, tokens: np.ndarray, min_n: int = 2, max_n: int = 4) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got {min_n}, {max_n}")
        self.tokens = np.ascontiguousarray(tokens, dtype=np.int32)  # [n_tokens]
        self.min_n, self.max_n = min_n, max_n
        self.maps: dict[int, dict[int, int]] = {}
        for n in range(min_n, max_n + 1):
            # Only n-grams with at least one continuation token: starts 0..len-n-1.
            count = len(self.tokens) - n
            if count <= 0:
                self.maps[n] = {}
                continue
            hashes = _rolling_hashes(self.tokens[: count + n - 1], n)
            # dict() keeps the last value for a repeated key: the latest occurrence wins.
            self.maps[n] = dict(zip(hashes.tolist(), range(n, count + n), strict=True))


class LookupDrafter:
    """Drafts for one answer: the document index plus an overlay over this answer's own tokens.

    ``extend`` adds question/answer tokens as they are decided; ``propose(k)`` returns up to ``k``
    tokens continuing the longest n-gram that ends the current context.
    """

    STOP: int | None = None  # a token id that ends any draft (spec/history.py's entry separator)

    def __init__(
        self,
        index: NgramIndex,
        piece: Callable[[int], bytes] | None = None,
        unspaced: Callable[[int], list[int]] | None = None,
    ) -> None:
        self.index = index
        # For whitespace-tolerant resynchronisation: token id -> bytes, and token id -> the ids that
        # spell the same text without its leading whitespace (" of" -> ["of"]).
        self.piece = piece
        self.unspaced = unspaced
        self.base_len = len(index.tokens)
        self.tail: list[int] = []  # question + answer tokens after the document prefix
        self.overlay: dict[int, dict[int, int]] = {n: {} for n in index.maps}
        # Copy cursor: where the last draft was copied from, and where to resume after it.
        self._source: int | None = None
        self._drafted = 0
        self._resume: int | None = None
        self._unspace_first = False  # the target just wrote a line break/space itself
        self._misses = 0
        self._agreed = 0  # of the last proposal: see agreement()
        # Document token ranges [a, b) copied by accepted drafts, in order (for citations).
        self.copied: list[tuple[int, int]] = []

    def extend(self, tokens: Iterable[int]) -> None:
        """Append decided tokens; register the n-grams that now have a continuation."""
        idx = self.index
        for t in tokens:
            end = self.base_len + len(self.tail)  # global position of t = continuation of n-grams ending before it
            self.tail.append(int(t))
            for n in range(idx.min_n, idx.max_n + 1):
                if end - n >= 0:
                    self.overlay[n][ngram_hash(self._slice(end - n, end))] = end

    def propose(self, k: int, after: Sequence[int] = (), *, last: int = 0, pos: int = 0) -> list[int]:
        """Up to ``k`` draft tokens (may be empty). Cost: O(max_n^2), independent of document length.
        (``last`` and ``pos``, the step's cursor, are a model drafter's business: the context here is
        what :meth:`extend` was given.)

        Source choice: while the answer is copying (the last draft was at least partly accepted), keep
        copying from where that draft left off, past the document token(s) the target replaced (see
        :meth:`observe`), unless a full-length n-gram match points elsewhere. Otherwise continue the
        longest n-gram match, and fall back to the cursor only when there is none.

        ``after``: tokens drafted by another source that will precede this draft in the same window
        (MTP tokens); the match is then made on the context extended by them, without the cursor.
        """
        self._source, self._drafted, self._agreed = None, 0, 0
        if k <= 0:
            return []
        total = self.base_len + len(self.tail)
        after = list(after)
        match = self._longest_match(total, after)
        pos = match[0] if match else None
        if not after and self._resume is not None and self._resume < total:
            # A cursor that just produced accepted tokens beats a short n-gram match elsewhere; after a
            # miss it is only a fallback.
            if match is None or (self._misses == 0 and match[1] < self.index.max_n):
                pos = self._resume
        if pos is None:
            return []
        draft = self._slice(pos, min(pos + k, total))
        if self.STOP is not None and self.STOP in draft:
            draft = draft[: draft.index(self.STOP)]
        if pos == self._resume and self._unspace_first and draft and self.unspaced is not None:
            draft = (self.unspaced(draft[0]) + draft[1:])[:k]
        self._source, self._drafted = pos, len(draft)
        if draft and not after:
            self._agreed = self._common_suffix(pos, total)
        return draft

    def agreement(self) -> int:
        """How many tokens before the last proposal's source position equal the context's last
        tokens, at most :data:`AGREE_CAP` (0 when the last proposal was empty or followed another
        source's tokens). A copy that has held for many tokens (a quote well under way, the same
        question asked again) is likelier to go on than one that has just begun."""
        return self._agreed

    def _common_suffix(self, pos: int, total: int) -> int:
        """Length of the common suffix of the tokens before ``pos`` and the context (before ``total``),
        at most AGREE_CAP: O(AGREE_CAP) whatever the document's length."""
        source = self._slice(max(pos - AGREE_CAP, 0), pos)
        context = self._slice(max(total - AGREE_CAP, 0), total)
        n, most = 0, min(len(source), len(context))
        while n < most and source[-1 - n] == context[-1 - n] and source[-1 - n] != self.STOP:
            n += 1
        return n

    def strong(self) -> bool:
        """True when the next draft is likely good: the copy cursor is live, or the context ends with
        a full-length (max_n) n-gram seen before."""
        total = self.base_len + len(self.tail)
        if self._resume is not None and self._misses == 0 and self._resume < total:
            return True
        match = self._longest_match(total, [])
        return match is not None and match[1] >= self.index.max_n

    def observe(self, used: int, accepted: int, target: int, step_drafted: int) -> None:
        """The step's outcome (spec/sources.py ``Drafter``): ``used`` of the last proposal's tokens were
        verified and ``accepted`` of them accepted (-1: not reached, an earlier source's tokens were
        rejected first), then the target chose ``target``; ``step_drafted``: tokens of every source."""
        self._drafted = min(self._drafted, used)
        if used and accepted >= 0:
            self.verified(accepted, target)
        elif not step_drafted:
            self.advance(target)  # a plain step: the cursor survives if the text matched
        else:
            self.forget_cursor()

    def rollback(self, n_keep: int) -> None:
        """Nothing to undo: the context is the emitted tokens (:meth:`extend`)."""

    def advance(self, token: int) -> None:
        """A step without a lookup draft emitted ``token``: keep the cursor if it was the next
        document token."""
        self._source, self._drafted = None, 0
        if self._resume is not None and self._slice(self._resume, self._resume + 1) == [token]:
            self._resume += 1
        else:
            self._resume = None

    def forget_cursor(self) -> None:
        """The context moved on without this drafter's draft (another source's tokens were used)."""
        self._resume, self._source, self._drafted, self._unspace_first = None, None, 0, False

    def verified(self, n_accepted: int, target_token: int) -> None:
        """Feedback after verification: ``n_accepted`` drafts were accepted, then the target chose
        ``target_token`` where the copy had the next document token.

        The cursor moves past the document token(s) the target's choice stands for. Models re-wrap
        lines when they quote, so ``"\nthe"`` in the document may come out as ``" the"``: tokens are
        compared without surrounding whitespace, a few document tokens ahead. Failing that, the
        target's token is taken as a one-for-one substitute. Two drafts in a row with nothing
        accepted end the copy.
        """
        self._unspace_first = False
        if self._source is None or self._drafted == 0:
            return
        self._misses = self._misses + 1 if n_accepted == 0 else 0
        if n_accepted and self._source < self.base_len:
            self._record_copy(self._source, min(self._source + n_accepted, self.base_len))
        if self._misses >= 2:
            self._resume = None
            return
        at = self._source + n_accepted  # the document position the target's token replaced
        self._resume = at + 1
        if self.piece is None or n_accepted == self._drafted:
            return
        want = self.piece(target_token).strip()
        total = self.base_len + len(self.tail)
        if not want:  # the target wrote the whitespace itself: the document's next word follows, unspaced
            self._resume, self._unspace_first = at, True
            return
        # The target's token may stand for several document tokens ("\n" + "convers" + "ations").
        covered = b""
        for j in range(at, min(at + 6, total)):
            (token,) = self._slice(j, j + 1)
            if token == self.STOP:
                return
            covered += self.piece(token)
            text = covered.strip()
            if text == want:
                self._resume = j + 1
                return
            if len(text) >= len(want):
                return

    def _record_copy(self, a: int, b: int) -> None:
        if self.copied and self.copied[-1][1] <= a <= self.copied[-1][1] + 2:  # the copy went on
            self.copied[-1] = (self.copied[-1][0], b)
        else:
            self.copied.append((a, b))

    def _longest_match(self, total: int, after: list[int]) -> tuple[int, int] | None:
        """(continuation position, n) of the latest occurrence of the longest n-gram ending the
        context (extended by ``after``)."""
        idx = self.index
        for n in range(idx.max_n, idx.min_n - 1, -1):
            if total + len(after) < n:
                continue
            if len(after) >= n:
                key_tokens = after[len(after) - n :]
            else:
                key_tokens = self._slice(total - (n - len(after)), total) + after
            h = ngram_hash(key_tokens)
            pos = self.overlay[n].get(h)
            if pos is None:
                pos = idx.maps[n].get(h)
            if pos is None or pos >= total or self._slice(pos - n, pos) != key_tokens:
                continue  # unseen, or a hash collision
            return pos, n
        return None

    def _slice(self, a: int, b: int) -> list[int]:
        """Tokens at global positions [a, b) of document prefix + tail."""
        if b <= self.base_len:
            return self.index.tokens[a:b].tolist()
        if a >= self.base_len:
            return self.tail[a - self.base_len : b - self.base_len]
        return self.index.tokens[a:].tolist() + self.tail[: b - self.base_len]
