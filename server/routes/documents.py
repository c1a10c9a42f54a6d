"""Document routes: upload and re-ingest (the pipeline of ingest/pipeline.py, then the engine's
prefill), list, get, text, delete."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, File, Form, Response, UploadFile

from ingest import pipeline
from ingest.extract import ExtractedText
from ingest.reingest import reextract
from ingest.store import FAILED, INGESTING, READY, DocRecord
from server.deps import EngineDep, ExtractorDep, SettingsDep, StoreDep
from server.engine import Engine
from server.errors import DocumentIngesting, DocumentNotFound
from server.schemas import (
    DocumentCreated,
    DocumentList,
    DocumentPublic,
    DocumentText,
    PageSpan,
    PageWarning,
    ReingestRequest,
)
from server.settings import Settings

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
    )


def _get(store, doc_id: str) -> DocRecord:
    doc = store.get(doc_id) if doc_id.isalnum() else None
    if doc is None:
        raise DocumentNotFound(f"no document with id {doc_id!r}; list them with GET /v1/documents")
    return doc


def _display_name(filename: str | None) -> str:
    name = (filename or "document").replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(ch for ch in name if ch.isprintable())[:200]
    return name or "document"


@router.post("/documents", status_code=202, response_model=DocumentCreated)
async def upload(
    response: Response,
    store: StoreDep,
    engine: EngineDep,
    settings: SettingsDep,
    extractor: ExtractorDep,
    file: UploadFile = File(description="PDF, DOCX, EPUB, HTML, .txt or .md"),  # noqa: B008
    password: str | None = Form(default=None),
) -> DocumentCreated:
    data = await file.read()
    digest = pipeline.sha256(data)
    known = store.by_sha256(digest)
    if known is not None and known.status != FAILED:
        response.status_code = 200
        return DocumentCreated(id=known.id, name=known.name, status=known.status)
    extracted = await asyncio.to_thread(extractor.extract, data, password or None)
    prepared = await asyncio.to_thread(prepare, engine, settings, extracted)
    if known is not None:  # a failed earlier attempt, replaced below
        engine.forget(known.id)
    doc, created = await asyncio.to_thread(
        pipeline.store_new, store, data, digest, _display_name(file.filename), prepared
    )
    if not created:  # the same bytes arrived concurrently
        response.status_code = 200
    else:
        engine.submit_ingest(doc.id, len(prepared.prefix))
    return DocumentCreated(id=doc.id, name=doc.name, status=doc.status)


def prepare(engine: Engine, settings: Settings, extracted: ExtractedText) -> pipeline.Prepared:
    """Lay out, tokenize and budget-check with the loaded model (tokenizer calls are thread-safe)."""
    return pipeline.prepare(extracted, engine.layout, engine.model, settings.document_budget)


@router.get("/documents", response_model=DocumentList)
async def list_documents(store: StoreDep, engine: EngineDep) -> DocumentList:
    return DocumentList(documents=[public(d, engine) for d in store.list()])


@router.get("/documents/{doc_id}", response_model=DocumentPublic)
async def get_document(doc_id: str, store: StoreDep, engine: EngineDep) -> DocumentPublic:
    return public(_get(store, doc_id), engine)


@router.get("/documents/{doc_id}/text", response_model=DocumentText)
async def get_text(doc_id: str, store: StoreDep) -> DocumentText:
    doc = _get(store, doc_id)
    extracted = await asyncio.to_thread(store.read_text, doc.id)
    starts = extracted.page_starts
    ends = [*starts[1:], len(extracted.text)]
    pages = [PageSpan(page=i + 1, start=s, end=e) for i, (s, e) in enumerate(zip(starts, ends, strict=True))]
    return DocumentText(id=doc.id, text=extracted.text, pages=pages)


@router.delete("/documents/{doc_id}", status_code=204)
async def delete_document(doc_id: str, store: StoreDep, engine: EngineDep) -> Response:
    doc = _get(store, doc_id)
    engine.forget(doc.id)
    await asyncio.to_thread(store.delete, doc.id)
    return Response(status_code=204)


@router.post("/documents/{doc_id}/reingest", status_code=202, response_model=DocumentCreated)
async def reingest(
    doc_id: str,
    store: StoreDep,
    engine: EngineDep,
    settings: SettingsDep,
    extractor: ExtractorDep,
    body: ReingestRequest | None = None,
) -> DocumentCreated:
    """Extract the stored upload again with the current text rules (ingest/reingest.py), then
    prefill with the current model (after an upgrade, or a model or cache-type change)."""
    doc = _get(store, doc_id)
    if doc.status == INGESTING:
        raise DocumentIngesting(f"document {doc.id} is already being ingested")
    upload, stored = await asyncio.gather(
        asyncio.to_thread(store.read_upload, doc.id), asyncio.to_thread(store.read_text, doc.id)
    )
    password = body.password if body else None
    extracted, note = await asyncio.to_thread(reextract, upload, stored, extractor.extract, password)
    prepared = await asyncio.to_thread(prepare, engine, settings, extracted)
    await asyncio.to_thread(pipeline.store_again, store, doc, prepared)
    engine.forget(doc.id)
    engine.submit_ingest(doc.id, len(prepared.prefix))
    return DocumentCreated(id=doc.id, name=doc.name, status=INGESTING, note=note)
