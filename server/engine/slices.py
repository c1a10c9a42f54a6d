"""Prefill chunks sized by time, not tokens (issue 36): how many tokens of a document's reading (or of
a long question) one engine step decodes.

On a 2-core CPU the default 1.5B reader prefills about 100-140 tokens a second, so a 512-token chunk
held every other question for 4-6 s (and 8-13 s on a loaded machine). A chunk's time is not
proportional to its tokens: each llama_decode call pays a fixed part (the weights streamed once, the
attention over the cached context, thread start-up) on top of a per-token part, and small chunks pay
it most. Measured on a 2-core Xeon (AMX), the 1.5B reader beside a benchmark: 512 tokens in 8.7-13 s,
32 tokens in 0.6-1.7 s, so a rate measured on big chunks promises small ones that run 2-3x over. So
:class:`PrefillSlices` fits ``seconds = fixed + per_token * tokens`` to the chunks it sees and sizes
the next one from it:

* next to other work (a question answering or waiting), a chunk takes about ``slice_s``;
* alone, it takes at most ``alone_s``: long enough for the kernels to run near their best, short
  enough that a question arriving in the middle waits about that long, not a whole ``n_ubatch``.

And :class:`ReadShare` bounds a reading's share of the engine's time while questions are answered: a
chunk cannot be smaller than :data:`PrefillSlices.MIN_TOKENS`, and deep in a document 32 rows take
0.7-1.4 s on 2 cores (flash attention off / on after 6,144 tokens, bench/results/prefill.md), so one
reading chunk per answer step left an answer at about 1 token/s while a book was read (a new-user trial:
227 tokens in 202 s, 10 s idle).
"""

from __future__ import annotations


class PrefillSlices:
    """Chunk sizes from a fitted cost line ``seconds = fixed + per_token * n`` (least squares over the
    chunks seen, each older one weighted by :data:`DECAY` per newer chunk, so it follows load and the
    context's growth). ``slice_s``: a chunk's time next to other work; ``alone_s``: its most alone."""

    MIN_TOKENS = 32  # below this a CPU's matmul kernels lose more than the wait saves
    DECAY = 0.8  # weight kept by an older chunk each time a newer one is seen

    def __init__(self, slice_s: float, alone_s: float | None = None) -> None:
        self.slice_s = slice_s
        self.alone_s = max(slice_s, alone_s if alone_s is not None else 4 * slice_s)
        self._sums = [0.0] * 5  # weight, sum n, sum t, sum n*n, sum n*t (weighted)

    def observe(self, n_tokens: int, seconds: float) -> None:
        """A prefill chunk of ``n_tokens`` took ``seconds``."""
        if n_tokens <= 0 or seconds <= 0:
            return
        w, sn, st, snn, snt = (x * self.DECAY for x in self._sums)
        self._sums = [w + 1, sn + n_tokens, st + seconds, snn + n_tokens * n_tokens, snt + n_tokens * seconds]

    def cost(self) -> tuple[float, float] | None:
        """(fixed s, per-token s) of the fitted line; None before any chunk. With chunks of one size
        only (no slope to fit) the fixed part is taken as zero: time proportional to tokens."""
        w, sn, st, snn, snt = self._sums
        if w <= 0:
            return None
        mean_n, mean_t = sn / w, st / w
        var = snn / w - mean_n * mean_n
        if var > 0.05 * mean_n * mean_n:  # chunk sizes differ enough (coefficient of variation > 0.22)
            per_token = (snt / w - mean_n * mean_t) / var
            fixed = mean_t - per_token * mean_n
            if per_token > 0 and fixed >= 0:
                return fixed, per_token
            if per_token > 0:  # a negative intercept is noise: keep the line through the mean
                return 0.0, mean_t / mean_n
        return 0.0, mean_t / max(mean_n, 1e-9)

    @property
    def rate(self) -> float | None:
        """Tokens per second of a chunk of ``n_ubatch``-like size (the fitted per-token cost alone), for
        progress reports; None before any chunk."""
        c = self.cost()
        return None if c is None else 1.0 / c[1]

    def tokens(self, n_ubatch: int, alone: bool = False) -> int:
        """Tokens of the next chunk: as many as fit ``alone_s`` (alone) or ``slice_s`` (next to other
        work) on the fitted line, within [:data:`MIN_TOKENS`, ``n_ubatch``]. Before any chunk: a quarter
        of ``n_ubatch``."""
        c = self.cost()
        if c is None:
            return max(self.MIN_TOKENS, n_ubatch // 4)
        fixed, per_token = c
        budget = self.alone_s if alone else self.slice_s
        return max(self.MIN_TOKENS, min(n_ubatch, int((budget - fixed) / per_token)))


class ReadShare:
    """While questions are answered or prefilled, a reading takes at most ``share`` of the engine's
    time: after each of its chunks (``took`` seconds) the questions run until they have had
    ``took * (1 - share) / share`` seconds. With no question the reading goes on at once."""

    def __init__(self, share: float = 0.5) -> None:
        if not 0.0 < share <= 1.0:
            raise ValueError(f"a reading's share must be in (0, 1], got {share}")
        self.share = share
        self.owed = 0.0  # seconds the questions may still take before the reading's next chunk

    def asked(self, seconds: float) -> None:
        """The questions had ``seconds`` (an answer step, a question's prefill chunk)."""
        self.owed -= seconds

    def may_read(self, asking: bool) -> bool:
        """The reading may take its next chunk now (``asking``: a question is answered or prefilled)."""
        if not asking:
            self.owed = 0.0
        return self.owed <= 0.0

    def read(self, took: float, asking: bool) -> None:
        """The reading's chunk took ``took`` seconds."""
        self.owed = took * (1.0 - self.share) / self.share if asking else 0.0
