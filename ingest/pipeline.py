"""The upload side of ingestion, shared by upload and re-ingest:
extract -> normalise -> (cut) -> budget check -> lay out and tokenize; then store/writes.py stores it.

Extraction (which normalises the text: ingest/extract.py, ingest/normalize.py) runs in the bounded
worker process (ingest/worker.py); the rest runs in the server process, off the event loop and off
the engine thread. The budget is checked before the text is tokenized in full (ingest/budget.py).
The engine then prefills the stored prefix (server/engine/ingestion.py). A document over the budget is
refused (413), or, with :class:`Segmenting`, split into segments that each fit (ingest/segments.py),
each stored with its own prefix and prefilled on its own.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from ingest import segments as segs
from ingest.budget import Budget, count_leading, too_long
from ingest.cut import Cut
from ingest.extract import ExtractedText
from ingest.prompt import PromptLayout, Tokenizer


@dataclass(frozen=True, slots=True)
class Segmenting:
    """How a document over the budget is taken: split with ``overlap`` tokens between neighbouring
    segments, into at most ``max_segments`` segments (more: 413)."""

    overlap: int
    max_segments: int


@dataclass(frozen=True, slots=True)
class Prepared:
    """A document ready to store: its text and page map, and its prompt prefix (int32 [n_tokens]);
    a segmented one has an empty ``prefix`` and a prefix per segment instead."""

    extracted: ExtractedText
    prefix: np.ndarray
    segments: tuple[segs.Segment, ...] = ()
    segment_prefixes: tuple[np.ndarray, ...] = ()

    @property
    def n_tokens(self) -> int:
        """Prefix tokens to prefill: the document's, or every segment's (overlaps counted twice)."""
        return len(self.prefix) + sum(len(p) for p in self.segment_prefixes)


def sha256(data: bytes, cut: Cut | None = None) -> str:
    """The identity of an upload: the same bytes (and the same part of them) are the same document."""
    digest = hashlib.sha256(data)
    if cut is not None:
        digest.update(b"\0" + cut.spec.encode())
    return digest.hexdigest()


def prepare(
    extracted: ExtractedText,
    layout: PromptLayout,
    tokenizer: Tokenizer,
    budget: Budget,
    segmenting: Segmenting | None = None,
) -> Prepared:
    """Check the budget while counting (ingest/budget.py), then lay out and tokenize. Over
    ``budget.limit`` tokens: split into segments with ``segmenting``, else raise DocumentTooLong with
    the largest leading part that fits."""
    room = budget.limit - layout.n_head(tokenizer) - layout.n_between(tokenizer)
    count = count_leading(extracted, tokenizer, room)
    if not count.complete:
        n_chars = len(extracted.text) + extracted.omitted_chars
        if segmenting is not None and not extracted.omitted_chars:
            return _segmented(extracted, layout, tokenizer, budget, segmenting, count, room)
        raise too_long(extracted, count, count.estimate(n_chars), budget, room)
    prefix = layout.document_prefix(tokenizer, extracted.text)
    if len(prefix) > budget.limit:
        if segmenting is not None:
            return _segmented(extracted, layout, tokenizer, budget, segmenting, count, room)
        raise too_long(extracted, count, len(prefix), budget, room)
    return Prepared(extracted, prefix)


def _segmented(extracted, layout, tokenizer, budget: Budget, segmenting: Segmenting, count, room) -> Prepared:
    """Split a document over the budget; DocumentTooLong when it needs over ``max_segments``."""
    try:
        segments, prefixes = segs.split(extracted, layout, tokenizer, budget.limit, segmenting.overlap)
    except ValueError:
        raise too_long(extracted, count, count.estimate(len(extracted.text)), budget, room) from None
    if len(segments) > segmenting.max_segments:
        raise too_long(extracted, count, sum(len(p) for p in prefixes), budget, room)
    return Prepared(extracted, np.empty(0, np.int32), tuple(segments), tuple(prefixes))
