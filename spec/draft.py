"""Which drafter fills each verify window: MTP, prompt lookup, or MTP followed by lookup.

* A fixed window (``draft_tokens: N``, or 16 for ``verify16``): when lookup has a strong match (a
  live copy cursor or a full-length n-gram), lookup fills the whole window; otherwise the MTP head
  drafts first (up to ``n_mtp`` tokens, where its acceptance is best) and lookup continues from the
  context extended by those tokens.
* The default (adaptive) mode keeps an exponential moving average of each source's acceptance rate
  and picks per step: lookup alone while it is copying, MTP (+ lookup extension) while MTP drafts get
  accepted, and short or no drafts otherwise (see spec/window.py for the lookup window).

Per-source counters feed the answer's stats.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spec.lookup import LookupDrafter
from spec.mtp import MtpDrafter
from spec.window import AdaptiveWindow

SOURCES = ("mtp", "lookup")


@dataclass(frozen=True, slots=True)
class DraftConfig:
    window: int | None  # draft tokens per step; None = adaptive; 0 = no speculation
    sources: tuple[str, ...] = SOURCES
    n_mtp: int = 2  # MTP tokens per step (1..3; acceptance falls with depth, notes §2.2)
    adaptive_initial: int = 8

    def __post_init__(self) -> None:
        if not set(self.sources) <= set(SOURCES) or not self.sources:
            raise ValueError(f"sources must be a non-empty subset of {SOURCES}, got {self.sources}")
        if not 1 <= self.n_mtp <= 3:
            raise ValueError(f"n_mtp must be 1..3, got {self.n_mtp}")


@dataclass(slots=True)
class Draft:
    tokens: list[int]
    n_mtp: int  # the first n_mtp tokens came from MTP, the rest from lookup


@dataclass(slots=True)
class SourceStats:
    drafted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SOURCES, 0))
    accepted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SOURCES, 0))


class DraftPolicy:
    EMA = 0.3  # weight of the newest step in each source's acceptance-rate average

    def __init__(self, config: DraftConfig, lookup: LookupDrafter | None, mtp: MtpDrafter | None) -> None:
        self.config = config
        self.lookup = lookup if "lookup" in config.sources else None
        self.mtp = mtp if "mtp" in config.sources else None
        self.window = AdaptiveWindow(config.adaptive_initial)
        self.rate = dict.fromkeys(SOURCES, 0.5)
        self.stats = SourceStats()
        self._mtp_idle = 0  # adaptive mode: steps since MTP was last tried

    def propose(self, last: int, pos: int, limit: int) -> Draft:
        """Draft for the step whose first verify row is ``last`` at ``pos``; at most ``limit`` tokens."""
        cfg = self.config
        k = limit if cfg.window is None else min(cfg.window, limit)
        if k <= 0:
            return Draft([], 0)
        if cfg.window is None:
            return self._adaptive(last, pos, k)
        if self.lookup is not None and (self.mtp is None or self.lookup.strong()):
            return Draft(self.lookup.propose(k), 0)
        return self._mtp_then_lookup(last, pos, k, min(cfg.n_mtp, k))

    def _adaptive(self, last: int, pos: int, limit: int) -> Draft:
        lookup_k = min(self.window.next(), limit)
        if self.lookup is not None and lookup_k > 0 and (self.mtp is None or self.lookup.strong()):
            return Draft(self.lookup.propose(lookup_k), 0)
        if self.mtp is not None:
            n_mtp = self._mtp_length()
            if n_mtp:
                return self._mtp_then_lookup(last, pos, min(limit, n_mtp + lookup_k), min(n_mtp, limit))
        if self.lookup is not None and lookup_k > 0:
            return Draft(self.lookup.propose(lookup_k), 0)
        return Draft([], 0)

    def _mtp_length(self) -> int:
        """MTP draft length from its recent acceptance; re-probe now and then after backing off."""
        rate = self.rate["mtp"]
        n = self.config.n_mtp if rate >= 0.5 else 1 if rate >= 0.2 else 0
        if n == 0:
            self._mtp_idle += 1
            if self._mtp_idle >= 16:
                n = 1
        if n:
            self._mtp_idle = 0
        return n

    def _mtp_then_lookup(self, last: int, pos: int, k: int, n_mtp: int) -> Draft:
        assert self.mtp is not None
        tokens = self.mtp.draft(last, pos, n_mtp)
        if self.lookup is not None and k > len(tokens):
            tokens = tokens + self.lookup.propose(k - len(tokens), after=tokens)
        elif self.lookup is not None:
            self.lookup.forget_cursor()
        return Draft(tokens, n_mtp)

    def observe(self, draft: Draft, n_accepted: int, target_token: int) -> None:
        """Update per-source counters, acceptance averages, the lookup window and its cursor."""
        n_lookup = len(draft.tokens) - draft.n_mtp
        mtp_ok = min(n_accepted, draft.n_mtp)
        lookup_ok = max(0, n_accepted - draft.n_mtp)
        s = self.stats
        s.drafted["mtp"] += draft.n_mtp
        s.accepted["mtp"] += mtp_ok
        s.drafted["lookup"] += n_lookup
        s.accepted["lookup"] += lookup_ok
        if draft.n_mtp:
            self.rate["mtp"] += self.EMA * (mtp_ok / draft.n_mtp - self.rate["mtp"])
        reached_lookup = n_accepted >= draft.n_mtp
        if n_lookup and reached_lookup:
            self.rate["lookup"] += self.EMA * (lookup_ok / n_lookup - self.rate["lookup"])
            self.window.observe(n_lookup, lookup_ok)
        if self.lookup is not None:
            if n_lookup and reached_lookup:
                self.lookup.observe(lookup_ok, target_token)
            else:
                self.lookup.forget_cursor()
