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
from spec.cost import CostModel
from spec.draft import Draft, DraftConfig, DraftPolicy, Plan
from spec.limits import MAX_WINDOW
from spec.lookup import LookupDrafter
from spec.quote import QuoteParams, Quoting
from spec.repetition import RepetitionGuard
from spec.sampling import Sampler, SamplingParams
from spec.sources import NAMES, Drafter
from spec.text import TextStream
from spec.verify import VerifyResult, accept

#: A quote-first answer checked for names and numbers (QuoteParams.specifics) is held back until it
#: ends or reaches this many tokens: a short factual answer is judged whole, a long one by its start.
HOLD_TOKENS = 32


class RollbackFailed(Exception):
    """A sequence could not be brought back to the expected position, even by a rebuild."""


@dataclass(frozen=True, slots=True)
class AnswerParams:
    max_tokens: int
    sampling: SamplingParams
    window: int | None  # draft tokens per verify step; None = adaptive; 0 = no speculation
    stops: tuple[str, ...] | None = None  # None: the prompt layout's default stop strings
    sources: tuple[str, ...] = NAMES  # drafters allowed to fill the window
    quote: QuoteParams | None = None  # quote-first (spec/quote.py): the caller gives AnswerRun.quote
    # Debug (DOCQA_DEBUG_REJECT_DRAFTS): every draft rejected after verification, the target's choice at
    # the first row emitted: a greedy answer is unchanged, and every step rolls its draft back.
    reject_drafts: bool = False

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.window is not None and not 0 <= self.window <= MAX_WINDOW:
            raise ValueError(f"window must be in 0..{MAX_WINDOW}, got {self.window}")


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


@dataclass(frozen=True, slots=True)
class TokenEvent:
    text: str  # UTF-8 safe text delta, possibly "" while a stop string is undecided
    token_ids: tuple[int, ...]
    n_accepted: int  # drafts accepted in the step that produced these tokens
    part: str = "answer"  # "answer", or "quote": the quote of a quote-first answer (spec/quote.py)


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
    quote: Quoting | None = None  # a quote-first answer's quote (AnswerParams.quote), written first

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
    """

    def __init__(self, run: AnswerRun, params: AnswerParams) -> None:
        self.run, self.params = run, params
        self.sampler = Sampler(params.sampling)
        self.stream = TextStream(params.stops or ())
        self.guard = RepetitionGuard(run.lookup.index if run.lookup is not None else None)
        config = DraftConfig(params.window, params.sources)
        self.policy = DraftPolicy(config, run.drafters, run.costs)
        self.output_ids: list[int] = []  # emitted tokens (quote, scaffolding, answer); the newest is ``last``
        self.n_past = run.n_past
        self.done = False
        self._decided: list[int] = []
        self._kinds: list[str] = []  # of each decided token: "quote" | "forced" | "answer"
        self._draft: Draft | None = None
        self._plan: Plan | None = None
        self._n_accepted = 0
        self._max_draft = 0  # draft tokens the next step may verify (room left, rollback limit)
        self._t_first = 0.0
        # Quote-first: the quote is written first, then the scaffolding after it is decoded as forced
        # tokens (with the gate: its question, the model's yes or no, then the answer's lead), then the answer.
        self.quote = run.quote
        self._forced: list[int] = []  # scaffolding still to decode after the quote
        self._forcing: list[int] | None = None  # the forced tokens of the planned step
        self._then = "answer"  # what the token after the scaffolding is: "gate" (yes/no) or "answer"
        # A quote-first answer checked for names and numbers its quote lacks is held until it ends or
        # reaches HOLD_TOKENS tokens (spec/quote.py QuoteParams.specifics).
        checks = run.quote is not None and run.quote.params.specifics
        self._held: list[TokenEvent] | None = [] if checks else None
        self._n_answer = 0  # answer tokens emitted (what max_tokens counts)

    @property
    def quoting(self) -> bool:
        """The quote of a quote-first answer is being written."""
        return self.quote is not None and not self.quote.done

    def begin(self, row: np.ndarray, prompt_ids: Sequence[int] = ()) -> list[TokenEvent]:
        """Choose the first answer token from ``row`` (float32 [n_vocab]), the last prefill row.
        ``prompt_ids``: the tokens prefilled after the document (the question), which the drafter
        continues from."""
        if len(prompt_ids):
            for drafter in self.run.drafters.values():
                drafter.extend(prompt_ids)
        if self.quoting:
            self._decided, self._kinds = [self._choose_quote(row)], ["quote"]
        else:
            self._decided, self._kinds = [self.sampler.choose(row)], ["answer"]
        self._t_first = time.perf_counter()
        self.run.stats.ttft_ms = (self._t_first - self.run.t_start) * 1000.0
        return self._after_decided()

    @property
    def last(self) -> int:
        """The newest emitted token: the first row of the next verify step, at ``n_past``."""
        return self.output_ids[-1]

    drafters = property(lambda self: self.run.drafters, doc="This sequence's drafter of each source, by name.")
    stats = property(lambda self: self.run.stats, doc="The answer's stats (final after :meth:`close`).")
    costs = property(lambda self: self.policy.costs, doc="The step costs its policy prices drafts with.")

    def plan(self, load: int = 1) -> Plan:
        """Decide the next step's draft (``load``: sequences sharing the decode call); the drafters
        first take in the tokens decided since the last step. Scaffolding after a quote is the step's
        whole draft, accepted as it is (an empty plan: no model source drafts for it)."""
        for drafter in self.run.drafters.values():
            drafter.extend(self._decided)
        self._decided, self._kinds = [], []
        if self._forced:
            self._forcing = self._forced[: max(1, self._max_draft)]
            self._plan = Plan()
        else:
            self._plan = self.policy.plan(self.last, self.n_past, self._max_draft, load)
        return self._plan

    def rows(self, model_tokens: list[int] | None = None) -> list[int]:
        """The rows of the planned step: ``[last, *draft]``, to decode at ``n_past..`` with logits for
        every row. ``model_tokens``: the drafts of the plan's model source made for this step at once
        for several sequences (without them it drafts here)."""
        assert self._plan is not None, "rows() without plan()"
        if self._forcing is not None:
            self._draft = Draft(list(self._forcing))
        else:
            self._draft = self.policy.draft(self._plan, self.last, self.n_past, model_tokens)
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
        if self._forcing is not None:
            return self._accept_forced(rows, draft)
        if self.quoting:
            result, kinds = self._accept_quote(rows, draft.tokens)
        else:
            result, kinds = accept(self.sampler, rows, draft.tokens), None
            if self.params.reject_drafts and result.n_accepted:
                result = VerifyResult(result.tokens[:1], 0)  # the target's choice at row 0: still lossless
        self._n_accepted = n_accepted = result.n_accepted
        stats.drafted_tokens += len(draft.tokens)
        stats.accepted_tokens += n_accepted
        self.policy.observe(draft, n_accepted, result.tokens[-1])
        n_keep = self.n_past + 1 + n_accepted
        rolled_back = n_accepted == len(draft.tokens) or _roll_back(run.ctx, run.seq_id, n_keep)
        for drafter in run.drafters.values():
            drafter.rollback(n_keep)
        self.n_past = n_keep
        self._decided, self._kinds = result.tokens, kinds or ["answer"] * len(result.tokens)
        self._draft = None
        events = self._after_decided()
        return Step(events, rebuild=not rolled_back and not self.done)

    def _choose_quote(self, row: np.ndarray) -> int:
        """The next quote token from ``row``; the quote ends with it when it holds a line break, or
        with an end-of-generation token (then so does the answer)."""
        token = self.quote.choose(self.sampler, row)
        if self.run.model.is_eog(token):
            self.quote.done = True
        else:
            self.quote.push(token)
        return token

    def _accept_quote(self, rows: np.ndarray, draft: list[int]) -> tuple[VerifyResult, list[str]]:
        """spec/verify.py's rule with the quote's choice (:meth:`Quoting.choose`) at each row, row by
        row since a row's allowed tokens follow the tokens before it; the step ends where the quote
        does (the scaffolding after it is the next step)."""
        tokens: list[int] = []
        for i in range(len(draft) + 1):
            tokens.append(self._choose_quote(rows[i]))
            if self.quote.done or i == len(draft) or tokens[-1] != draft[i]:
                break
        return VerifyResult(tokens=tokens, n_accepted=len(tokens) - 1), ["quote"] * len(tokens)

    def _accept_forced(self, rows: np.ndarray, draft: Draft) -> Step:
        """A step of scaffolding: every forced token stands; the token after them is the next forced
        one, or the target's own choice from the last row (the answer's first token)."""
        forced, n = self._forced, len(draft.tokens)
        self._forced, self._forcing, self._draft = forced[n:], None, None
        if self._forced:
            nxt, kind = self._forced.pop(0), "forced"
        elif self._then == "gate":
            nxt, kind = self.quote.gate_choice(rows[n]), "gate"
        else:
            nxt, kind = self.sampler.choose(rows[n]), "answer"
        for drafter in self.run.drafters.values():
            drafter.observe(0, -1, nxt, n)  # the context moved on without any drafter's tokens
            drafter.rollback(self.n_past + 1 + n)
        self.n_past += 1 + n
        self._n_accepted = 0
        self._decided, self._kinds = [*draft.tokens, nxt], ["forced"] * n + [kind]
        return Step(self._after_decided())

    def count_replay(self, n_tokens: int) -> None:
        """The caller decoded ``n_tokens`` again (a rebuild after a failed rollback): they count as
        prompt tokens of this answer."""
        self.run.stats.prompt_tokens += n_tokens

    def replay_ids(self) -> list[int]:
        """The answer tokens the sequence holds after the question (all emitted but ``last``): what
        a rebuild decodes again. Joined only when asked, so a normal step does no work that grows
        with the answer."""
        return self.output_ids[:-1]

    def _after_decided(self) -> list[TokenEvent]:
        """Emit the decided tokens; end the answer on EOS, a stop string, a loop, max_tokens,
        cancellation or a full context. A quote that ends says ``none`` or is not in the document:
        the answer is the refusal; otherwise the scaffolding after it is decoded next."""
        run, params = self.run, self.params
        events, finish = [], None
        quote_ids = [t for t, k in zip(self._decided, self._kinds, strict=True) if k == "quote"]
        if quote_ids:
            finish = self._emit_quote(quote_ids)
            if finish is None and self.quote.done:
                finish = self._after_quote(events)
        rest = [(t, k) for t, k in zip(self._decided, self._kinds, strict=True) if k != "quote"]
        if finish is None and rest:
            decided = [t for t, _ in rest]
            for t, k in rest:
                if k in ("forced", "gate"):
                    self.output_ids.append(t)
                if k == "gate":
                    finish = self._after_quote(events)
            answer = [t for t, k in rest if k == "answer"]
            if answer:
                text, finish, used = _emit(
                    run.model, self.stream, self.guard, answer, self.output_ids, params.max_tokens, self._n_answer
                )
                self._n_answer += used
                if text or used:
                    ids = tuple(decided[: len(decided) - len(answer) + used])
                    self._send(events, TokenEvent(text=text, token_ids=ids, n_accepted=self._n_accepted))
                if finish is None and self._held is not None and self._n_answer >= HOLD_TOKENS:
                    finish = self._release(events)  # long enough to judge; the rest streams unchecked
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

    def _after_quote(self, events: list[TokenEvent]) -> str | None:
        """The quote (or the gate's reply) is in: the refusal ends the answer ("stop"); else the quote
        is sent (once it stands: the document's sentence it is in, or the model's words when it is
        not a span of the document's tokens) and the scaffolding of what comes next is queued, the
        gate's question, then the answer's lead."""
        q = self.quote
        if q.refuses:
            events.append(TokenEvent(q.refusal, (), 0))
            return "stop"
        if q.params.gate and q.answered is None and q.gate_scaffold:
            self._forced, self._then = list(q.gate_scaffold), "gate"
            return None
        events.append(TokenEvent(q.sentence_text() or q.quote_text(), tuple(q.ids), 0, part="quote"))
        self._forced, self._then = list(q.scaffold), "answer"
        return None

    def _emit_quote(self, tokens: list[int]) -> str | None:
        """Append quote tokens to the sequence's tokens; "stop" when an end-of-generation token ended
        the quote (and the answer), else None. The quote is sent when it stands (:meth:`_after_quote`)."""
        for token in tokens:
            if self.run.model.is_eog(token):
                return "stop"
            self.output_ids.append(token)
        return None

    def stop(self, reason: str) -> list[TokenEvent]:
        """End the answer (also from outside the loop, e.g. the shared KV cache is full): ``reason``
        becomes the finish reason; returns the held-back text, if any (a quote-first answer held for
        its check: the answer, or the refusal in its place)."""
        self.run.stats.finish_reason = reason
        self.done = True
        events: list[TokenEvent] = []
        tail = self.stream.flush()
        if tail:
            self._send(events, TokenEvent(text=tail, token_ids=(), n_accepted=0))
        if self._held is not None:
            self._release(events)
        return events

    def _send(self, events: list[TokenEvent], event: TokenEvent) -> None:
        """Emit an answer event, or hold it while a quote-first answer waits for its check."""
        if self._held is not None:
            self._held.append(event)
        else:
            events.append(event)

    def _release(self, events: list[TokenEvent]) -> str | None:
        """Judge the held answer (spec/quote.py ``unsupported``): send it, or the refusal in its place
        ("stop": the answer ends). From here on the answer streams unchecked."""
        held, self._held = self._held or [], None
        text = "".join(e.text for e in held)
        self.quote.claims = self.quote.unsupported(self.quote.question, text)
        if self.quote.claims:
            events.append(TokenEvent(self.quote.refusal, (), 0))
            return "stop"
        events.extend(held)
        return None

    def close(self) -> None:
        """Fill in the stats that cover the whole answer (also after an error)."""
        stats, policy = self.run.stats, self.policy
        t_end = time.perf_counter()
        stats.completion_tokens = len(self.output_ids)
        stats.drafted_by_source = dict(policy.stats.drafted)
        stats.accepted_by_source = dict(policy.stats.accepted)
        if stats.verify_steps:
            stats.mean_accepted_per_step = stats.accepted_tokens / stats.verify_steps
        if len(self.output_ids) > 1 and t_end > self._t_first > 0:
            stats.decode_tokens_per_s = (len(self.output_ids) - 1) / (t_end - self._t_first)


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
    from ``n_before`` answer tokens: a quote before the answer is not counted). A loop ends the answer
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
