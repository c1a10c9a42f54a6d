"""Storing a prepared upload (ingest/pipeline.py ``prepare``): a new document's row and files, or a
re-ingested document's new text and prefix.

A write that fails (a full disk) leaves the document ``failed`` with the reason and no partial
files; its next upload starts over.
"""

from __future__ import annotations

from ingest import snapshot
from ingest.pipeline import Prepared
from store.disk import storage_error
from store.docstore import FAILED, INGESTING, DocRecord, DocStore, DuplicateDocument
from store.files import remove_histories


def store_new(
    store: DocStore, data: bytes, digest: str, name: str, prepared: Prepared, source: tuple | None = None
) -> tuple[DocRecord, bool]:
    """Store a new upload (``digest``: its ingest/pipeline.py ``sha256``) as ``ingesting``, row then files. Returns
    (record, created): an upload of the same bytes that arrived meanwhile wins, and a failed earlier
    attempt is replaced. ``source``: a watched file's ``(path, stat, read_at)``, in the row from the start."""
    known = store.by_sha256(digest)
    if known is not None and known.status == FAILED:
        store.delete(known.id)
    extracted = prepared.extracted
    try:
        doc = store.create(
            name=name,
            sha256=digest,
            kind=extracted.kind,
            pages=extracted.pages,
            tokens=prepared.n_tokens,
            chars=len(extracted.text),
            text_rules=extracted.rules,
            encoding=extracted.encoding,
            warnings=extracted.warnings,
            source=source,
        )
    except DuplicateDocument as dup:
        return dup.existing, False
    _write_files(store, doc.id, data, prepared)
    return doc, True


def store_into(store: DocStore, doc: DocRecord, data: bytes, prepared: Prepared) -> tuple[DocRecord, bool]:
    """Store the files of an upload whose row was made before its text was read (OCR in the
    background, server/service/background.py) and record its text in the row. Returns (record, whether
    to prefill it): False when it was deleted meanwhile (nothing is written)."""
    if store.get(doc.id) is None:
        return doc, False
    _write_files(store, doc.id, data, prepared)
    store.set_text(doc.id, prepared.extracted, prepared.n_tokens)
    return store.get(doc.id) or doc, True


def _write_files(store: DocStore, doc_id: str, data: bytes, prepared: Prepared) -> None:
    extracted = prepared.extracted
    try:
        store.write_files(doc_id, data, extracted, prepared.prefix if not prepared.segments else None)
        if prepared.segments:
            store.write_segments(doc_id, extracted.text, list(prepared.segments), list(prepared.segment_prefixes))
    except OSError as exc:
        store.remove_files(doc_id)  # all of them: their space is what SQLite may need to record the failure
        raise _failed(store, doc_id, exc, "storing the upload", "upload it again") from exc


def store_again(store: DocStore, doc: DocRecord, prepared: Prepared) -> None:
    """Store a re-ingested document's new text and prefix, and mark it ``ingesting``; its old snapshot
    is removed (a restart must not take it for the new one)."""
    try:
        with store.holding(doc.id) as directory:
            snapshot.remove_all(directory)
            remove_histories(directory)
        store.write_text(doc.id, prepared.extracted)
        if prepared.segments:
            segments, prefixes = list(prepared.segments), list(prepared.segment_prefixes)
            store.remove_segments(doc.id)
            store.write_segments(doc.id, prepared.extracted.text, segments, prefixes)
        else:
            store.remove_segments(doc.id)
            store.write_prefix(doc.id, prepared.prefix)
    except OSError as exc:
        raise _failed(store, doc.id, exc, "storing the re-extracted text", "re-ingest it again") from exc
    store.set_text(doc.id, prepared.extracted, prepared.n_tokens)
    store.set_status(doc.id, INGESTING)


def _failed(store: DocStore, doc_id: str, exc: OSError, doing: str, then: str) -> Exception:
    """After a failed write (its temp file is gone already, runtime/atomic.py): mark the document
    failed with the reason, and return the typed error to raise."""
    error = storage_error(exc, doing)
    store.set_status(doc_id, FAILED, f"{error}, then {then}")
    return error
