"""Which drafter fills each verify window: MTP, prompt lookup, or MTP followed by lookup.

* A fixed window (``draft_tokens: N``, or 16 for ``verify16``): when lookup has a strong match (a
  live copy cursor or a full-length n-gram), lookup fills the whole window; otherwise the MTP head
  drafts first (up to ``n_mtp`` tokens, where its acceptance is best) and lookup continues from the
  context extended by those tokens.
* The default (adaptive) mode estimates each source's per-token acceptance from recent steps and,
  with the verify costs measured on this machine (spec/cost.py), picks the plan with the most
  expected tokens per second: no draft, k lookup tokens, or n MTP tokens (continued by lookup when
  it matches). On open generation, where drafts fail, that falls back to short drafts or none.

Per-source counters feed the answer's stats.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spec.cost import AcceptanceRate, CostModel, DraftAcceptance, StepCosts
from spec.limits import MAX_MTP_DRAFT, MAX_ROWS
from spec.lookup import LookupDrafter
from spec.mtp import MtpDrafter

SOURCES = ("mtp", "lookup")


@dataclass(frozen=True, slots=True)
class DraftConfig:
    window: int | None  # draft tokens per step; None = adaptive; 0 = no speculation
    sources: tuple[str, ...] = SOURCES
    n_mtp: int = 2  # MTP tokens per step (1..MAX_MTP_DRAFT; acceptance falls with depth, notes §2.2)

    def __post_init__(self) -> None:
        if not set(self.sources) <= set(SOURCES) or not self.sources:
            raise ValueError(f"sources must be a non-empty subset of {SOURCES}, got {self.sources}")
        if not 1 <= self.n_mtp <= MAX_MTP_DRAFT:
            raise ValueError(f"n_mtp must be 1..{MAX_MTP_DRAFT}, got {self.n_mtp}")


@dataclass(slots=True)
class Draft:
    tokens: list[int]
    n_mtp: int  # the first n_mtp tokens came from MTP, the rest from lookup


@dataclass(slots=True)
class SourceStats:
    drafted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SOURCES, 0))
    accepted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SOURCES, 0))


class DraftPolicy:
    """Proposes each step's draft. Fixed windows follow the request; the adaptive mode picks the plan
    with the most expected tokens per second under :mod:`spec.cost`'s acceptance model."""

    PROBE_EVERY = 16  # adaptive mode: try a source again after this many steps without it
    # Plain steps follow this many tokens of an undrafted lookup candidate (_follow_shadow). Following
    # the whole candidate would also feed the later positions' rate for free, but from text the policy
    # had just judged not worth drafting; on the recorded traces (bench/policy_sim.py) that lowered
    # extractive and re-read answers to 1.23x and 1.06x the best fixed window (1.36x and 1.15x with
    # the first token only), so only the first token is checked.
    SHADOW_LEN = 1
    HIGH_ACCEPTANCE = 0.9  # fixed windows keep their full length under load above this acceptance

    def __init__(
        self,
        config: DraftConfig,
        lookup: LookupDrafter | None,
        mtp: MtpDrafter | None,
        costs: CostModel | StepCosts | None = None,
    ) -> None:
        self.config = config
        self.lookup = lookup if "lookup" in config.sources else None
        self.mtp = mtp if "mtp" in config.sources else None
        # Costs given as numbers are taken as the truth; the server's CostModel learns them.
        self.costs = costs if isinstance(costs, CostModel) else CostModel(costs, fixed=costs is not None)
        # Per-token acceptance: MTP, and lookup split by match strength (a live copy cursor or a
        # full-length n-gram is far more reliable than a short match). Priors lean optimistic so each
        # source gets tried before the evidence decides (a neutral prior for a strong match's later
        # positions made a 40-token quote of crazyones.pdf accept nothing).
        self.rate = {
            "mtp": DraftAcceptance(0.6),
            "strong": DraftAcceptance(0.85),
            "weak": DraftAcceptance(0.4),
        }
        self.stats = SourceStats()
        self.recent = AcceptanceRate(0.5)  # all sources together, for the load cap of fixed windows
        self._lookup_kind = "weak"
        self._idle = {"mtp": 0}  # steps since MTP last drafted
        # A lookup candidate that was not drafted, its kind, and how many of its tokens plain steps
        # have emitted since (observe() follows it: _follow_shadow).
        self._shadow: tuple[str, list[int]] | None = None
        self._shadow_hits = 0
        self._beyond: int | None = None  # the candidate's token after an adaptive lookup draft

    def propose(self, last: int, pos: int, max_draft: int, load: int = 1, mtp_drafts: list[int] | None = None) -> Draft:
        """Draft for the step whose first verify row is ``last`` at ``pos``; at most ``max_draft`` tokens.

        ``mtp_drafts``: MTP drafts already made for this ``last``/``pos`` (:func:`spec.mtp.draft_many`,
        batched across sequences); without them the MTP head drafts here, when the plan uses it.
        ``load``: sequences sharing this step's decode call. The adaptive plan prices each window at
        this sequence's share of the batched call (:meth:`StepCosts.share`). A fixed window is capped
        under load to about one verify16 call's rows in all (``17 // load - 1`` drafts, at least 1),
        unless recent acceptance is at least ``HIGH_ACCEPTANCE``.
        """
        cfg = self.config
        k = max_draft if cfg.window is None else min(cfg.window, max_draft)
        if k > 1 and cfg.window is not None and load > 1 and self.recent.value < self.HIGH_ACCEPTANCE:
            k = min(k, max(1, (MAX_ROWS // load) - 1))
        if k <= 0:
            return Draft([], 0)
        if cfg.window is None:
            return self._adaptive(last, pos, k, load, mtp_drafts)
        if self.lookup is not None and (self.mtp is None or self.lookup.strong()):
            self._lookup_kind = "strong" if self.lookup.strong() else "weak"
            return Draft(self.lookup.propose(k), 0)
        return self._mtp_then_lookup(last, pos, k, min(cfg.n_mtp, k), mtp_drafts)

    def _adaptive(self, last: int, pos: int, max_draft: int, load: int, mtp_drafts: list[int] | None) -> Draft:
        share = self.costs.share
        best_value, best = 1.0 / share(0, load), ("none", 0)
        candidate: list[int] = []
        if self.lookup is not None:
            self._lookup_kind = kind = "strong" if self.lookup.strong() else "weak"
            candidate = self.lookup.propose(max_draft)
            rate = self.rate[kind]
            for k in range(1, len(candidate) + 1):
                value = (1 + rate.expected(k)) / share(k, load)
                if value > best_value:
                    best_value, best = value, ("lookup", k)
        if self.mtp is not None:
            rate = self.rate["mtp"]
            for n in range(1, min(self.config.n_mtp, max_draft) + 1):
                value = (1 + rate.expected(n)) / (share(n, load) + n * self.costs.mtp)
                if value > best_value:
                    best_value, best = value, ("mtp", n)
        # Exploration: MTP, unused for a while, gets one short probe, so its acceptance estimate can
        # recover when the text changes. Lookup needs none: plain steps show for free how much of its
        # candidate was right (observe()'s shadow).
        if best[0] == "none" and self.mtp is not None and self._idle["mtp"] >= self.PROBE_EVERY:
            best = ("mtp", 1)
        if self.costs.level is None:
            # No one-row call measured yet: every price is relative to it, and a policy that drafts from
            # its first step on a calibration that says drafts are cheap would never measure it.
            best = ("none", 0)
        plan, n = best
        self._idle["mtp"] = 0 if plan == "mtp" else self._idle["mtp"] + 1
        if plan == "lookup":
            self._end_shadow()
        elif candidate and self._shadow is None:  # no draft, or an MTP draft: lookup watches for free
            self._shadow, self._shadow_hits = (self._lookup_kind, candidate[: self.SHADOW_LEN]), 0
        if plan == "lookup":
            assert self.lookup is not None
            self.lookup.keep_first(n)
            self._beyond = candidate[n] if n < len(candidate) else None
            return Draft(candidate[:n], 0)
        if self.lookup is not None:
            self.lookup.keep_first(0)
        if plan == "mtp":
            return self._mtp_then_lookup(last, pos, n, n, mtp_drafts)
        return Draft([], 0)

    def _mtp_then_lookup(self, last: int, pos: int, k: int, n_mtp: int, mtp_drafts: list[int] | None) -> Draft:
        assert self.mtp is not None
        if mtp_drafts is not None and len(mtp_drafts) >= n_mtp:
            tokens = mtp_drafts[:n_mtp]
        else:
            tokens = self.mtp.draft(last, pos, n_mtp)
        if self.lookup is not None and k > len(tokens):
            self._lookup_kind = "weak"
            tokens = tokens + self.lookup.propose(k - len(tokens), after=tokens)
        return Draft(tokens, n_mtp)

    def _follow_shadow(self, target_token: int) -> None:
        """A plain step emitted ``target_token``: compare it with the next token of the candidate lookup
        proposed when no draft was worth its cost. Over the following plain steps that shows how many
        of the candidate's tokens a draft would have got accepted, first and later positions alike,
        at no cost: acceptance recovers as soon as the answer starts copying again, no probe is spent
        (a probe of 4 rows costs 3 plain steps on a CPU), and a candidate whose first token is right
        but whose continuation is not (repeated structure) is recognised without drafting it."""
        if self._shadow is None:
            return
        kind, candidate = self._shadow
        if candidate[self._shadow_hits] != target_token:
            self.rate[kind].observe(self._shadow_hits + 1, self._shadow_hits)
            self._shadow = None
            return
        self._shadow_hits += 1
        if self._shadow_hits == len(candidate):
            self._end_shadow()

    def _end_shadow(self) -> None:
        """Stop following the shadow candidate; the tokens it got right so far count as accepted."""
        if self._shadow is not None:
            self.rate[self._shadow[0]].observe(self._shadow_hits, self._shadow_hits)
            self._shadow = None

    def observe(self, draft: Draft, n_accepted: int, target_token: int) -> None:
        """Update per-source counters and acceptance rates, and move the lookup cursor."""
        if self._shadow is not None and draft.tokens:  # an MTP step: its first emitted token checks lookup's
            self._follow_shadow(draft.tokens[0] if n_accepted >= 1 else target_token)
            self._end_shadow()
        n_lookup = len(draft.tokens) - draft.n_mtp
        mtp_ok = min(n_accepted, draft.n_mtp)
        lookup_ok = max(0, n_accepted - draft.n_mtp)
        s = self.stats
        s.drafted["mtp"] += draft.n_mtp
        s.accepted["mtp"] += mtp_ok
        s.drafted["lookup"] += n_lookup
        s.accepted["lookup"] += lookup_ok
        self.recent.observe(len(draft.tokens), n_accepted)
        self.rate["mtp"].observe(draft.n_mtp, mtp_ok)
        reached_lookup = n_accepted >= draft.n_mtp
        if n_lookup and reached_lookup:
            drafted, ok = n_lookup, lookup_ok
            if ok == n_lookup and self._beyond is not None:
                # All accepted: the target's own next token tests the candidate's next one for free,
                # so short drafts that keep succeeding teach the later positions' rate.
                drafted, ok = drafted + 1, ok + int(self._beyond == target_token)
            self.rate[self._lookup_kind].observe(drafted, ok)
        self._beyond = None
        if self.lookup is None:
            return
        if n_lookup and reached_lookup:
            self.lookup.observe(lookup_ok, target_token)
        elif not draft.tokens:
            self._follow_shadow(target_token)
            self.lookup.advance(target_token)  # a plain step: the cursor survives if the text matched
        else:
            self.lookup.forget_cursor()
