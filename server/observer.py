"""What the engine reports as it goes: the interface server/metrics.py implements."""

from __future__ import annotations

from typing import Protocol


class Observer(Protocol):
    """Called on the engine thread; an implementation must not block it."""

    def observe_answer(self, stats: dict) -> None: ...
    def observe_step(self, n_seqs: int, mtp_batched: int) -> None: ...
    def observe_rebuild(self) -> None: ...
