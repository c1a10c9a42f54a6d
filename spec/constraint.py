"""A constraint on an answer's tokens, after vLLM's structured-output grammars: which tokens a row may
take, the tokens it has taken, scaffolding it forces (jump-forward decoding), and when it no longer
applies. Quote-first answers are the served one (spec/quote.py ``QuoteConstraint``).

The answer loop (spec/loop.py ``Answer``) holds at most one constraint and applies it the same way to
every row: while it is active, each row's token is :meth:`Constraint.choose`'s and goes to
:meth:`Constraint.push`, row after row in a verify step (a row's allowed tokens follow the tokens
before it), and the step ends where the constraint's state stops matching the draft; tokens it forces
are decoded as a step's rows without being chosen, and the row after them is chosen again. Once
:attr:`Constraint.done`, the rest of the answer is the sampler's free choice. Speculative decoding
stays exact: a speculative run applies the same choice to the same rows as a plain run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from spec.events import TokenEvent
from spec.sampling import Sampler


class Constraint(Protocol):
    """A rule over an answer's first tokens. Every method runs on the thread that decodes the answer."""

    @property
    def done(self) -> bool:
        """The constraint no longer shapes the answer: the tokens from here on are the answer's own,
        chosen freely (also True once it ended the answer: :attr:`finish`)."""
        ...

    @property
    def finish(self) -> str | None:
        """Why the constraint ended the answer (a finish reason: "stop"), or None while it has not."""
        ...

    def forced(self) -> list[int]:
        """Tokens to decode next as given, before the next row is chosen (scaffolding: jump-forward).
        Empty when the next row is chosen."""
        ...

    def choose(self, sampler: Sampler, row: np.ndarray) -> int:
        """The token of the row whose logits are ``row`` (float32 [n_vocab]): the sampler's choice among
        the tokens the constraint allows. Greedy takes the allowed id with the highest logit; sampling
        draws from the distribution renormalised over them."""
        ...

    def push(self, token: int) -> list[TokenEvent]:
        """Take ``token`` (chosen by :meth:`choose`, or forced by :meth:`forced`); returns what the
        answer shows for it now (often nothing: a quote is shown once it stands)."""
        ...


#: What a step decided: its tokens, how many of them (leading) the constraint took, what the constraint
#: showed for them, and the finish reason it gave (None: the answer goes on).
Decided = tuple[list[int], int, list[TokenEvent], str | None]


def decide(
    constraint: Constraint, sampler: Sampler, forced: list[int], row: np.ndarray, is_eog: Callable[[int], bool]
) -> Decided:
    """The ``forced`` tokens, each given to ``constraint``, then the token of ``row`` (float32
    [n_vocab]): the next forced token when the constraint forces more than the step held (scaffolding
    longer than a verify window is never chosen over), else the constraint's choice while it is active
    (given to it too), else the sampler's. An end-of-generation token chosen inside the constraint ends
    the answer ("stop"), unless the choice began scaffolding (the constraint forces more after it: a
    chat turn ends with one before the next turn starts)."""
    events: list[TokenEvent] = []
    for token in forced:
        events += constraint.push(token)
    if constraint.done:
        return [*forced, sampler.choose(row)], len(forced), events, None
    pending = constraint.forced()
    if pending:  # the forced tokens went on past the step's rows (a step verifies at most a window of them)
        token = pending[0]
        events += constraint.push(token)
        return [*forced, token], len(forced) + 1, events, constraint.finish
    token = constraint.choose(sampler, row)
    if is_eog(token) and not constraint.forced():  # scaffolding may start with one: a chat turn's end
        return [*forced, token], len(forced), events, "stop"
    events += constraint.push(token)
    return [*forced, token], len(forced) + 1, events, constraint.finish


def verify(
    constraint: Constraint, sampler: Sampler, rows: np.ndarray, draft: list[int], is_eog: Callable[[int], bool]
) -> Decided:
    """spec/verify.py's rule over a verify step's ``rows`` (float32 [k + 1, n_vocab]) with the
    constraint's choice at each row: each choice is given to the constraint before the next row is
    chosen (a row's allowed tokens follow the tokens before it); the step ends where a choice differs
    from ``draft``, or where the constraint stops choosing (it forces tokens, is done, or ended the answer)."""
    tokens: list[int] = []
    events: list[TokenEvent] = []
    n_took, finish = 0, None
    for i in range(len(draft) + 1):
        decided, took, shown, finish = decide(constraint, sampler, [], rows[i], is_eog)
        tokens += decided
        n_took += took
        events += shown
        if finish is not None or constraint.done or constraint.forced():
            break
        if i == len(draft) or tokens[-1] != draft[i]:
            break
    return tokens, n_took, events, finish


def choose_among(sampler: Sampler, row: np.ndarray, allowed: np.ndarray) -> int:
    """The sampler's choice from ``row`` (float32 [n_vocab]) restricted to ``allowed`` (int64 ids, not
    empty): the allowed id with the highest logit when greedy, else a draw from the distribution
    renormalised over them (every other logit set to -inf), so one draw per token as unconstrained."""
    if sampler.params.greedy:
        return int(allowed[int(np.argmax(row[allowed]))])
    masked = np.full_like(row, -np.inf)
    masked[allowed] = row[allowed]
    return sampler.choose(masked)
