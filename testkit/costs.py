"""Step costs taken as the truth: a cost model that learns nothing, for the tests and offline replays
whose draft decisions must not depend on this machine's timing."""

from __future__ import annotations

from spec.cost import CostModel, StepCosts


class FixedCosts(CostModel):
    """``seed``'s prices, as measured: the level is known (1.0) from the start and no call moves it."""

    def __init__(self, seed: StepCosts) -> None:
        super().__init__(seed)
        self.level = 1.0

    def observe(self, rows: int, seconds: float) -> None:
        """Nothing is learnt."""

    def observe_draft(self, source: str, seconds: float, depth: int, n_seqs: int) -> None:
        """Nothing is learnt."""
