"""Questions to a collection (store/docstore.py): its documents answered like one long document whose
segments are their states. A document answered whole is one source, a segmented one keeps its
segments; all of them are ranked for the question by one BM25 index across the collection
(store/collection_index.py), and the best is answered from, with the second best too when it scores
close (store/index.py ``chosen``, DOCQA_SEGMENT_CLOSE_RATIO), each by its own engine job
(server/engine/jobs.py ``AnswerJob`` with the document and segment), read as one stream by
server/service/segmented.py ``SegmentedAnswer``. Nothing new runs in the engine: each job is a question
about one document or segment, whose saved state it restores.

Each source is described as a segment is (index, pages, part, parts, chars, label) plus
``document_id`` and ``document_name``; its label is the document's name ("lease.pdf", or
"novel.epub, pages 5–9" for a segment), so two answers read "From lease.pdf: …". Every citation
names its document (``document_id``, ``document_name``) next to its page. A question that matches no
document's words is answered that none of them seems to contain it, without the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ingest.errors import DocumentFilesDamaged, SegmentsDamaged, TextDamaged
from server.config.errors import CollectionEmpty, DocumentFailed, DocumentIngesting
from server.engine.repairs import Repairs
from server.service import refit, segmented
from server.service.segmented import Source
from store import collection_index, index
from store.collection_index import MemberDamaged
from store.docstore import FAILED, INGESTING, READY, CollectionRecord, DocRecord, DocStore

NOT_FOUND = (
    "None of the collection's documents seems to contain this: none of them mentions any of the words "
    "of the question. Try asking with the words the documents would use."
)


@dataclass(frozen=True, slots=True)
class CollectionPlan:
    """The sources to answer from, best first ([]: nothing matched); read by SegmentedAnswer.
    ``partial``: the documents left out while they are read (:func:`left_out`; None: none)."""

    sources: list[Source]
    not_found: str = NOT_FOUND
    partial: dict[str, Any] | None = None


def members(store: DocStore, collection: CollectionRecord) -> list[DocRecord]:
    """The collection's documents, in order (one deleted meanwhile is left out)."""
    docs = (store.get(doc_id) for doc_id in collection.document_ids)
    return [d for d in docs if d is not None]


def status(docs: list[DocRecord]) -> str:
    """ready when every document is; else ingesting or failed (what keeps it from being asked);
    empty without documents."""
    if not docs:
        return "empty"
    states = {d.status for d in docs}
    return FAILED if FAILED in states else INGESTING if INGESTING in states else READY


def check_answerable(
    collection: CollectionRecord,
    docs: list[DocRecord],
    progress: dict[str, float],
    unfit: dict[str, str] | None = None,
    while_reading: bool = False,
) -> list[DocRecord]:
    """Raise a 409 naming the document that keeps the collection from being asked (``progress``:
    the engine's prefill progress by document id; ``unfit``: the documents that must be read again,
    server/service/refit.py), or that it has no documents left. ``while_reading``
    (DOCQA_ASK_WHILE_READING): the documents still being read are left out of the answer while at
    least one is ready, and returned (the answer says so: :func:`left_out`); else [] or a 409."""
    if not docs:
        raise CollectionEmpty(
            f"collection {collection.id} ({collection.name!r}) has no documents left (they were deleted); "
            "delete it, or create a new one"
        )
    reading: list[DocRecord] = []
    for doc in docs:
        where = f"document {doc.id} ({doc.name!r}) of collection {collection.id}"
        if doc.status == FAILED:
            raise DocumentFailed(f"{where} failed to ingest: {doc.error}; upload it again, or delete it")
        if unfit and doc.id in unfit:
            raise refit.refuse(doc.id, f"{unfit[doc.id]} ({where})")
        if doc.status == INGESTING:
            reading.append(doc)
    if reading and (not while_reading or len(reading) == len(docs)):
        doc = reading[0]
        pct = progress.get(doc.id, 0.0) * 100
        where = f"document {doc.id} ({doc.name!r}) of collection {collection.id}"
        raise DocumentIngesting(f"{where} is still being read ({pct:.0f}%); retry soon")
    return reading


def left_out(docs: list[DocRecord], reading: list[DocRecord], progress: dict[str, float]) -> dict[str, Any] | None:
    """A Partial event's fields (server/engine/events.py) for a collection's answer that leaves out
    its documents still being read (``reading``, of ``docs``); None when none is: ``unread`` names
    them with their share read, ``share`` is of the collection's tokens the answer can come from (None
    while a document left out has no tokens yet: its text is still being extracted or read by OCR)."""
    if not reading:
        return None
    gone = {d.id for d in reading}
    total = sum(d.tokens for d in docs)
    known = all(d.tokens > 0 for d in reading)  # one still in extraction or OCR has no tokens yet
    share = sum(d.tokens for d in docs if d.id not in gone) / max(1, total) if known else None
    unread = tuple(
        {"document_id": d.id, "document_name": d.name, "share": round(progress.get(d.id, 0.0), 4)} for d in reading
    )
    return {"read_through": None, "share": None if share is None else round(share, 4), "pages": None, "unread": unread}


def plan(
    repairs: Repairs,
    collection_id: str,
    docs: list[DocRecord],
    question: str,
    close: float,
    history: tuple[tuple[str, str], ...] = (),
) -> CollectionPlan:
    """Rank the collection's documents and segments for ``question`` (with a conversation's earlier
    turns, weighted lower) and describe the chosen ones. Runs off the event loop (the index is made
    again first when a document changed). ``repairs``: the store's; a member whose text or segment
    list is damaged is repaired through the one repair path (server/engine/repairs.py) and the plan
    made once more. Raises MemberDamaged naming a document whose files are damaged beyond repair."""
    try:
        return _plan(repairs.store, collection_id, docs, question, close, history)
    except MemberDamaged as exc:
        try:
            repairs.repair(exc.doc_id, exc.error)
        except DocumentFilesDamaged:
            raise exc from None
    return _plan(repairs.store, collection_id, docs, question, close, history)


def _plan(store: DocStore, collection_id: str, docs: list[DocRecord], question: str, close: float, history):
    ranked = collection_index.rank(store, collection_id, docs, question, history)
    scores = dict(ranked)
    by_id = {d.id: d for d in docs}
    return CollectionPlan([_source(store, by_id[u.doc_id], u, scores[u]) for u in index.chosen(ranked, close)])


def _source(store: DocStore, doc: DocRecord, unit: collection_index.Unit, score: float) -> Source:
    named: dict[str, Any] = {"document_id": doc.id, "document_name": doc.name}
    try:
        if unit.segment is None:
            text = store.read_text(doc.id)
            first = text.first_page
            where = {
                "index": 0,
                "pages": [first, first + text.pages - 1],
                "part": 1,
                "parts": 1,
                "chars": [0, len(text.text)],
                "label": doc.name,
            }
            return Source(doc.id, None, doc.tokens, {**where, **named}, score, named)
        parts = store.read_segments(doc.id) or []
        segment = parts[unit.segment]
    except FileNotFoundError:
        raise MemberDamaged(doc.id, TextDamaged("text.json", "it is missing")) from None
    except IndexError:  # re-ingested into fewer segments between the ranking and now
        raise MemberDamaged(doc.id, SegmentsDamaged("segments.json", "it changed while being read")) from None
    except DocumentFilesDamaged as exc:
        raise MemberDamaged(doc.id, exc) from exc
    where = segmented.describe(segment, len(parts), segmented.paged(doc))
    where["label"] = f"{doc.name}, {where['label']}"
    return Source(doc.id, segment.index, segment.n_tokens, {**where, **named}, score, named)
