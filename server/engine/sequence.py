"""A question being answered: its sequence in the KV cache and everything decoding it needs."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from server.engine import drafters, quotes
from server.engine.hot import HotDoc
from server.engine.jobs import AnswerJob
from server.engine.partial import ReadSoFar
from spec.history import AnswerHistory
from spec.lookup import LookupDrafter, NgramIndex
from spec.loop import Answer, AnswerRun, AnswerStats
from spec.sources import Drafter

#: The sequence that holds the prefix of the document in use (server/engine/hot.py); questions get
#: sequences 1..n_seq_max, and a parallel ingestion the one after them (server/engine/scheduler.py).
DOC_SEQ = 0


@dataclass(eq=False)
class Sequence:
    """Question ``job`` in ``seq_id``, which holds the document prefix (shared cells of the document
    sequence), then the question's suffix (``job.suffix``), then the answer so far.

    The suffix is prefilled a chunk per engine step (``n_prefilled`` of it so far); the answer starts
    once it is all in (:attr:`prefilling` false)."""

    job: AnswerJob
    seq_id: int
    hot: HotDoc  # the document's cache entry: its prefix ids, and the key of what features keep for it
    n_prefix: int  # the document prefix's tokens, shared from the document sequence (or a reading's)
    suffix: np.ndarray  # int32 [n_suffix]: the ids after the shared prefix (any closing ones, then job.suffix)
    answer: Answer
    cells: int  # KV cells reserved beyond the shared prefix (question + answer + a window)
    parts: list[str] = field(default_factory=list)  # the answer's text, as sent
    n_prefilled: int = 0  # suffix tokens decoded so far
    n_running: int = 0  # other answers running (or prefilling) when it was admitted
    document_state: str = "hot"  # where admission found the document: hot / restored / prefilled / reading
    read: ReadSoFar | None = None  # answered from the part read so far (server/engine/partial.py)

    @property
    def shares_doc_seq(self) -> bool:
        """Its prefix is shared from the document sequence (not from a reading's sequence)."""
        return self.read is None

    @property
    def prefilling(self) -> bool:
        return self.n_prefilled < len(self.suffix)

    @property
    def lookup(self) -> LookupDrafter:
        """The prompt-lookup drafter: its accepted copies are the answer's ``lookup`` citations."""
        return self.answer.drafters["lookup"]


def open_sequence(
    job: AnswerJob,
    hot: HotDoc,
    seq_id: int,
    loaded,
    cells: int,
    shared: dict[str, Drafter] | None = None,
    history: AnswerHistory | None = None,
    n_shared: int | None = None,
    *,
    index: NgramIndex,
) -> Sequence:
    """The Sequence of question ``job`` in ``seq_id``, which holds ``hot``'s prefix; its suffix is
    still to be prefilled. ``loaded``: the engine's model and contexts (server/engine/loading.py);
    ``shared``: the model sources' drafters, from the companions that shared the prefix
    (server/engine/runner.py ``Runner.share_prefix``); ``n_shared``: of ``hot.prefix``'s tokens, those
    the sequence holds (default all); the rest are prefilled before the question's suffix (a document
    read so far: server/engine/partial.py); ``index``: ``hot``'s n-gram index, for the lookup drafter
    (server/engine/drafters.py ``LookupIndexes``)."""
    model = loaded.model
    n_shared = len(hot.prefix) if n_shared is None else n_shared
    stats = AnswerStats(prompt_tokens=len(job.suffix), cached_tokens=n_shared)
    made = drafters.for_sequence(job, index, model, shared or {}, history)
    n_past = len(hot.prefix) + len(job.suffix)
    run = AnswerRun(
        loaded.ctx,
        model,
        made,
        n_past,
        stats,
        job.t_start,
        seq_id,
        loaded.max_window,
        loaded.costs,
        job.cancelled.is_set,
    )
    constraint = quotes.constraint(job, hot, loaded)
    answer = Answer(run, quotes.answer_params(job.params, constraint), constraint)
    suffix = job.suffix if n_shared == len(hot.prefix) else np.concatenate([hot.prefix[n_shared:], job.suffix])
    return Sequence(job, seq_id, hot, n_shared, suffix, answer, cells)
