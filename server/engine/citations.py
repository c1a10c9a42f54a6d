"""Citations of finished answers, computed on a worker thread so the model thread goes straight on
to the next decode step. The worker then sends the answer's last events in order: ``citations``,
``stats``, ``done``.

A document's citation index (spec/cite.py) is built at its first answer and kept on its HotDoc;
citing one answer is O(answer words). One worker, so an index is never built twice at once. A
document deleted while its answer ran has no text left to cite: that answer ends with no citations,
and an INFO line rather than an error (its tokens came from the sequence it held, so they stand).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from weakref import WeakKeyDictionary

from ingest.locate import Locator
from ingest.prompt import PromptLayout, is_not_said
from ingest.segments import parse_key
from runtime.llama import Model
from server.engine import events, quotes
from server.engine.hot import HotDoc
from server.engine.repairs import Repairs
from server.engine.sequence import Sequence
from spec.cite import CitationIndex, TokenOffsets
from store.docstore import DocStore

log = logging.getLogger("docqa.engine")


class DocumentGone(Exception):
    """The document was deleted while its answer ran (its directory is gone)."""


@dataclass(frozen=True, slots=True)
class Quote:
    """A quote-first answer's quote as the worker cites it: its text (its document sentence), whether
    the model judged that it answers the question (``supports``), the prefix token positions ``[a, b)``
    of its sentence (None: no quote), the model's probability that it answers (None: not asked) and,
    for a refused answer, why."""

    text: str
    supports: bool
    tokens: tuple[int, int] | None
    support: float | None = None
    reason: str = ""
    refusal: str = ""  # spec/quote.py REFUSALS


class Citations:
    def __init__(self, store: DocStore, model: Model, layout: PromptLayout, repairs: Repairs | None = None) -> None:
        """``repairs``: how a damaged text or segment list is repaired and read again
        (server/engine/repairs.py); None: it is reported."""
        self.store, self.model, self.layout = store, model, layout
        self.repairs = repairs if repairs is not None else Repairs(store)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="docqa-cite")
        # HotDoc -> (citation index, token offsets, locator), built at its first answer and kept as long
        # as the cache entry; written only by this worker.
        self._built: WeakKeyDictionary = WeakKeyDictionary()

    def finish(self, seq: Sequence, stats: dict) -> None:
        """Cite ``seq``'s answer off the model thread, then send citations, stats and done. A
        quote-first answer is cited by its quote alone (the sentence of the document it is in)."""
        copied = list(seq.lookup.copied)  # document token ranges of accepted lookup drafts
        quote = None
        if (q := seq.answer.constraint) is not None and q.verdict is not None:  # cited by its sentence
            span, at = q.sentence(), quotes.document_at(seq.hot)
            tokens = None if span is None else (at + span[0], at + span[1])
            unread = seq.read is not None and q.refused
            reason = not_read_yet(q.reason, seq.read.share) if unread else q.reason
            quote = Quote(
                q.sentence_text(), not q.refused, tokens, q.p_yes, reason, "not_read_yet" if unread else q.refusal_kind
            )
        text = "".join(seq.parts)
        read = seq.read.chars if seq.read is not None else None
        self._pool.submit(self._cite_and_send, seq.job, seq.job.key, seq.hot, text, copied, stats, quote, read)

    def close(self) -> None:
        """Finish what was submitted, then stop the worker."""
        self._pool.shutdown(wait=True)

    def _cite_and_send(
        self, job, key: str, hot: HotDoc, text: str, copied, stats: dict, quote: Quote | None, read: int | None
    ):
        """``read``: for an answer from the part of the document read so far, its characters; nothing
        beyond them is cited."""
        passage = None  # a quote-first answer's passage (its sentence), cited when it supports the answer
        try:
            index, offsets, shift = self.index(key, hot)
            if quote is not None:
                found = index.quote(*offsets.chars(*quote.tokens)) if quote.tokens else None
                passage = found.as_dict() if found is not None else None
                citations = [passage] if passage is not None and quote.supports else []
            else:
                spans = [offsets.chars(a, b) for a, b in copied]
                citations = [] if is_not_said(text) else [c.as_dict() for c in index.cite(text, spans)]
                citations = [c for c in citations if read is None or c["start"] < read]
            locator = self._built[hot][2] if hot in self._built else None
            unsupported = [passage] if passage is not None and not quote.supports else []
            for c in [*citations, *unsupported]:
                c["start"], c["end"] = c["start"] + shift, c["end"] + shift  # a segment's offsets -> the document's
                c["where"] = locator.where(c["start"], c["end"]) if locator is not None else None
        except DocumentGone:  # deleted meanwhile: the answer came from its sequence; no text is left to cite
            log.info("%s was deleted while it was answered; the answer is sent without citations", key)
            citations, passage = [], None
        except Exception:  # citations are a courtesy; never lose the answer over them
            log.exception("citations failed for %s", key)
            citations, passage = [], None
        job.emit(events.Citations(citations, _quoted(quote, passage) if quote is not None else None))
        job.emit(events.Stats(stats))
        job.emit(events.Done())

    def index(self, key: str, hot: HotDoc) -> tuple[CitationIndex, TokenOffsets, int]:
        """The citation index and token offsets of a document or segment (``key``: ingest/segments.key),
        built at its first answer, and the character offset of its text in the document's. A
        segment's index holds the segment's text and pages, so its citations name the document's
        pages; their offsets are shifted by that offset. The whole document's cell and slide
        locator (ingest/locate.py) is kept beside them, for a citation's ``where``."""
        doc_id, segment = parse_key(key)
        if hot not in self._built:
            with self.store.holding(doc_id) as directory:  # read whole, or after a deletion: nothing
                if not directory.is_dir():
                    raise DocumentGone(doc_id)
                extracted = self.repairs.read(doc_id, partial(self.store.read_text, doc_id))
                segments = (
                    self.repairs.read(doc_id, partial(self.store.read_segments, doc_id))
                    if segment is not None
                    else None
                )
            text, page_starts, first_page = extracted.text, extracted.page_starts, extracted.first_page
            if segments is not None:
                part = segments[segment]
                text = text[part.start : part.end]
                page_starts = [0] + [p - part.start for p in page_starts if part.start < p < part.end]
                first_page = part.first_page
            n_head, n_doc = self._document_tokens(hot.prefix, text)
            offsets = TokenOffsets(hot.prefix, n_head, n_doc, text, self.model.piece)
            index = CitationIndex(text, page_starts, first_page=first_page)
            locator = Locator(  # cells, slides, and a PDF's printed page labels
                extracted.text, extracted.kind, extracted.page_starts, extracted.first_page, extracted.page_labels
            )
            self._built[hot] = index, offsets, locator
        if segment is None:
            return (*self._built[hot][:2], 0)
        with self.store.holding(doc_id) as directory:
            if not directory.is_dir():
                raise DocumentGone(doc_id)
            segments = self.repairs.read(doc_id, partial(self.store.read_segments, doc_id))
            return (*self._built[hot][:2], segments[segment].start)

    def _document_tokens(self, prefix, text: str) -> tuple[int, int]:
        """(first token, number of tokens) of the document's text inside ``prefix``. A prefix made with
        this layout frames it exactly (ingest/prompt.py ``frames``); one made before a change of the
        prompt's wording still answers from its saved state, so its document tokens are found in it:
        the text tokenized as the pipeline did, located by its first tokens."""
        span = self.layout.document_span(self.model, prefix)
        if span is not None:
            return span
        ids = self.model.tokenize(text, parse_special=False)
        probe = list(ids[:16])
        for start in range(0, max(1, len(prefix) - len(ids) + 1)):
            if list(prefix[start : start + len(probe)]) == probe:
                return start, len(ids)
        log.warning("the document's tokens were not found in its prefix; citations of copied text may be off")
        n_head, n_between = self.layout.n_head(self.model), self.layout.n_between(self.model)
        return n_head, len(prefix) - n_head - n_between


def not_read_yet(reason: str, share: float) -> str:
    """A refusal's reason for an answer from the part of a document read so far: the rest is not read."""
    rest = f"only {share:.0%} of the document is read so far; the rest is not read yet."
    return f"{reason.rstrip('. ')}; {rest}" if reason else rest[0].upper() + rest[1:]


def _quoted(quote: Quote, passage: dict | None) -> dict:
    """server/api/schemas.QuotePublic's fields. ``verified`` only when the passage is the document's own
    text and the model judged that it answers the question; then it is the answer's ``citation``. A
    passage that does not answer (the answer is the refusal, ``reason`` says why) is no citation:
    ``passage`` says where it is."""
    verified = passage is not None and quote.supports
    return {
        "text": passage["text"] if passage is not None else quote.text,
        "verified": verified,
        "citation": passage if verified else None,
        "passage": passage if not verified else None,
        "support": quote.support,
        "reason": quote.reason or None,
        "refusal": quote.refusal or None,
    }
