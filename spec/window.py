"""How many lookup draft tokens to verify per step in the default (adaptive) mode.

A fixed window comes from the request (``draft_tokens``, or 16 for ``verify16``). Without one, the
server adapts the window to recent acceptance, in the spirit of llama.cpp's ngram-map drafter, which
drafts no more than it got accepted last time: grow after a fully accepted step, shrink after a
rejection. On a CPU a 17-row verify costs ~7x a 1-row decode, so long drafts only pay when most of
them are accepted.
"""

from __future__ import annotations


class AdaptiveWindow:
    """Start at ``initial``; double (up to ``maximum``) after a fully accepted draft; after a partial
    rejection, draft one more than was accepted (at least ``minimum``). After a draft with nothing
    accepted, stop drafting for 1, 2, 4 ... up to 16 steps (exponential back-off), so open-ended
    answers, where lookup rarely helps, run at close to plain decoding speed."""

    def __init__(self, initial: int, minimum: int = 4, maximum: int = 16) -> None:
        self.k = initial
        self.minimum, self.maximum = minimum, maximum
        self._misses = 0
        self._pause = 0  # steps left without drafting

    def next(self) -> int:
        if self._pause > 0:
            self._pause -= 1
            return 0
        return self.k

    def observe(self, n_drafted: int, n_accepted: int) -> None:
        if n_drafted == 0:
            return
        if n_accepted == 0:
            self._pause = min(16, 1 << self._misses)
            self._misses += 1
            self.k = self.minimum
            return
        self._misses = 0
        if n_accepted == n_drafted:
            self.k = min(self.maximum, max(self.k, 2 * n_drafted))
        else:
            self.k = max(self.minimum, min(self.maximum, n_accepted + 1))
