"""The draft sources: one protocol every drafter implements, and the registry of sources by name.

A source is a module with a drafter class (implementing :class:`Drafter`), and its entry in
:data:`REGISTRY`: adding one is that module plus one line here. The policy (spec/draft.py), the
answer's stats, the metrics, the ``draft_source`` request field and the page read the names from
here.

Kinds: a *text* source proposes a candidate at no cost (its tokens are known before the policy
decides); a *model* source costs a decode per drafted token, and drafts for many sequences at once
(``Source.propose_many``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from spec import draft_model, mtp


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


@dataclass(frozen=True, slots=True)
class Source:
    name: str  # as in stats, metrics and the request's draft_source
    kind: Literal["text", "model"]
    about: str  # one line, for /health and the page
    # model sources: (drafters, lasts, positions, n) -> each sequence's n drafts, in one call per depth
    propose_many: Callable[[list, list[int], list[int], int], list[list[int]]] | None = None


#: Every source, in priority order (a fixed window takes the longest strong text candidate, the first of
#: equals in this order, else the first model source). Earlier answers come first: a continuation they
#: share with the context (a conversation's earlier answer is in it) is an answer copied.
REGISTRY: tuple[Source, ...] = (
    Source("history", "text", "earlier answers about the document: repeated questions at copy speed"),
    Source("lookup", "text", "prompt lookup: continues the longest match in the document and the question"),
    Source("mtp", "model", "the model's own multi-token-prediction head", mtp.draft_many),
    Source("draft", "model", "a separate small draft model sharing the vocabulary", draft_model.draft_many),
)
NAMES: tuple[str, ...] = tuple(s.name for s in REGISTRY)
KINDS: dict[str, str] = {s.name: s.kind for s in REGISTRY}
BY_NAME: dict[str, Source] = {s.name: s for s in REGISTRY}
