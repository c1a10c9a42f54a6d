"""The answer loop as a stepper: draft, verify, accept, roll back, stream.

Cursor invariant: at the top of each step the sequence holds every token up to position
``n_past - 1``, and ``last`` (the newest emitted token, position ``n_past``) is not yet decoded.
A verify step decodes ``[last, *draft]``; after accepting ``m`` drafts the cells at positions
``>= n_past + 1 + m`` are removed, and the target's own token becomes the new ``last``.

The caller owns every decode call (server/engine/runner.py batches many answers into one; testkit/harness.py
drives one alone), including the MTP catch-up after each verify decode; :class:`Answer` owns the
decisions. When a rollback fails, :meth:`Answer.accept` says so (``Step.rebuild``) and the caller
rebuilds the sequence from the shared prefix, then checks that it ends at ``n_past - 1``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from runtime.llama import Context, Model
from spec.constraint import Constraint, Decided, decide, verify
from spec.cost import CostModel
from spec.draft import Draft, DraftConfig, DraftPolicy, Plan
from spec.events import TokenEvent
from spec.limits import MAX_WINDOW
from spec.lookup import LookupDrafter
from spec.quote import QuoteParams
from spec.repetition import RepetitionGuard
from spec.sampling import Sampler, SamplingParams
from spec.sources import NAMES, Drafter
from spec.text import TextStream
from spec.verify import accept


class RollbackFailed(Exception):
    """A sequence could not be brought back to the expected position, even by a rebuild."""


@dataclass(frozen=True, slots=True)
class AnswerParams:
    max_tokens: int
    sampling: SamplingParams
    window: int | None  # draft tokens per verify step; None = adaptive; 0 = no speculation
    stops: tuple[str, ...] | None = None  # None: the prompt layout's default stop strings
    sources: tuple[str, ...] = NAMES  # drafters allowed to fill the window
    quote: QuoteParams | None = None  # quote-first (spec/quote.py): the caller gives Answer its constraint
    # Debug (DOCQA_DEBUG_REJECT_DRAFTS): every draft rejected after verification, the target's choice at
    # the first row emitted: a greedy answer is unchanged, and every step rolls its draft back.
    reject_drafts: bool = False
    # Debug (DOCQA_DEBUG_ACCEPT_DRAFTS): every draft accepted whatever the target says, then the target's
    # choice at the last row: the speed of a drafter that is always right (a random-weight model's drafts
    # are never accepted), never the model's own answer.
    accept_drafts: bool = False

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.window is not None and not 0 <= self.window <= MAX_WINDOW:
            raise ValueError(f"window must be in 0..{MAX_WINDOW}, got {self.window}")
        if self.reject_drafts and self.accept_drafts:
            raise ValueError("reject_drafts and accept_drafts exclude each other")


@dataclass(slots=True)
class AnswerStats:
    prompt_tokens: int = 0  # tokens prefilled for this answer (question suffix, plus any replay)
    cached_tokens: int = 0  # document prefix tokens reused from the saved state, not prefilled
    completion_tokens: int = 0
    ttft_ms: float = 0.0
    decode_tokens_per_s: float = 0.0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    verify_steps: int = 0
    finish_reason: str = "stop"  # stop | length | repetition (a loop, spec/repetition.py) | cancelled
    drafted_by_source: dict[str, int] = field(default_factory=dict)  # by source name (spec/sources.py)
    accepted_by_source: dict[str, int] = field(default_factory=dict)
    mean_accepted_per_step: float = 0.0  # accepted draft tokens per verify step

    def close(self, n_tokens: int, drafted: Mapping[str, int], accepted: Mapping[str, int], t_first: float) -> None:
        """Fill in what covers the whole answer: ``n_tokens`` decoded, drafts by source, and the decode
        rate since the first token (``t_first``, perf_counter seconds)."""
        t_end = time.perf_counter()
        self.completion_tokens = n_tokens
        self.drafted_by_source, self.accepted_by_source = dict(drafted), dict(accepted)
        if self.verify_steps:
            self.mean_accepted_per_step = self.accepted_tokens / self.verify_steps
        if n_tokens > 1 and t_end > t_first > 0:
            self.decode_tokens_per_s = (n_tokens - 1) / (t_end - t_first)


@dataclass(frozen=True, slots=True)
class Step:
    """What one verify step produced."""

    events: list[TokenEvent]  # zero to two
    rebuild: bool = False  # the rollback failed: rebuild the sequence (:meth:`Answer.replay_ids`) before the next step


@dataclass(slots=True)
class AnswerRun:
    """The sequence an :class:`Answer` continues."""

    ctx: Context
    model: Model
    drafters: Mapping[str, Drafter]  # this sequence's drafter of each available source (spec/sources.py)
    n_past: int  # position of the first answer token; the last decode left its logits row
    stats: AnswerStats
    t_start: float  # perf_counter() when the request arrived, for TTFT
    seq_id: int = 0
    max_window: int = MAX_WINDOW  # rollback limit of the context (n_rs_seq on hybrid models)
    costs: CostModel | None = None  # verify/MTP step costs, for the adaptive window
    should_stop: Callable[[], bool] = lambda: False

    @property
    def lookup(self) -> LookupDrafter | None:
        """The prompt-lookup drafter: its accepted copies are the answer's ``lookup`` citations."""
        return self.drafters.get("lookup")


class Answer:
    """One answer's decoding state, advanced one verify step at a time.

    1. :meth:`begin` chooses the first token from the logits row the question's prefill left.
    2. While not :attr:`done`: :meth:`plan` decides the step's draft (which sources, how many
       tokens); the caller makes a model source's drafts for every sequence that planned them at
       once (spec/sources.py ``Source.propose_many``); :meth:`rows` gives the step's rows ``[last,
       *draft]`` at positions ``n_past..`` (:meth:`draft` does both for one sequence alone); the
       caller decodes them (alone, or with other sequences' rows) with logits for every row and, with
       MTP, feeds them to the MTP context; :meth:`accept` accepts, rolls back and emits.
    3. :meth:`close` fills in the stats.

    ``constraint`` (spec/constraint.py): at most one, applied the same way to every row while it is
    active; its forced tokens are a step's rows, accepted as they are.
    """

    def __init__(self, run: AnswerRun, params: AnswerParams, constraint: Constraint | None = None) -> None:
        self.run, self.params, self.constraint = run, params, constraint
        self.sampler = Sampler(params.sampling)
        self.stream = TextStream(params.stops or ())
        self.guard = RepetitionGuard(run.lookup.index if run.lookup is not None else None)
        config = DraftConfig(params.window, params.sources)
        self.policy = DraftPolicy(config, run.drafters, run.costs)
        self.output_ids: list[int] = []  # every decoded token (constraint's and answer's); the newest is ``last``
        self.n_past = run.n_past
        self.done = False
        self._decided: list[int] = []  # tokens decided since the drafters last took them in
        self._draft: Draft | None = None
        self._plan: Plan | None = None
        self._forced = 0  # tokens of the planned step that the constraint forced
        self._n_accepted = 0
        self._n_answer = 0  # answer tokens emitted (what max_tokens counts; a constraint's are not)
        self._max_draft = 0  # draft tokens the next step may verify (room left, rollback limit)
        self._t_first = 0.0

    @property
    def constrained(self) -> bool:
        """A constraint still chooses the next token."""
        return self.constraint is not None and not self.constraint.done

    def begin(self, row: np.ndarray, prompt_ids: Sequence[int] = ()) -> list[TokenEvent]:
        """Choose the first answer token from ``row`` (float32 [n_vocab]), the last prefill row.
        ``prompt_ids``: the tokens prefilled after the document (the question), which the drafter
        continues from."""
        if len(prompt_ids):
            for drafter in self.run.drafters.values():
                drafter.extend(prompt_ids)
        self._t_first = time.perf_counter()
        self.run.stats.ttft_ms = (self._t_first - self.run.t_start) * 1000.0
        return self._take(*self._decide([], row))

    @property
    def last(self) -> int:
        """The newest emitted token: the first row of the next verify step, at ``n_past``."""
        return self.output_ids[-1]

    drafters = property(lambda self: self.run.drafters, doc="This sequence's drafter of each source, by name.")
    stats = property(lambda self: self.run.stats, doc="The answer's stats (final after :meth:`close`).")
    costs = property(lambda self: self.policy.costs, doc="The step costs its policy prices drafts with.")

    def plan(self, load: int = 1) -> Plan:
        """Decide the next step's draft (``load``: sequences sharing the decode call); the drafters
        first take in the tokens decided since the last step. Tokens the constraint forces are the
        step's whole draft (an empty plan: no model source drafts for them)."""
        for drafter in self.run.drafters.values():
            drafter.extend(self._decided)
        self._decided = []
        forced = self.constraint.forced() if self.constrained else []
        if forced:
            self._draft, self._forced = Draft(forced[: max(1, self._max_draft)]), 0
            self._plan = Plan()
        else:
            self._draft = None
            self._plan = self.policy.plan(self.last, self.n_past, self._max_draft, load)
        return self._plan

    def rows(self, model_tokens: list[int] | None = None) -> list[int]:
        """The rows of the planned step: ``[last, *draft]``, to decode at ``n_past..`` with logits for
        every row. ``model_tokens``: the drafts of the plan's model source made for this step at once
        for several sequences (without them it drafts here)."""
        assert self._plan is not None, "rows() without plan()"
        if self._draft is not None:  # forced by the constraint
            self._forced = len(self._draft.tokens)
        else:
            self._draft, self._forced = self.policy.draft(self._plan, self.last, self.n_past, model_tokens), 0
        self._plan = None
        return [self.last, *self._draft.tokens]

    def draft(self, load: int = 1) -> list[int]:
        """:meth:`plan` then :meth:`rows`: one sequence's step on its own."""
        self.plan(load)
        return self.rows()

    def accept(self, rows: np.ndarray) -> Step:
        """Accept from the verify logits ``rows`` (float32 [k + 1, n_vocab]) of the rows
        :meth:`draft` gave, roll back the rejected cells and emit. With MTP, the caller has already
        fed these rows to the MTP context (:meth:`MtpDrafter.process` / :func:`process_many`)."""
        run, draft, stats = self.run, self._draft, self.run.stats
        assert draft is not None, "accept() without draft()"
        stats.verify_steps += 1
        self._draft = None
        if self._forced:  # scaffolding: every forced token stands; the row after them is chosen
            n = self._forced
            decided = self._decide(draft.tokens, rows[n])
            for drafter in run.drafters.values():
                drafter.observe(0, -1, decided[0][-1], n)  # the context moved on without any drafter's tokens
                drafter.rollback(self.n_past + 1 + n)
            self.n_past += 1 + n
            self._n_accepted = 0
            return Step(self._take(*decided))
        if self.constrained:
            decided = verify(self.constraint, self.sampler, rows, draft.tokens, run.model.is_eog)
            tokens = decided[0]
        else:
            params = self.params
            tokens = accept(self.sampler, rows, draft.tokens, params.reject_drafts, params.accept_drafts).tokens
            decided = (tokens, 0, [], None)
        self._n_accepted = n_accepted = len(tokens) - 1
        stats.drafted_tokens += len(draft.tokens)
        stats.accepted_tokens += n_accepted
        self.policy.observe(draft, n_accepted, tokens[-1])
        n_keep = self.n_past + 1 + n_accepted
        rolled_back = n_accepted == len(draft.tokens) or _roll_back(run.ctx, run.seq_id, n_keep)
        for drafter in run.drafters.values():
            drafter.rollback(n_keep)
        self.n_past = n_keep
        events = self._take(*decided)
        return Step(events, rebuild=not rolled_back and not self.done)

    def _decide(self, forced: list[int], row: np.ndarray) -> Decided:
        """The ``forced`` tokens, then ``row``'s token (spec/constraint.py ``decide``; without a
        constraint, the sampler's choice)."""
        if self.constraint is None:
            return [*forced, self.sampler.choose(row)], 0, [], None
        return decide(self.constraint, self.sampler, forced, row, self.run.model.is_eog)

    def count_replay(self, n_tokens: int) -> None:
        """The caller decoded ``n_tokens`` again (a rebuild after a failed rollback): they count as
        prompt tokens of this answer."""
        self.run.stats.prompt_tokens += n_tokens

    def replay_ids(self) -> list[int]:
        """The answer tokens the sequence holds after the question (all emitted but ``last``): what
        a rebuild decodes again. Joined only when asked, so a normal step does no work that grows
        with the answer."""
        return self.output_ids[:-1]

    def _take(self, tokens: list[int], n_constraint: int, events: list[TokenEvent], finish: str | None):
        """Emit the decided ``tokens``: the first ``n_constraint`` the constraint took (its ``events``
        are what it shows for them), the rest the answer's own; end the answer on EOS, a stop string,
        a loop, max_tokens, cancellation, a full context, or where the constraint ends it (``finish``)."""
        run, params = self.run, self.params
        self._decided = tokens
        self.output_ids += tokens[:n_constraint]
        answer = tokens[n_constraint:] if finish is None else []
        if answer:
            text, finish, used = _emit(
                run.model, self.stream, self.guard, answer, self.output_ids, params.max_tokens, self._n_answer
            )
            self._n_answer += used
            if text or used:
                events.append(TokenEvent(text=text, token_ids=tuple(answer[:used]), n_accepted=self._n_accepted))
        if finish is None and run.should_stop():
            finish = "cancelled"
        if finish is None:
            room = min(params.max_tokens - self._n_answer, run.ctx.n_ctx - self.n_past) - 1
            if room < 0:
                finish = "length"
            self._max_draft = min(room, run.max_window)
        if finish is not None:
            events.extend(self.stop(finish))
        return events

    def stop(self, reason: str) -> list[TokenEvent]:
        """End the answer (also from outside the loop, e.g. the shared KV cache is full): ``reason``
        becomes the finish reason; returns the text held back, if any."""
        self.run.stats.finish_reason = reason
        self.done = True
        tail = self.stream.flush()
        return [TokenEvent(text=tail, token_ids=(), n_accepted=0)] if tail else []

    def close(self) -> None:
        """Fill in the stats that cover the whole answer (also after an error)."""
        policy = self.policy.stats
        self.run.stats.close(len(self.output_ids), policy.drafted, policy.accepted, self._t_first)


def _emit(
    model: Model,
    stream: TextStream,
    guard: RepetitionGuard,
    decided: list[int],
    answer: list[int],
    max_tokens: int,
    n_before: int = 0,
) -> tuple[str, str | None, int]:
    """Append decided tokens to the answer until EOS, a stop string, a loop or max_tokens (counted
    from ``n_before`` answer tokens: a constraint's tokens before the answer are not counted). A loop ends the answer
    after the token that completed it: no emitted token changes, only the end.

    Returns (text to send, finish reason or None, number of tokens used).
    """
    out: list[str] = []
    for used, token in enumerate(decided, start=1):
        if model.is_eog(token):
            return "".join(out), "stop", used - 1
        answer.append(token)
        out.append(stream.push(model.piece(token)))
        if stream.stopped:
            return "".join(out), "stop", used
        if guard.push(token):
            return "".join(out), "repetition", used
        if n_before + used >= max_tokens:
            return "".join(out), "length", used
    return "".join(out), None, len(decided)


def _roll_back(ctx: Context, seq_id: int, n_keep: int) -> bool:
    """Remove cells at positions >= n_keep; True if the sequence now ends at n_keep - 1.

    ``seq_rm`` can return True and still leave the wrong state (a sliding-window cache truncated below its window),
    so the position range is checked too. A recurrent state refuses rollbacks deeper than
    ``n_rs_seq``; then the caller rebuilds the sequence.
    """
    return ctx.seq_rm(seq_id, n_keep) and ctx.pos_max(seq_id) == n_keep - 1
