"""The answer loop: draft, verify, accept, roll back, stream.

Cursor invariant: at the top of each step the sequence holds every token up to position
``n_past - 1``, and ``last`` (the newest emitted token, position ``n_past``) is not yet decoded.
A verify step decodes ``[last, *draft]``; after accepting ``m`` drafts the cells at positions
``>= n_past + 1 + m`` are removed, and the target's own token becomes the new ``last``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from runtime.llama import Context, Model
from spec.cost import StepCosts
from spec.draft import DraftConfig, DraftPolicy
from spec.lookup import LookupDrafter
from spec.mtp import MtpDrafter
from spec.sampling import Sampler, SamplingParams
from spec.text import TextStream
from spec.verify import verify


class RollbackFailed(Exception):
    """``llama_memory_seq_rm`` refused, or left the sequence at the wrong position."""


@dataclass(frozen=True, slots=True)
class AnswerParams:
    max_tokens: int
    sampling: SamplingParams
    window: int | None  # draft tokens per verify step; None = adaptive; 0 = no speculation
    stops: tuple[str, ...] | None = None  # None: the prompt layout's default stop strings
    sources: tuple[str, ...] = ("mtp", "lookup")  # drafters allowed to fill the window
    n_mtp: int = 2  # MTP draft tokens per step

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.window is not None and not 0 <= self.window <= 16:
            raise ValueError(f"window must be in 0..16, got {self.window}")


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
    finish_reason: str = "stop"  # stop | length | cancelled
    drafted_by_source: dict[str, int] = field(default_factory=dict)  # "mtp" / "lookup"
    accepted_by_source: dict[str, int] = field(default_factory=dict)
    mean_accepted_per_step: float = 0.0  # accepted draft tokens per verify step


@dataclass(frozen=True, slots=True)
class TokenEvent:
    text: str  # UTF-8 safe text delta, possibly "" while a stop string is undecided
    token_ids: tuple[int, ...]
    n_accepted: int  # drafts accepted in the step that produced these tokens


@dataclass(slots=True)
class AnswerRun:
    """Everything :func:`generate` needs about the sequence it continues."""

    ctx: Context
    model: Model
    drafter: LookupDrafter | None
    n_past: int  # position of the first answer token; the last decode left its logits row
    stats: AnswerStats
    t_start: float  # perf_counter() when the request arrived, for TTFT
    seq_id: int = 0
    mtp: MtpDrafter | None = None  # the model's MTP head, when it has one and it is enabled
    max_window: int = 16  # rollback limit of the context (n_rs_seq on hybrid models)
    costs: StepCosts | None = None  # measured verify/MTP step costs, for the adaptive window
    should_stop: Callable[[], bool] = lambda: False
    # Rebuilds the sequence as document prefix + question + the given answer tokens (used when a
    # rollback fails); returns the new n_past.
    recover: Callable[[list[int]], int] | None = None


def generate(run: AnswerRun, params: AnswerParams) -> Iterator[TokenEvent]:
    """Yield TokenEvents until EOS, a stop string, ``max_tokens``, a full context or cancellation.

    ``run.stats`` is filled in as it goes; read it after the iterator ends.
    """
    ctx, model, drafter, stats = run.ctx, run.model, run.drafter, run.stats
    sampler = Sampler(params.sampling)
    stream = TextStream(params.stops or ())
    config = DraftConfig(params.window, params.sources, params.n_mtp)
    policy = DraftPolicy(config, drafter, run.mtp, run.costs)
    answer: list[int] = []
    n_past = run.n_past
    decided = [sampler.choose(ctx.logits()[-1])]
    n_accepted = 0
    t_first = time.perf_counter()
    stats.ttft_ms = (t_first - run.t_start) * 1000.0
    try:
        while True:
            text, finish, used = _emit(model, stream, decided, answer, params.max_tokens)
            if text or used:
                yield TokenEvent(text=text, token_ids=tuple(decided[:used]), n_accepted=n_accepted)
            if finish:
                stats.finish_reason = finish
                break
            if run.should_stop():
                stats.finish_reason = "cancelled"
                break
            room = min(params.max_tokens - len(answer), ctx.n_ctx - n_past) - 1
            if room < 0:
                stats.finish_reason = "length"
                break
            room = min(room, run.max_window)
            if drafter is not None:
                drafter.extend(decided)
            last = answer[-1]
            draft = policy.propose(last, n_past, room)
            result = verify(ctx, sampler, last, draft.tokens, n_past, run.seq_id)
            if run.mtp is not None:
                run.mtp.process([last, *draft.tokens], n_past)
            n_accepted = result.n_accepted
            stats.verify_steps += 1
            stats.drafted_tokens += len(draft.tokens)
            stats.accepted_tokens += n_accepted
            policy.observe(draft, n_accepted, result.tokens[-1])
            n_keep = n_past + 1 + n_accepted
            if n_accepted < len(draft.tokens):
                n_keep = _rollback(run, n_keep, answer, result.tokens[:n_accepted])
            if run.mtp is not None:
                run.mtp.accept(n_keep)
            n_past = n_keep
            decided = result.tokens
        tail = stream.flush()
        if tail:
            yield TokenEvent(text=tail, token_ids=(), n_accepted=0)
    finally:
        t_end = time.perf_counter()
        stats.completion_tokens = len(answer)
        stats.drafted_by_source = dict(policy.stats.drafted)
        stats.accepted_by_source = dict(policy.stats.accepted)
        if stats.verify_steps:
            stats.mean_accepted_per_step = stats.accepted_tokens / stats.verify_steps
        if len(answer) > 1 and t_end > t_first:
            stats.decode_tokens_per_s = (len(answer) - 1) / (t_end - t_first)


def _emit(
    model: Model, stream: TextStream, decided: list[int], answer: list[int], max_tokens: int
) -> tuple[str, str | None, int]:
    """Append decided tokens to the answer until EOS, a stop string or max_tokens.

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
        if len(answer) >= max_tokens:
            return "".join(out), "length", used
    return "".join(out), None, len(decided)


def _rollback(run: AnswerRun, n_keep: int, answer: list[int], accepted: list[int]) -> int:
    """Remove cells at positions >= n_keep; verify the sequence ends at n_keep - 1.

    ``seq_rm`` can return True and still leave the wrong state (a sliding-window cache, notes §5),
    so the position range is checked too. On failure the sequence is rebuilt through
    ``run.recover`` from the document snapshot plus ``answer + accepted`` (the answer tokens that must
    be in the cache; joined only then, so a normal step does no work that grows with the answer).
    Returns the position of the next token.
    """
    ctx = run.ctx
    if ctx.seq_rm(run.seq_id, n_keep) and ctx.pos_max(run.seq_id) == n_keep - 1:
        return n_keep
    if run.recover is None:
        raise RollbackFailed(f"could not roll back sequence {run.seq_id} to {n_keep} tokens")
    n_past = run.recover(answer + accepted)
    if n_past != n_keep:
        raise RollbackFailed(f"recovery rebuilt {n_past} positions, expected {n_keep}")
    return n_past
