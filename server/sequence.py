"""A question being answered: its sequence in the KV cache and everything decoding it needs."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from server.hot import HotDoc
from server.jobs import AnswerJob
from spec.lookup import LookupDrafter
from spec.loop import Answer, AnswerRun, AnswerStats
from spec.mtp import MtpDrafter


@dataclass(eq=False)
class Sequence:
    """Question ``job`` in ``seq_id``, which holds the document prefix (shared cells of the document
    sequence), then ``suffix`` (the question's tokens), then the answer so far.

    The suffix is prefilled a chunk per engine step (``n_prefilled`` of it so far); the answer starts
    once it is all in (:attr:`prefilling` false)."""

    job: AnswerJob
    seq_id: int
    hot: HotDoc  # the document: prefix ids, lookup index, citation index
    suffix: np.ndarray  # int32 [n_suffix]
    lookup: LookupDrafter
    mtp: MtpDrafter | None
    answer: Answer
    cells: int  # KV cells reserved beyond the shared prefix (question + answer + a window)
    parts: list[str] = field(default_factory=list)  # the answer's text, as sent
    n_prefilled: int = 0  # suffix tokens decoded so far
    n_running: int = 0  # other answers running (or prefilling) when it was admitted
    document_state: str = "hot"  # where admission found the document: hot / restored / prefilled

    @property
    def prefilling(self) -> bool:
        return self.n_prefilled < len(self.suffix)

    @property
    def n_prefix(self) -> int:
        return len(self.hot.prefix)


def open_sequence(
    job: AnswerJob, hot: HotDoc, suffix: np.ndarray, seq_id: int, loaded, mtp: MtpDrafter | None, cells: int
):
    """The Sequence of question ``job`` in ``seq_id``, which holds ``hot``'s prefix; its suffix is
    still to be prefilled. ``loaded``: the engine's model and contexts (server/loading.py)."""
    model, layout = loaded.model, loaded.layout
    lookup = LookupDrafter(hot.index, model.piece, model.unspaced)
    stats = AnswerStats(prompt_tokens=len(suffix), cached_tokens=len(hot.prefix))
    params = job.params if job.params.stops is not None else replace(job.params, stops=layout.stops)
    run = AnswerRun(
        loaded.ctx, model, lookup, len(hot.prefix) + len(suffix), stats, job.t_start, seq_id, mtp,
        loaded.max_window, loaded.costs, job.cancelled.is_set,
    )  # fmt: skip
    return Sequence(job, seq_id, hot, suffix, lookup, mtp, Answer(run, params), cells)
