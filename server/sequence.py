"""A question being answered: its sequence in the KV cache and everything decoding it needs."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from server.hot import HotDoc
from server.jobs import AnswerJob
from spec.lookup import LookupDrafter
from spec.loop import Answer
from spec.mtp import MtpDrafter


@dataclass(eq=False)
class Sequence:
    """Question ``job`` in ``seq_id``, which holds the document prefix (shared cells of the document
    sequence), then ``suffix`` (the question's tokens), then the answer so far."""

    job: AnswerJob
    seq_id: int
    hot: HotDoc  # the document: prefix ids, lookup index, citation index
    suffix: np.ndarray  # int32 [n_suffix]
    lookup: LookupDrafter
    mtp: MtpDrafter | None
    answer: Answer
    cells: int  # KV cells reserved beyond the shared prefix (question + answer + a window)
    parts: list[str] = field(default_factory=list)  # the answer's text, as sent

    @property
    def n_prefix(self) -> int:
        return len(self.hot.prefix)
