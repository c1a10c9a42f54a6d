"""Citations of finished answers, computed on a worker thread so the model thread goes straight on
to the next decode step. The worker then sends the answer's last events in order: ``citations``,
``stats``, ``done``.

A document's citation index (spec/cite.py) is built at its first answer and kept on its HotDoc;
citing one answer is O(answer words). One worker, so an index is never built twice at once.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

from ingest.prompt import PromptLayout
from ingest.store import DocStore
from runtime.llama import Model
from server.hot import HotDoc
from server.sequence import Sequence
from spec.cite import CitationIndex, TokenOffsets

log = logging.getLogger("docqa.engine")


class Citations:
    def __init__(self, store: DocStore, model: Model, layout: PromptLayout) -> None:
        self.store, self.model, self.layout = store, model, layout
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="docqa-cite")

    def finish(self, seq: Sequence, stats: dict) -> None:
        """Cite ``seq``'s answer off the model thread, then send citations, stats and done."""
        copied = list(seq.lookup.copied)  # document token ranges of accepted lookup drafts
        self._pool.submit(self._cite_and_send, seq.job, seq.job.doc_id, seq.hot, "".join(seq.parts), copied, stats)

    def close(self) -> None:
        """Finish what was submitted, then stop the worker."""
        self._pool.shutdown(wait=True)

    def _cite_and_send(self, job, doc_id: str, hot: HotDoc, text: str, copied: list[tuple[int, int]], stats: dict):
        try:
            index, offsets = self.index(doc_id, hot)
            citations = [c.as_dict() for c in index.cite(text, [offsets.chars(a, b) for a, b in copied])]
        except Exception:  # citations are a courtesy; never lose the answer over them
            log.exception("citations failed for %s", doc_id)
            citations = []
        job.emit("citations", {"citations": citations})
        job.emit("stats", stats)
        job.emit("done", {})

    def index(self, doc_id: str, hot: HotDoc) -> tuple[CitationIndex, TokenOffsets]:
        """The document's citation index and token offsets, built at its first answer."""
        if hot.citations is None:
            extracted = self.store.read_text(doc_id)
            n_head, n_between = self.layout.n_head(self.model), self.layout.n_between(self.model)
            n_doc = len(hot.prefix) - n_head - n_between
            offsets = TokenOffsets(hot.prefix, n_head, n_doc, extracted.text, self.model.piece)
            index = CitationIndex(extracted.text, extracted.page_starts, first_page=extracted.first_page)
            hot.citations = index, offsets
        return hot.citations
