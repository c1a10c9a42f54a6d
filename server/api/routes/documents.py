"""Document routes: upload and re-ingest (the pipeline of ingest/pipeline.py, then the engine's
prefill), list, get, text, the stored file, delete."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, File, Form, Request, Response, UploadFile

from ingest import pipeline
from ingest.reingest import reextract
from ingest.store import FAILED, INGESTING, READY, DocRecord
from server.api import segmented, uploads
from server.api.deps import EngineDep, ExtractorDep, SettingsDep, StoreDep, existing_document
from server.api.schemas import (
    DocumentCreated,
    DocumentList,
    DocumentPublic,
    DocumentText,
    PageSpan,
    PageWarning,
    ReingestRequest,
    SegmentPublic,
)
from server.api.served import served_file
from server.config.errors import DocumentFailed, DocumentIngesting
from server.engine.engine import Engine

router = APIRouter(prefix="/v1")


def public(doc: DocRecord, engine: Engine | None) -> DocumentPublic:
    if doc.status == INGESTING:
        progress = engine.progress.get(doc.id, 0.0) if engine else 0.0
    else:
        progress = 1.0 if doc.status == READY else 0.0
    return DocumentPublic(
        id=doc.id,
        name=doc.name,
        status=doc.status,
        progress=progress,
        pages=doc.pages,
        tokens=doc.tokens,
        error=doc.error,
        created_at=doc.created_at,
        kind=doc.kind,
        text_rules=doc.text_rules,
        encoding=doc.encoding,
        warnings=[PageWarning(**w) for w in doc.warnings],
        segments=_segments(doc, engine),
    )


def _segments(doc: DocRecord, engine: Engine | None) -> list[SegmentPublic] | None:
    """A segmented document's segments (a small file read); None for one answered whole."""
    segments = engine.store.read_segments(doc.id) if engine is not None else None
    if segments is None:
        return None
    n, by_pages = len(segments), segmented.paged(doc)
    return [
        SegmentPublic(
            index=s.index, pages=s.pages, start=s.start, end=s.end, tokens=s.n_tokens, part=s.index + 1, parts=n,
            label=segmented.label(s, n, by_pages),
        )
        for s in segments
    ]  # fmt: skip


@router.post("/documents", status_code=202, response_model=DocumentCreated)
async def upload(
    request: Request,
    response: Response,
    store: StoreDep,
    engine: EngineDep,
    settings: SettingsDep,
    extractor: ExtractorDep,
    file: UploadFile = File(description="PDF, DOCX, EPUB, HTML, .txt or .md"),  # noqa: B008
    password: str | None = Form(default=None),
    pages: str | None = Form(default=None, description="A part: pages 5-9 (1-based, inclusive), as printed"),
    chars: str | None = Form(default=None, description="A part of the text: characters 0-50000 ([start, end))"),
) -> DocumentCreated:
    cut = uploads.parse_cut(pages, chars)
    data = await file.read()
    digest = pipeline.sha256(data, cut)
    known = store.by_sha256(digest)
    if known is not None and known.status != FAILED:
        response.status_code = 200
        return DocumentCreated(id=known.id, name=known.name, status=known.status)

    def store_doc(prepared: pipeline.Prepared) -> tuple[DocRecord, bool]:
        name = uploads.display_name(file.filename, prepared.extracted)
        return pipeline.store_new(store, data, digest, name, prepared)  # False: the same bytes came meanwhile

    doc, _, created = await uploads.run(
        engine, store, settings, request.app.state.snapshot_bytes,
        lambda cap: extractor.extract(data, password or None, cut, cap), len(data), store_doc,
        replaces=known.id if known is not None else None,
    )  # fmt: skip
    if not created:
        response.status_code = 200
    return DocumentCreated(id=doc.id, name=doc.name, status=doc.status)


@router.get("/documents", response_model=DocumentList)
async def list_documents(store: StoreDep, engine: EngineDep) -> DocumentList:
    return DocumentList(documents=[public(d, engine) for d in store.list()])


@router.get("/documents/{doc_id}", response_model=DocumentPublic)
async def get_document(doc_id: str, store: StoreDep, engine: EngineDep) -> DocumentPublic:
    return public(existing_document(store, doc_id), engine)


@router.get("/documents/{doc_id}/text", response_model=DocumentText)
async def get_text(doc_id: str, store: StoreDep) -> DocumentText:
    """The stored text and its page map, numbered as in the upload (a part keeps its page numbers)."""
    doc = existing_document(store, doc_id)
    try:
        extracted = await asyncio.to_thread(store.read_text, doc.id)
    except FileNotFoundError:
        why = doc.error or doc.status
        raise DocumentFailed(f"document {doc.id} has no stored text ({why}); upload it again") from None
    starts, first = extracted.page_starts, extracted.first_page
    ends = [*starts[1:], len(extracted.text)]
    pages = [PageSpan(page=first + i, start=s, end=e) for i, (s, e) in enumerate(zip(starts, ends, strict=True))]
    return DocumentText(id=doc.id, text=extracted.text, pages=pages)


@router.get("/documents/{doc_id}/file", response_class=Response)
async def get_file(doc_id: str, request: Request, store: StoreDep) -> Response:
    """The upload as it was sent (server/api/served.py): the page shows a PDF with PDF.js from it.
    A part (``pages=`` / ``chars=``) gets the whole file: its page numbers are the file's own."""
    doc = existing_document(store, doc_id)
    data = await asyncio.to_thread(store.read_upload, doc.id)
    return served_file(doc, data, request.headers.get("if-none-match"))


@router.delete("/documents/{doc_id}", status_code=204)
async def delete_document(doc_id: str, store: StoreDep, engine: EngineDep) -> Response:
    """Remove the document: its files first (that works on a full disk, and waits for a snapshot
    being written), then its row."""
    doc = existing_document(store, doc_id)
    engine.forget(doc.id)
    await asyncio.to_thread(store.delete, doc.id)
    return Response(status_code=204)


@router.post("/documents/{doc_id}/reingest", status_code=202, response_model=DocumentCreated)
async def reingest(
    request: Request,
    doc_id: str,
    store: StoreDep,
    engine: EngineDep,
    settings: SettingsDep,
    extractor: ExtractorDep,
    body: ReingestRequest | None = None,
) -> DocumentCreated:
    """Extract the stored upload again with the current text rules (ingest/reingest.py), then
    prefill with the current model (after an upgrade, or a model or cache-type change)."""
    doc = existing_document(store, doc_id)
    if doc.status == INGESTING:
        raise DocumentIngesting(f"document {doc.id} is already being ingested")
    upload, stored = await asyncio.gather(
        asyncio.to_thread(store.read_upload, doc.id), asyncio.to_thread(store.read_text, doc.id)
    )
    password = body.password if body else None
    notes: list[str | None] = []

    def extract(_cap: int):
        extracted, note = reextract(upload, stored, extractor.extract, password)
        notes.append(note)
        return extracted

    def store_doc(prepared: pipeline.Prepared) -> tuple[DocRecord, bool]:
        pipeline.store_again(store, doc, prepared)
        return doc, True

    await uploads.run(engine, store, settings, request.app.state.snapshot_bytes, extract, 0, store_doc, doc.id)
    return DocumentCreated(id=doc.id, name=doc.name, status=INGESTING, note=notes[0])
