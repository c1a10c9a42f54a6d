"""The upload side of ingestion, shared by upload and re-ingest:
extract -> normalise -> lay out -> tokenize -> budget check -> store.

Extraction (which normalises the text: ingest/extract.py, ingest/normalize.py) runs in the bounded
worker process (ingest/worker.py); the rest runs in the server process, off the event loop and off
the engine thread. The engine then prefills the stored prefix (server/ingestion.py).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from ingest.errors import DocumentTooLong
from ingest.extract import ExtractedText
from ingest.prompt import PromptLayout, Tokenizer
from ingest.store import FAILED, INGESTING, DocRecord, DocStore, DuplicateDocument


@dataclass(frozen=True, slots=True)
class Prepared:
    """A document ready to store: its text and page map, and its prompt prefix (int32 [n_tokens])."""

    extracted: ExtractedText
    prefix: np.ndarray


def sha256(data: bytes) -> str:
    """The identity of an upload: the same bytes are the same document."""
    return hashlib.sha256(data).hexdigest()


def prepare(extracted: ExtractedText, layout: PromptLayout, tokenizer: Tokenizer, budget: int) -> Prepared:
    """Lay out and tokenize an extracted document; raises DocumentTooLong over ``budget`` tokens."""
    prefix = layout.document_prefix(tokenizer, extracted.text)
    if len(prefix) > budget:
        raise DocumentTooLong(len(prefix), budget)
    return Prepared(extracted, prefix)


def store_new(store: DocStore, data: bytes, digest: str, name: str, prepared: Prepared) -> tuple[DocRecord, bool]:
    """Store a new upload (``digest``: its :func:`sha256`) as ``ingesting``, row then files. Returns
    (record, created): an upload of the same bytes that arrived meanwhile wins, and a failed earlier
    attempt is replaced."""
    known = store.by_sha256(digest)
    if known is not None and known.status == FAILED:
        store.delete(known.id)
    extracted, prefix = prepared.extracted, prepared.prefix
    try:
        doc = store.create(
            name=name, sha256=digest, kind=extracted.kind, pages=extracted.pages, tokens=len(prefix),
            chars=len(extracted.text), text_rules=extracted.rules, encoding=extracted.encoding,
            warnings=extracted.warnings,
        )  # fmt: skip
    except DuplicateDocument as dup:
        return dup.existing, False
    store.write_files(doc.id, data, extracted, prefix)
    return doc, True


def store_again(store: DocStore, doc: DocRecord, prepared: Prepared) -> None:
    """Store a re-ingested document's new text and prefix, and mark it ``ingesting``."""
    store.write_text(doc.id, prepared.extracted)
    store.write_prefix(doc.id, prepared.prefix)
    store.set_text(doc.id, prepared.extracted, len(prepared.prefix))
    store.set_status(doc.id, INGESTING)
