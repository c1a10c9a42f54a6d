"""Answers from the part of a document read so far, while its first reading goes on (issue 52).

What an ingestion has prefilled is a valid prefix: its sequence holds the KV cells (and a hybrid
model's recurrent state) of the first ``n_done`` prefix tokens, which answer a question about those
tokens as a shorter document would. A question asked meanwhile shares them by ``seq_cp`` at its
admission, on the engine thread between two chunks, so the reading is exactly at ``n_done``
(a recurrent state is shared copy-on-write: the reading's next chunk and the question each go on
from it in a cell of their own). The reading goes on in its own sequence and is never restarted. The
question then decodes the layout's tokens after the document (closing it as the whole prefix does)
and its own suffix. Its quote index, prompt-lookup index and citations are made from the tokens read
(:class:`ReadSoFar`), so a question whose answer lies beyond them is refused like any absent fact.

The model drafters (the MTP head, a draft model) follow the reading in their own contexts, chunk by
chunk (server/engine/companions.py ``prefill``), so each holds the read position too: a question
shares their cells there as well (``Companions.share_reading``) and drafts with them as with a
whole document. Engine thread only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ingest.prompt import PromptLayout
from runtime.llama import Model
from server.engine.hot import HotDoc


class Reading(Protocol):
    """A reading under way (server/engine/ingestion.py ``Ingestion``), as a question asked meanwhile sees it."""

    prefix: np.ndarray  # int32 [n]: the document's whole prefix
    n_done: int  # of it prefilled so far
    seq_id: int  # the sequence that holds them


@dataclass(frozen=True, slots=True)
class ReadSoFar:
    """A document read up to ``n_shared`` prefix tokens, as a question about it sees it.

    ``hot.prefix``: those tokens, then the layout's tokens after the document (int32 [n]); a
    question's sequence shares the first ``n_shared`` of them and decodes the rest before its suffix.
    ``chars``: characters of the document's text read; ``share``: of its tokens read (0..1]."""

    doc_id: str
    hot: HotDoc
    n_shared: int
    chars: int
    share: float

    @property
    def n_closing(self) -> int:
        """Tokens decoded after the shared ones to close the document (the layout's)."""
        return len(self.hot.prefix) - self.n_shared


class PartialReads:
    """The part read so far of the documents being read, made at a question's admission. The last one
    made is kept, so the questions asked at one read position share its quote and lookup indexes
    (O(tokens read) to make; nothing per answer step)."""

    def __init__(self, model: Model, layout: PromptLayout) -> None:
        self.model, self.layout = model, layout
        self._last: ReadSoFar | None = None

    def of(self, doc_id: str, prefix: np.ndarray, n_done: int) -> ReadSoFar | None:
        """``doc_id``'s stored prefix (int32 [n]) read up to ``n_done`` tokens, as a question sees it;
        None while none of the document's own tokens is read (or for a prefix this layout does not
        frame: one made before a change of wording, which then waits for its reading to end)."""
        span = self.layout.document_span(self.model, prefix)
        if span is None:
            return None
        n_head, n_doc = span
        n_read = min(n_done, n_head + n_doc) - n_head
        if n_read <= 0:
            return None
        last = self._last
        if last is not None and last.doc_id == doc_id and last.n_shared == n_done:
            return last
        closing = prefix[max(n_done, n_head + n_doc) :]
        tokens = np.concatenate([prefix[:n_done], closing]).astype(np.int32)
        hot = HotDoc(prefix=tokens, state=None)  # its lookup index: server/engine/drafters.py LookupIndexes
        text = b"".join(self.model.piece(int(t)) for t in prefix[n_head : n_head + n_read])
        chars = len(text.decode("utf-8", errors="replace").lstrip(" "))
        self._last = ReadSoFar(doc_id, hot, n_done, chars, n_read / max(1, n_doc))
        return self._last
