"""Prefill chunks sized by time, not tokens (issue 36): how many tokens of a document's reading (or of
a long question) one engine step decodes next to other work.

On a 2-core CPU the default 1.5B reader prefills about 100-140 tokens a second, so a 512-token chunk
held every other question for 4-6 s (and 13-40 s on a loaded machine). A slice of
``DOCQA_PREFILL_SLICE_S`` seconds keeps the wait per step near that; with nothing else to do the
engine still decodes whole ``n_ubatch`` chunks, where the kernels are most efficient.
"""

from __future__ import annotations


class PrefillSlices:
    """How many prefill tokens one engine step may decode next to other work: as many as the measured
    prefill rate decodes in ``slice_s`` seconds (at least :data:`MIN_TOKENS`, at most ``n_ubatch``).

    The rate is a moving average of the prefill chunks' own tokens per second (their decode time,
    the snapshot of an ingestion's last chunk aside), so it follows the machine's load: on a busy
    machine a slice holds fewer tokens, and a question waits no longer behind a reading."""

    MIN_TOKENS = 32  # below this a CPU's matmul kernels lose more than the wait saves
    ALPHA = 0.3  # weight of the newest chunk in the moving average

    def __init__(self, slice_s: float) -> None:
        self.slice_s = slice_s
        self.rate: float | None = None  # prefill tokens per second (None: not measured yet)

    def observe(self, n_tokens: int, seconds: float) -> None:
        """A prefill chunk of ``n_tokens`` took ``seconds``."""
        if n_tokens < self.MIN_TOKENS or seconds <= 0:
            return
        rate = n_tokens / seconds
        self.rate = rate if self.rate is None else (1 - self.ALPHA) * self.rate + self.ALPHA * rate

    def tokens(self, n_ubatch: int) -> int:
        """The tokens of the next slice; before any measurement, a quarter of ``n_ubatch``."""
        if self.rate is None:
            return max(self.MIN_TOKENS, n_ubatch // 4)
        return max(self.MIN_TOKENS, min(n_ubatch, int(self.rate * self.slice_s)))
