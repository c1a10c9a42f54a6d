"""The questions in the running batch, and the MTP work they share.

Each active question has its own sequence, answer state and lookup drafter. With several of them
drafting by MTP, their drafts and their MTP catch-up after each verify run as shared MTP decodes
(spec.mtp.draft_many / process_many): n_mtp + 1 calls per step instead of (n_mtp + 1) x questions.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from server.hot import HotDoc
from server.jobs import AnswerJob
from spec.lookup import LookupDrafter
from spec.loop import Answer
from spec.mtp import draft_many, process_many

log = logging.getLogger("docqa.engine")


@dataclass(eq=False)
class Active:
    """A question being answered in sequence ``seq``."""

    job: AnswerJob
    seq: int
    answer: Answer
    hot: HotDoc
    drafter: LookupDrafter
    cells: int  # KV cells reserved beyond the shared prefix (question + answer + a window)
    suffix: np.ndarray  # the question's tokens after the prefix
    parts: list[str] = field(default_factory=list)
    replay: list[int] | None = None  # answer tokens to rebuild the sequence from, after a failed rollback


def draft_mtp_together(actives: list[Active]) -> int:
    """MTP drafts for every question that may use them, one MTP decode per depth for all; each
    drafter serves its policy's request from them. Returns the MTP decodes made (0: nothing shared,
    or it failed and the drafters draft one by one as usual)."""
    want = [a for a in actives if a.answer.wants_mtp and a.answer.run.mtp is not None]
    if len(want) < 2:
        return 0
    depth = max(a.answer.params.n_mtp for a in want)
    drafters = [a.answer.run.mtp for a in want]
    try:
        draft_many(drafters, [a.answer.last for a in want], [a.answer.n_past for a in want], depth)
    except Exception:
        log.exception("batched MTP drafting failed; drafting per sequence")
        for d in drafters:
            d.reset(d.pending_h)
        return 0
    return depth


def process_mtp_together(group: list[tuple[Active, list[int]]], hidden: np.ndarray) -> bool:
    """Feed every question's verify rows (``group``: question and its rows, in batch order; ``hidden``:
    the target's hidden states of the whole call) to the MTP context in one decode. True if done;
    False leaves it to each answer's finish()."""
    if len(group) < 2 or any(a.answer.run.mtp is None for a, _ in group):
        return False
    offsets = np.cumsum([0] + [len(rows) for _, rows in group])
    try:
        process_many(
            [a.answer.run.mtp for a, _ in group],
            [rows for _, rows in group],
            [a.answer.n_past for a, _ in group],
            [hidden[offsets[i] : offsets[i + 1]] for i in range(len(group))],
        )
    except Exception:
        log.exception("batched MTP catch-up failed; processing per sequence")
        return False
    return True
