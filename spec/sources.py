"""The draft sources: the two protocols every drafter implements, and the registry of sources by name.

A source is a module with a drafter class and its entry in :data:`REGISTRY`. A *text* source
proposes a candidate at no cost (its tokens are known before the policy decides) and is made for an
answer from what the answer is about (:class:`DraftInputs`, by its entry's ``make``): adding one is
its module plus one :func:`register` line (or one line in the tuple below). A *model* source costs a
decode per drafted token and drafts for many sequences at once (:meth:`ModelDrafter.propose_many`);
its drafters come from a context of its own that follows the target (a companion,
server/engine/companions.py), so adding one is its module here and a companion there. The policy
(spec/draft.py), the answer's stats, the metrics, the ``draft_source`` request field and the page
read the names from here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from spec.history import AnswerHistory, HistoryDrafter
from spec.lookup import LookupDrafter, NgramIndex


class Drafter(Protocol):
    """One sequence's drafter of one source. The cursor of spec/loop.py: ``last`` (the newest emitted
    token) sits at ``pos``, undecoded; the sequence holds every position before it."""

    def extend(self, tokens: Sequence[int]) -> None:
        """The context grew by ``tokens`` (the question's, then each step's emitted ones)."""

    def propose(self, k: int, after: Sequence[int] = (), *, last: int = 0, pos: int = 0) -> list[int]:
        """Up to ``k`` tokens to verify after ``last`` at ``pos`` (and after ``after``, tokens another
        source drafted before them in the same window)."""

    def observe(self, used: int, accepted: int, target: int, step_drafted: int) -> None:
        """The step's outcome: ``used`` of this drafter's proposed tokens were in the draft, and
        ``accepted`` of them were accepted (-1: an earlier source's tokens were rejected first), then
        the target chose ``target``; ``step_drafted``: the draft's tokens from every source."""

    def rollback(self, n_keep: int) -> None:
        """The sequence now ends at position ``n_keep - 1`` (rejected positions were removed)."""


class TextDrafter(Drafter, Protocol):
    """A drafter whose candidate is free: the policy reads it before it decides."""

    def strong(self) -> bool:
        """The next candidate is likely good (a live copy cursor, a full-length n-gram match): a fixed
        window takes it whole, and the adaptive policy prices it at the strong rate."""

    def agreement(self) -> int:
        """Tokens of the context that already agree with the source of the last candidate, just
        before it (spec/lookup.py ``LookupDrafter.agreement``): a long one is priced at the long rate."""


class ModelDrafter(Drafter, Protocol):
    """A drafter that decodes to draft: the policy plans how many tokens it makes before any is made."""

    depth: int  # the most tokens one step asks of it (the policy's plans go up to it)

    @staticmethod
    def propose_many(drafters: list, lasts: list[int], positions: list[int], n: int) -> list[list[int]]:
        """``n`` drafts for each of several sequences of one context, in one decode per depth: each
        drafter's after its ``last`` at its position."""


@dataclass(frozen=True, slots=True)
class DraftInputs:
    """What a text drafter is made from, for one answer: the document prefix's n-gram index, the
    tokenizer's ``piece`` (id -> bytes) and ``unspaced`` (id -> the ids of its text without leading
    whitespace), the document's answer history (None: off), and the earlier turns the request brings
    (int32 token arrays)."""

    index: NgramIndex
    piece: Callable[[int], bytes] | None = None
    unspaced: Callable[[int], list[int]] | None = None
    history: AnswerHistory | None = None
    earlier: tuple[np.ndarray, ...] = ()


def _lookup(inputs: DraftInputs) -> LookupDrafter:
    """Prompt lookup in the document and the answer so far."""
    return LookupDrafter(inputs.index, inputs.piece, inputs.unspaced)


def _history(inputs: DraftInputs) -> HistoryDrafter | None:
    """Earlier answers' drafter: none without a history, or with an empty one and no earlier turns."""
    h = inputs.history
    if h is None or not (len(h) or inputs.earlier):
        return None
    return HistoryDrafter(h, inputs.piece, inputs.unspaced, earlier=inputs.earlier)


@dataclass(frozen=True, slots=True)
class Source:
    name: str  # as in stats, metrics and the request's draft_source
    kind: Literal["text", "model"]
    about: str  # one line, for /health and the page
    #: text sources: the answer's drafter (None: nothing to draft from for this answer)
    make: Callable[[DraftInputs], TextDrafter | None] | None = None


#: Every source, in priority order (a fixed window takes the longest strong text candidate, the first of
#: equals in this order, else the first model source). Earlier answers come first: a continuation they
#: share with the context (a conversation's earlier answer is in it) is an answer copied.
REGISTRY: tuple[Source, ...] = (
    Source("history", "text", "earlier answers about the document: repeated questions at copy speed", _history),
    Source("lookup", "text", "prompt lookup: continues the longest match in the document and the question", _lookup),
    Source("mtp", "model", "the model's own multi-token-prediction head"),
    Source("draft", "model", "a separate small draft model sharing the vocabulary"),
)
NAMES: tuple[str, ...] = tuple(s.name for s in REGISTRY)
KINDS: dict[str, str] = {s.name: s.kind for s in REGISTRY}
BY_NAME: dict[str, Source] = {s.name: s for s in REGISTRY}


def register(source: Source) -> Source:
    """Add ``source`` after the others (a text source needs its ``make``). Read the names through this
    module (``sources.NAMES``) to see it: a name imported before is the tuple of that time."""
    global REGISTRY, NAMES
    if source.name in BY_NAME:
        raise ValueError(f"a draft source named {source.name!r} is registered already")
    if source.kind == "text" and source.make is None:
        raise ValueError(f"text source {source.name!r} needs its make(inputs)")
    REGISTRY, NAMES = (*REGISTRY, source), (*NAMES, source.name)
    KINDS[source.name], BY_NAME[source.name] = source.kind, source
    return source


def unregister(name: str) -> None:
    """Remove the source ``name`` (a test's own)."""
    global REGISTRY, NAMES
    REGISTRY = tuple(s for s in REGISTRY if s.name != name)
    NAMES = tuple(s.name for s in REGISTRY)
    KINDS.pop(name, None)
    BY_NAME.pop(name, None)


def text_drafters(inputs: DraftInputs) -> dict[str, TextDrafter]:
    """Each registered text source's drafter for an answer made from ``inputs``, by name (a source
    with nothing to draft from for it is left out)."""
    made = {s.name: s.make(inputs) for s in REGISTRY if s.kind == "text" and s.make is not None}
    return {name: d for name, d in made.items() if d is not None}
