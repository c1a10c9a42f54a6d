"""The one repair path of a document's damaged files: the store's readers only read and raise a
DocumentFilesDamaged subclass (store/checked.py); :meth:`Repairs.read` calls such a reader, and when
it raises, repairs the file it names with what is passed here (the extractor, the tokenizer and the
prompt layout, the segment budget) through the writes of store/repair.py, then calls the reader once
more. What cannot be repaired raises the reader's error again: the routes answer 409 with the action
that fixes it (``server/config/errors.damaged``), never a 500.

==================== ========================================================================
damaged file         repair
==================== ========================================================================
``text.json``        the stored ``upload.bin`` extracted again (``extract``, in the calling
                     thread), written back when it gives the row's characters and pages (the
                     text its snapshot was made from)
``segments.json``    the stored text split again (``tokenizer``, ``layout``, ``split_limit``,
                     ``overlap``), written back only when every segment's prefix is the one
                     stored (store/repair.py ``resplit``)
``segments.sqlite3`` rebuilt from the stored text and segment list (``ensure_index``)
``prefix.npy``       laid out and tokenized again from the stored text (``repair_prefix``)
==================== ========================================================================

Without an extractor (a tool, a test) a damaged text is reported, not repaired; without a
tokenizer (the model not loaded yet) so are a damaged segment list and prefix.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from ingest import segments as segs
from ingest.errors import DocumentError, DocumentFilesDamaged, IndexDamaged, PrefixDamaged, SegmentsDamaged, TextDamaged
from ingest.extract import ExtractedText
from ingest.prompt import PromptLayout, Tokenizer
from store import repair
from store.docstore import DocStore

log = logging.getLogger("docqa.store")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Repairs:
    """Repairs of the documents in ``store``. ``extract(upload bytes) -> ExtractedText``: the
    extraction worker's (ingest/worker.py), None: texts are not repaired. ``tokenizer`` and
    ``layout``: the loaded model's and the prompt's; ``split_limit``: the tokens a segment's prefix
    may hold (DOCQA_DOCUMENT_BUDGET; None: long documents are refused, so not split again) and
    ``overlap``: DOCQA_SEGMENT_OVERLAP_TOKENS. Thread-safe (each repair writes crash-safe files)."""

    store: DocStore
    extract: Callable[[bytes], ExtractedText] | None = None
    tokenizer: Tokenizer | None = None
    layout: PromptLayout | None = None
    split_limit: int | None = None
    overlap: int = 0

    def read(self, key: str, reader: Callable[[], T]) -> T:
        """``reader()``, a read of document or segment ``key``'s files (ingest/segments.py ``key``);
        when it raises DocumentFilesDamaged, the file is repaired (:meth:`repair`) and ``reader()``
        called once more. Raises the DocumentFilesDamaged of what cannot be repaired."""
        try:
            return reader()
        except DocumentFilesDamaged as exc:
            self.repair(key, exc)
        return reader()

    def repair(self, key: str, damage: DocumentFilesDamaged) -> None:
        """Repair the file ``damage`` names of document or segment ``key`` (module docstring), or
        raise ``damage`` (or what the repair met: the text it is made from damaged too) when it
        cannot be."""
        doc_id, segment = segs.parse_key(key)
        if isinstance(damage, TextDamaged):
            self._text(doc_id, damage)
        elif isinstance(damage, SegmentsDamaged):
            self._segments(doc_id, damage)
        elif isinstance(damage, IndexDamaged):
            text = self._stored_text(doc_id, damage).text
            self.read(doc_id, lambda: self.store.read_segments(doc_id))
            if repair.ensure_index(self.store.dir(doc_id), text):
                log.warning("%s: %s; rebuilt from the stored text", doc_id, damage)
        elif isinstance(damage, PrefixDamaged):
            self._prefix(key, doc_id, segment, damage)
        else:
            raise damage

    def _text(self, doc_id: str, damage: TextDamaged) -> None:
        doc, upload = self.store.get(doc_id), self.store.read_upload(doc_id)
        if self.extract is None or doc is None or upload is None:
            raise damage
        try:
            fresh = self.extract(upload)
        except DocumentError:
            raise damage from None
        if len(fresh.text) != doc.chars or fresh.pages != doc.pages:
            raise damage
        self.store.write_text(doc_id, fresh)
        log.warning("%s: %s; extracted again from the stored upload and written back", doc_id, damage)

    def _segments(self, doc_id: str, damage: SegmentsDamaged) -> None:
        if self.tokenizer is None or self.layout is None or self.split_limit is None:
            raise damage
        text = self._stored_text(doc_id, damage)
        try:
            made = segs.split(text, self.layout, self.tokenizer, self.split_limit, self.overlap)
        except ValueError:
            raise damage from None
        if not repair.resplit(self.store.dir(doc_id), *made):
            raise damage
        log.warning("%s: %s; made again from the stored text and written back", doc_id, damage)

    def _prefix(self, key: str, doc_id: str, segment: int | None, damage: PrefixDamaged) -> None:
        doc = self.store.get(doc_id)
        if self.tokenizer is None or self.layout is None or doc is None:
            raise damage
        text, n_tokens = self._stored_text(doc_id, damage).text, doc.tokens
        if segment is not None:
            segments = self.read(doc_id, lambda: self.store.read_segments(doc_id)) or []
            if segment >= len(segments):
                raise damage
            part = segments[segment]
            text, n_tokens = text[part.start : part.end], part.n_tokens
        log.warning("%s: %s; rebuilding it from the stored text", key, damage)
        repair.repair_prefix(self.store.state_dir(key), text, self.layout, self.tokenizer, n_tokens)

    def _stored_text(self, doc_id: str, damage: DocumentFilesDamaged) -> ExtractedText:
        """The stored text the repair of ``damage`` is made from (itself repaired when damaged);
        ``damage`` again when there is none."""
        try:
            return self.read(doc_id, lambda: self.store.read_text(doc_id))
        except FileNotFoundError:
            raise damage from None
