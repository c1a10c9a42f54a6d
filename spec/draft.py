"""Which drafters fill each verify window: the draft plan of one step, over every registered source
(spec/sources.py).

Sources are of two kinds. A *text* source (prompt lookup in the document, earlier answers) proposes a
candidate continuation at no cost, so the policy sees its tokens before it decides. A *model* source
(the MTP head, a separate draft model) costs a decode per drafted token, so the plan names how many
it drafts before any is made, and the runner makes the drafts of every sequence whose plan chose it in
one batched call per depth (server/engine/runner.py).

* A fixed window (``draft_tokens: N``, or 16 for ``verify16``): the first text source with a strong
  match (a live copy cursor or a full-length n-gram) fills the whole window; otherwise the first model
  source drafts first (up to its drafter's ``depth``, where its acceptance is best) and the first text source
  with a match continues from the context extended by those tokens.
* The default (adaptive) mode estimates each source's per-token acceptance from recent steps and,
  with the verify costs measured on this machine (spec/cost.py), picks the plan with the most
  expected tokens per second: no draft, k tokens of one text source's candidate, or n tokens of one
  model source. On open generation, where drafts fail, that falls back to short drafts or none.

Per-source counters feed the answer's stats.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from spec import sources
from spec.cost import AcceptanceRate, CostModel, DraftAcceptance
from spec.limits import MAX_ROWS
from spec.sources import Drafter, ModelDrafter, TextDrafter


@dataclass(frozen=True, slots=True)
class DraftConfig:
    window: int | None  # draft tokens per step; None = adaptive; 0 = no speculation
    sources: tuple[str, ...] = sources.NAMES  # the sources allowed to fill the window

    def __post_init__(self) -> None:
        if not set(self.sources) <= set(sources.NAMES) or not self.sources:
            raise ValueError(f"sources must be a non-empty subset of {sources.NAMES}, got {self.sources}")


@dataclass(slots=True)
class Draft:
    """A step's draft tokens and which source made each run of them, in order."""

    tokens: list[int]
    parts: tuple[tuple[str, int], ...] = ()  # (source name, tokens), summing to len(tokens)


@dataclass(slots=True)
class Plan:
    """What one step drafts: ``n_model`` tokens of model source ``model`` first (drafted after the
    plan, batched across sequences), then the tokens of text source ``text`` (``text_tokens`` as
    proposed, or, after model tokens, its continuation up to ``window`` in all)."""

    model: str | None = None
    n_model: int = 0
    text: str | None = None
    text_tokens: list[int] = field(default_factory=list)
    window: int = 0


@dataclass(slots=True)
class SourceStats:
    drafted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(sources.NAMES, 0))
    accepted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(sources.NAMES, 0))


@dataclass(slots=True)
class _Text:
    """The policy's view of one text source: its match kind, and the free checks of its candidate."""

    name: str
    drafter: TextDrafter
    kind: str = "weak"  # "long" | "strong" | "weak": of the last candidate (DraftPolicy.LONG_MATCH)
    shadow: tuple[str, int] | None = None  # (kind, first token) of a candidate that was not drafted
    follow: tuple[str, list[int]] | None = None  # an undrafted candidate followed over the emitted text
    follow_hits: int = 0
    beyond: int | None = None  # the candidate's token after an adaptive draft of it


class DraftPolicy:
    """Proposes each step's draft. Fixed windows follow the request; the adaptive mode picks the plan
    with the most expected tokens per second under :mod:`spec.cost`'s acceptance model."""

    PROBE_EVERY = 16  # adaptive mode: try a model source again after this many steps without it
    HIGH_ACCEPTANCE = 0.9  # fixed windows keep their full length under load above this acceptance
    LONG_MATCH = 16  # adaptive mode: a text candidate whose source agrees this far back is a "long" one

    def __init__(self, config: DraftConfig, drafters: Mapping[str, Drafter], costs: CostModel | None = None) -> None:
        """``drafters``: this sequence's drafter of each available source (spec/sources.py), by name;
        only those ``config.sources`` allows are used."""
        self.config = config
        # In the registry's order, which breaks ties between sources (spec/sources.py).
        allowed = {n: drafters[n] for n in sources.NAMES if drafters.get(n) is not None and n in config.sources}
        self.text = {n: _Text(n, d) for n, d in allowed.items() if sources.KINDS[n] == "text"}
        self.model: dict[str, ModelDrafter] = {n: d for n, d in allowed.items() if sources.KINDS[n] == "model"}
        self.costs = costs or CostModel()  # learns this machine's prices from the verify calls made
        # Per-token acceptance: each model source, and each text source split by match strength (a
        # live copy cursor or a full-length n-gram is far more reliable than a short match). A strong
        # match's first token starts optimistic, its later ones less so: they are learnt from the
        # emitted text before any draft is paid for (_follow_emitted; bench/results/draft-policy.md).
        # A candidate whose source the context has already followed for LONG_MATCH tokens or more (a
        # quote well under way, a question asked again) is priced apart, from Laplace's rule of
        # succession: after n successes in n trials the next succeeds with probability (n+1)/(n+2).
        self.rate: dict[str, DraftAcceptance] = {n: DraftAcceptance(0.6) for n in self.model}
        for n in self.text:
            self.rate[f"{n}/long"] = DraftAcceptance((self.LONG_MATCH + 1) / (self.LONG_MATCH + 2))
            self.rate[f"{n}/strong"] = DraftAcceptance(0.85, later=0.6)
            self.rate[f"{n}/weak"] = DraftAcceptance(0.4)
        self.stats = SourceStats()
        self.recent = AcceptanceRate(0.5)  # all sources together, for the load cap of fixed windows
        self._idle = dict.fromkeys(self.model, 0)  # steps since each model source last drafted

    # -- planning -------------------------------------------------------------------------------------
    def plan(self, last: int, pos: int, max_draft: int, load: int = 1) -> Plan:
        """The plan for the step whose first verify row is ``last`` at ``pos``; at most ``max_draft``
        tokens. ``load``: sequences sharing this step's decode call. The adaptive plan prices each
        window at this sequence's share of the batched call (:meth:`StepCosts.share`). A fixed window
        is capped under load to about one verify16 call's rows in all (``17 // load - 1`` drafts, at
        least 1), unless recent acceptance is at least ``HIGH_ACCEPTANCE``."""
        cfg = self.config
        k = max_draft if cfg.window is None else min(cfg.window, max_draft)
        if k > 1 and cfg.window is not None and load > 1 and self.recent.value < self.HIGH_ACCEPTANCE:
            k = min(k, max(1, (MAX_ROWS // load) - 1))
        if k <= 0:
            return Plan()
        if cfg.window is None:
            return self._adaptive(k, load)
        strong = [(n, t, t.drafter.propose(k, last=last, pos=pos)) for n, t in self.text.items() if t.drafter.strong()]
        if strong:  # the longest strong candidate (a whole earlier answer beats the answer's own last line)
            name, t, tokens = max(strong, key=lambda c: len(c[2]))
            t.kind = "strong"
            return Plan(text=name, text_tokens=tokens, window=k)
        if self.model:
            name = next(iter(self.model))
            return Plan(model=name, n_model=min(self.model[name].depth, k), window=k)
        if self.text:  # only weak matches: the first text source's
            name, t = next(iter(self.text.items()))
            t.kind = "weak"
            return Plan(text=name, text_tokens=t.drafter.propose(k, last=last, pos=pos), window=k)
        return Plan()

    def _adaptive(self, max_draft: int, load: int) -> Plan:
        share = self.costs.share
        best_value, best = 1.0 / share(0, load), Plan()
        candidates: dict[str, list[int]] = {}
        for name, t in self.text.items():
            t.kind = "strong" if t.drafter.strong() else "weak"
            candidates[name] = candidate = t.drafter.propose(max_draft)
            if t.drafter.agreement() >= self.LONG_MATCH:
                t.kind = "long"
            for k, gain in enumerate(self.rate[f"{name}/{t.kind}"].expected_upto(len(candidate)), start=1):
                value = (1 + gain) / share(k, load)
                if value > best_value:
                    best_value, best = value, Plan(text=name, text_tokens=candidate[:k], window=k)
        for name in self.model:
            step = self.costs.draft_step(name)
            for n, gain in enumerate(self.rate[name].expected_upto(min(self.model[name].depth, max_draft)), start=1):
                value = (1 + gain) / (share(n, load) + n * step)
                if value > best_value:
                    best_value, best = value, Plan(model=name, n_model=n, window=n)
        # Exploration: a model source unused for a while gets one short probe, so its acceptance
        # estimate can recover when the text changes. Text sources need none: the tokens a step
        # without them emits show for free how much of their candidate was right (observe()'s shadow
        # check and _follow_emitted).
        if best.window == 0:
            stale = [n for n in self.model if self._idle[n] >= self.PROBE_EVERY]
            if stale:
                best = Plan(model=stale[0], n_model=1, window=1)
        if self.costs.level is None:
            # No one-row call measured yet: every price is relative to it, and a policy that drafts from
            # its first step on a calibration that says drafts are cheap would never measure it.
            best = Plan()
        for name in self.model:
            self._idle[name] = 0 if best.model == name else self._idle[name] + 1
        for name, t in self.text.items():
            candidate = candidates[name]
            # Not drafted this step: its first token is checked for free by the step's first emitted one.
            t.shadow = (t.kind, candidate[0]) if best.text != name and candidate else None
            if best.text == name:
                t.follow = None  # the draft observes its own positions
                t.beyond = candidate[best.window] if best.window < len(candidate) else None
            elif t.follow is None and len(candidate) > 1:
                t.follow, t.follow_hits = (t.kind, candidate), 0
        return best

    def draft(self, plan: Plan, last: int, pos: int, model_tokens: list[int] | None = None) -> Draft:
        """The tokens of ``plan``: ``model_tokens`` (made for it in a batched call, at least
        ``plan.n_model`` of them) or the model source's own drafts, then the text part."""
        tokens: list[int] = []
        parts: list[tuple[str, int]] = []
        if plan.model is not None:
            if model_tokens is None or len(model_tokens) < plan.n_model:
                t0 = time.perf_counter()
                model_tokens = self.model[plan.model].propose(plan.n_model, last=last, pos=pos)
                self.costs.observe_draft(plan.model, time.perf_counter() - t0, plan.n_model, 1)
            tokens = list(model_tokens[: plan.n_model])
            parts.append((plan.model, len(tokens)))
            if plan.window > len(tokens):  # a fixed window: a text source continues the model's tokens
                for name, t in self.text.items():
                    more = t.drafter.propose(plan.window - len(tokens), tokens, last=last, pos=pos)
                    if more:
                        t.kind = "weak"
                        plan.text = name
                        tokens += more
                        parts.append((name, len(more)))
                        break
        elif plan.text is not None:
            tokens = list(plan.text_tokens)
            parts.append((plan.text, len(tokens)))
        return Draft(tokens, tuple(parts))

    def propose(
        self, last: int, pos: int, max_draft: int, load: int = 1, model_tokens: dict[str, list[int]] | None = None
    ) -> Draft:
        """:meth:`plan`, then :meth:`draft`: one sequence's draft. ``model_tokens``: drafts already
        made for this step by a model source, by name (batched across sequences)."""
        plan = self.plan(last, pos, max_draft, load)
        made = (model_tokens or {}).get(plan.model) if plan.model is not None else None
        return self.draft(plan, last, pos, made)

    # -- learning from the outcome --------------------------------------------------------------------
    def _check_shadow(self, t: _Text, first_emitted: int) -> None:
        """A step without ``t``'s draft emitted ``first_emitted`` first: count whether the first token
        of the candidate it proposed was right. Acceptance is learnt at no cost this way, so it
        recovers as soon as the answer starts copying again, and no probe is spent (a probe of 4 rows
        costs 3 plain steps on a CPU). Every step's candidate is checked here; the later positions of
        one candidate at a time are followed by :meth:`_follow_emitted`."""
        if t.shadow is not None:
            kind, first = t.shadow
            self.rate[f"{t.name}/{kind}"].observe(1, int(first == first_emitted))
            t.shadow = None

    def _follow_emitted(self, t: _Text, emitted: list[int]) -> None:
        """A step without ``t``'s draft emitted ``emitted``: compare them with the next tokens of the
        undrafted candidate being followed (:meth:`DraftAcceptance.follow`). Over the following steps
        this shows how many of its tokens a draft would have got accepted, at no cost, so the rate of
        the later positions is learnt while the policy does not draft them (without it that rate
        only moved when a draft was made, and a draft was only made when it was high:
        bench/results/draft-policy.md). Position 0 is left to _check_shadow, which checks every step's
        candidate."""
        if t.follow is None:
            return
        kind, candidate = t.follow
        for token in emitted:
            i = t.follow_hits
            ok = candidate[i] == token
            if i:
                self.rate[f"{t.name}/{kind}"].follow(i, ok)
            if not ok or i + 1 == len(candidate):
                t.follow = None
                return
            t.follow_hits += 1

    def observe(self, draft: Draft, n_accepted: int, target_token: int) -> None:
        """Update per-source counters and acceptance rates, and tell each drafter how its tokens fared."""
        s = self.stats
        emitted = [*draft.tokens[:n_accepted], target_token]
        offset, reached = 0, True  # the tokens before each part; whether every one of them was accepted
        used: dict[str, tuple[int, int]] = {}  # source -> (drafted, accepted) of its part
        for name, n in draft.parts:
            ok = max(0, min(n_accepted - offset, n)) if reached else 0
            s.drafted[name] += n
            s.accepted[name] += ok
            used[name] = (n, ok) if reached else (n, -1)  # -1: never reached (an earlier part failed)
            if sources.KINDS[name] == "model":
                self.rate[name].observe(n, ok)
            else:
                t = self.text[name]
                drafted, good = n, ok
                if ok == n and t.beyond is not None:
                    # All accepted: the target's own next token tests the candidate's next one for free,
                    # so short drafts that keep succeeding teach the later positions' rate.
                    drafted, good = drafted + 1, ok + int(t.beyond == target_token)
                if reached:
                    self.rate[f"{name}/{t.kind}"].observe(drafted, good)
            offset += n
            reached = reached and ok == n
        self.recent.observe(len(draft.tokens), n_accepted)
        for name, t in self.text.items():
            t.beyond = None
            if name in used:
                continue
            # Not drafted this step: its candidate is checked against the emitted text for free, and a
            # followed candidate goes on only over steps whose tokens no other text source made.
            self._check_shadow(t, emitted[0])
            if not any(sources.KINDS[n] == "text" for n in used):
                self._follow_emitted(t, emitted)
            else:
                t.follow = None
        for name, d in (*self.model.items(), *((n, t.drafter) for n, t in self.text.items())):
            mine, ok = used.get(name, (0, 0))
            d.observe(mine, ok, target_token, len(draft.tokens))
