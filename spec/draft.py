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

from spec.cost import AcceptanceRate, CostModel, DraftAcceptance
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
    HIGH_ACCEPTANCE = 0.9  # fixed windows keep their full length under load above this acceptance

    def __init__(
        self,
        config: DraftConfig,
        lookup: LookupDrafter | None,
        mtp: MtpDrafter | None,
        costs: CostModel | None = None,
    ) -> None:
        self.config = config
        self.lookup = lookup if "lookup" in config.sources else None
        self.mtp = mtp if "mtp" in config.sources else None
        self.costs = costs or CostModel()  # learns this machine's prices from the verify calls made
        # Per-token acceptance: MTP, and lookup split by match strength (a live copy cursor or a
        # full-length n-gram is far more reliable than a short match). A strong match's first token
        # starts optimistic, its later ones less so: they are learnt from the emitted text before any
        # draft is paid for (_follow_emitted), and a first draft made on the prior alone cost SPEC-03's
        # answer two failed drafts of 4 and 7 tokens (0.96x plain decoding, bench/results/windows.md).
        self.rate = {
            "mtp": DraftAcceptance(0.6),
            "strong": DraftAcceptance(0.85, later=0.6),
            "weak": DraftAcceptance(0.4),
        }
        self.stats = SourceStats()
        self.recent = AcceptanceRate(0.5)  # all sources together, for the load cap of fixed windows
        self._lookup_kind = "weak"
        self._idle = {"mtp": 0}  # steps since MTP last drafted
        # The first token of a lookup candidate that was not drafted, and its kind (observe() checks it).
        self._shadow: tuple[str, int] | None = None
        # An undrafted lookup candidate whose later tokens the emitted text is compared with
        # (_follow): its kind, its tokens, and how many of them the text has matched so far.
        self._follow: tuple[str, list[int]] | None = None
        self._follow_hits = 0
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
            for k, gain in enumerate(self.rate[kind].expected_upto(len(candidate)), start=1):
                value = (1 + gain) / share(k, load)
                if value > best_value:
                    best_value, best = value, ("lookup", k)
        if self.mtp is not None:
            for n, gain in enumerate(self.rate["mtp"].expected_upto(min(self.config.n_mtp, max_draft)), start=1):
                value = (1 + gain) / (share(n, load) + n * self.costs.mtp)
                if value > best_value:
                    best_value, best = value, ("mtp", n)
        # Exploration: MTP, unused for a while, gets one short probe, so its acceptance estimate can
        # recover when the text changes. Lookup needs none: the tokens a step without it emits show for
        # free how much of its candidate was right (observe()'s shadow check and _follow).
        if best[0] == "none" and self.mtp is not None and self._idle["mtp"] >= self.PROBE_EVERY:
            best = ("mtp", 1)
        if self.costs.level is None:
            # No one-row call measured yet: every price is relative to it, and a policy that drafts from
            # its first step on a calibration that says drafts are cheap would never measure it.
            best = ("none", 0)
        plan, n = best
        self._idle["mtp"] = 0 if plan == "mtp" else self._idle["mtp"] + 1
        # No draft, or an MTP draft: the step's first emitted token checks lookup's candidate for free.
        self._shadow = (self._lookup_kind, candidate[0]) if plan != "lookup" and candidate else None
        if plan == "lookup":
            self._follow = None  # the draft observes its own positions
        elif self._follow is None and len(candidate) > 1:
            self._follow, self._follow_hits = (self._lookup_kind, candidate), 0
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

    def _check_shadow(self, first_emitted: int) -> None:
        """A step without a lookup draft emitted ``first_emitted`` first: count whether the first token
        of the candidate lookup proposed was right. Acceptance is learnt at no cost this way, so it
        recovers as soon as the answer starts copying again, and no probe is spent (a probe of 4 rows
        costs 3 plain steps on a CPU). Every step's candidate is checked here; the later positions of
        one candidate at a time are followed by :meth:`_follow_emitted`."""
        if self._shadow is not None:
            kind, first = self._shadow
            self.rate[kind].observe(1, int(first == first_emitted))
            self._shadow = None

    def _follow_emitted(self, emitted: list[int]) -> None:
        """A step without a lookup draft emitted ``emitted``: compare them with the next tokens of the
        undrafted candidate being followed (:meth:`DraftAcceptance.follow`). Over the following steps
        this shows how many of its tokens a draft would have got accepted, at no cost, so the rate of
        the later positions is learnt while the policy does not draft them. Without it that rate only
        moved when a draft was made, and a draft was only made when that rate was high: on extractive
        Alice (6k tokens) the answer copied the document for 60 steps with the first position's rate
        at 1.0 and the later positions' stuck at 0.73, and no draft was made (0.83x window 16,
        bench/results/windows.md). Position 0 is left to _check_shadow, which checks every step's
        candidate."""
        if self._follow is None:
            return
        kind, candidate = self._follow
        for token in emitted:
            i = self._follow_hits
            ok = candidate[i] == token
            if i:
                self.rate[kind].follow(i, ok)
            if not ok or i + 1 == len(candidate):
                self._follow = None
                return
            self._follow_hits += 1

    def observe(self, draft: Draft, n_accepted: int, target_token: int) -> None:
        """Update per-source counters and acceptance rates, and move the lookup cursor."""
        if draft.tokens:  # an MTP step (a lookup draft has no shadow): its first emitted token checks it
            self._check_shadow(draft.tokens[0] if n_accepted >= 1 else target_token)
            if draft.n_mtp == len(draft.tokens):
                self._follow_emitted([*draft.tokens[:n_accepted], target_token])
            else:  # lookup continued the MTP tokens: its own outcome is observed below
                self._follow = None
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
            self._check_shadow(target_token)
            self._follow_emitted([target_token])
            self.lookup.advance(target_token)  # a plain step: the cursor survives if the text matched
        else:
            self.lookup.forget_cursor()
