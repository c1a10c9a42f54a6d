"""Document routes: upload and re-ingest (the pipeline of ingest/pipeline.py, then the engine's
prefill), list, get, text, the stored file, delete, and a question to a document (JSON, or
Server-Sent Events when ``stream`` is true)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial

from fastapi import APIRouter, File, Form, Request, Response, UploadFile

from ingest import formats, pipeline
from ingest.cut import Cut
from ingest.errors import DocumentFilesDamaged, TextDamaged
from ingest.locate import printed_label
from ingest.reingest import reextract_async
from runtime.system import busy
from server.api.answering import answer_params
from server.api.deps import DocumentDep, EngineDep, ServicesDep, SettingsDep, StoreDep, WatchDep
from server.api.responses import respond
from server.api.schemas import (
    AnswerRequest,
    AnswerResponse,
    DocumentCreated,
    DocumentList,
    DocumentPublic,
    DocumentText,
    FormatList,
    FormatPublic,
    PageSpan,
    PageWarning,
    ReadingPublic,
    ReingestRequest,
    SegmentPublic,
)
from server.api.served import served_file
from server.config.errors import DocumentFailed, DocumentIngesting, ReingestRunning, damaged
from server.engine.engine import Engine
from server.engine.reading import DocView
from server.service import Services, background, segmented, uploads
from server.service.questions import check_answerable, submit
from store import writes
from store.docstore import FAILED, INGESTING, READY, DocRecord

router = APIRouter(prefix="/v1")
log = logging.getLogger("docqa.http")


def public(doc: DocRecord, engine: Engine | None, watch=None) -> DocumentPublic:
    """``doc`` as the API shows it; ``watch``: the app's FolderWatch (server/service/watch.py), for a watched
    document whose folder is unavailable."""
    view = engine.view(doc.id) if engine is not None else DocView()
    if doc.status == INGESTING:
        progress = view.progress or 0.0
    else:
        progress = 1.0 if doc.status == READY else 0.0
    return DocumentPublic(
        id=doc.id,
        name=doc.name,
        status=doc.status,
        progress=progress,
        reading=_reading(view, engine) if doc.status == INGESTING else None,
        needs_reingest=view.unfit,
        pages=doc.pages,
        tokens=doc.tokens,
        error=doc.error,
        created_at=doc.created_at,
        kind=doc.kind,
        text_rules=doc.text_rules,
        encoding=doc.encoding,
        warnings=[PageWarning(**w) for w in doc.warnings],
        segments=_segments(doc, engine),
        source_path=doc.source_path,
        read_at=doc.read_at,
        folder_unavailable=watch.sync.unavailable_reason(doc.source_path) if watch is not None else None,
    )


def _reading(view: DocView, engine: Engine | None) -> ReadingPublic | None:
    """How the reading of a document being ingested goes (server/engine/reading.py); None when it is
    not queued here."""
    reading, place = view.reading, view.place
    if engine is None or reading is None or place is None:
        return None
    rate = reading.tokens_per_s if reading.reading else None
    rate = rate or view.rate  # waiting, or before its own first chunk: the server's rate
    start = place.tokens_ahead / rate if rate else None
    left = (place.tokens_ahead + max(0, reading.total - reading.done)) / rate if rate else None
    return ReadingPublic(
        waiting=not reading.reading,
        paused=reading.paused,
        ahead=engine.active_answers,
        position=place.position,
        documents_ahead=place.position - 1,
        tokens_done=reading.done,
        tokens_total=reading.total,
        tokens_per_s=None if rate is None else round(rate, 1),
        seconds_to_start=None if start is None else round(start, 1),
        seconds_left=None if left is None else round(left, 1),
        busy=busy(),
    )


def _segments(doc: DocRecord, engine: Engine | None) -> list[SegmentPublic] | None:
    """A segmented document's segments (a small file read); None for one answered whole, or whose
    segment list is damaged beyond repair (server/engine/repairs.py; its questions then get the 409
    that says so)."""
    if engine is None:
        return None
    try:
        segments = engine.repairs.read(doc.id, partial(engine.store.read_segments, doc.id))
    except DocumentFilesDamaged as exc:
        log.warning("%s: %s", doc.id, exc)
        return None
    if segments is None:
        return None
    n, by_pages = len(segments), segmented.paged(doc)
    return [
        SegmentPublic(
            index=s.index,
            pages=s.pages,
            start=s.start,
            end=s.end,
            tokens=s.n_tokens,
            part=s.index + 1,
            parts=n,
            label=segmented.label(s, n, by_pages),
        )
        for s in segments
    ]


@router.post("/documents", status_code=202, response_model=DocumentCreated)
async def upload(
    request: Request,
    response: Response,
    services: ServicesDep,
    engine: EngineDep,
    file: UploadFile = File(description=f"{formats.names()}: {' '.join(formats.suffixes())}"),  # noqa: B008
    password: str | None = Form(default=None),
    pages: str | None = Form(
        default=None,
        description="A part: PDF pages 5-9 (1-based, inclusive), or by the labels printed on them: ii-3",
    ),
    chars: str | None = Form(default=None, description="A part of the text: characters 0-50000 ([start, end))"),
    labels: bool = Form(default=False, description="pages are the printed page labels, even where they are numbers"),
) -> DocumentCreated:
    cut = uploads.parse_cut(pages, chars, labels)
    created, response.status_code = await receive(
        services, engine, file.filename, file.size or 0, file.read, password or None, cut
    )
    return created


async def receive(
    services: Services,
    engine: Engine,
    filename: str | None,
    size: int,
    read: Callable[[], Awaitable[bytes]],
    password: str | None = None,
    cut: Cut | None = None,
) -> tuple[DocumentCreated, int]:
    """An upload of ``size`` bytes (0: unknown) read by ``read()`` once it is admitted, as POST
    /v1/documents takes it (and the MCP tool ``ingest_file``, server/api/mcp_local.py): the document
    and the status it is answered with (202 new, 200 already known)."""
    store, settings, extractor = services.store, services.settings, services.extractor
    # Admitted before the body is read into memory: at most DOCQA_EXTRACT_WORKERS + DOCQA_EXTRACT_QUEUE
    # uploads (and their bytes) wait for extraction; the next gets 503 with Retry-After at once.
    async with extractor.slot(size) as slot:
        data = await read()
        digest = await asyncio.to_thread(pipeline.sha256, data, cut)
        known = await asyncio.to_thread(store.by_sha256, digest)
        if known is not None and known.status != FAILED:
            return DocumentCreated(id=known.id, name=known.name, status=known.status), 200

        pdf = data[:1024].lstrip().startswith(b"%PDF")
        reading = background.Reading(store, engine, filename, digest, cut, pdf=pdf)
        if cut is not None and cut.unit == "pages":  # the whole file is read before its part is cut
            reading.after(background.PART_GRACE_S)

        def store_doc(prepared: pipeline.Prepared) -> tuple[DocRecord, bool]:
            name = uploads.display_name(filename, prepared.extracted)
            return reading.put(
                lambda: writes.store_new(store, data, digest, name, prepared),  # False: the same bytes came meanwhile
                lambda row: writes.store_into(store, row, data, prepared),
            )

        async def stored() -> tuple[DocRecord, pipeline.Prepared, bool]:
            return await uploads.run(
                engine,
                store,
                settings,
                services.snapshot_bytes,
                lambda cap: slot.extract(data, password, cut, cap, reading.tell),
                len(data),
                store_doc,
                replaces=known.id if known is not None else None,
            )

        run = asyncio.ensure_future(stored())
        row = await reading.wait(run)  # OCR started, or a part's reading is long: the rest goes on in the background
        if row is not None:
            return DocumentCreated(id=row.id, name=row.name, status=INGESTING, note=reading.note), 202
        doc, _, created = await run
    return DocumentCreated(id=doc.id, name=doc.name, status=doc.status), 202 if created else 200


@router.get("/formats", response_model=FormatList)
def list_formats() -> FormatList:
    """The formats an upload may be (ingest/formats.py), and the sentence a refusal ends with."""
    rows = [FormatPublic(kind=f.kind, label=f.label, suffixes=list(f.suffixes), media_type=f.media_type)
            for f in formats.FORMATS]  # fmt: skip
    return FormatList(formats=rows, accepted=formats.accepted())


@router.get("/documents", response_model=DocumentList)
def list_documents(store: StoreDep, engine: EngineDep, watch: WatchDep) -> DocumentList:
    return DocumentList(documents=[public(d, engine, watch) for d in store.list()])


@router.get("/documents/{doc_id}", response_model=DocumentPublic)
def get_document(doc: DocumentDep, engine: EngineDep, watch: WatchDep) -> DocumentPublic:
    return public(doc, engine, watch)


@router.get("/documents/{doc_id}/text", response_model=DocumentText)
async def get_text(doc: DocumentDep, store: StoreDep, engine: EngineDep) -> DocumentText:
    """The stored text and its page map, numbered as in the upload (a part keeps its page numbers), with
    each page's printed label where a PDF prints another (GeoTopo's PDF page 2 is "ii").
    A damaged ``text.json`` is extracted again from the stored upload when that gives the same text
    length and pages, and written back (the one repair path, server/engine/repairs.py, as wherever
    it is read); otherwise 409 with the action that repairs it."""
    repairs = engine.repairs
    try:
        extracted = await asyncio.to_thread(repairs.read, doc.id, partial(store.read_text, doc.id))
    except FileNotFoundError:
        why = doc.error or doc.status
        raise DocumentFailed(f"document {doc.id} has no stored text ({why}); upload it again") from None
    except TextDamaged as exc:
        raise damaged(exc, doc.id) from None
    starts, first, labels = extracted.page_starts, extracted.first_page, extracted.page_labels
    ends = [*starts[1:], len(extracted.text)]
    pages = [
        PageSpan(page=first + i, start=s, end=e, label=printed_label(labels, first + i))
        for i, (s, e) in enumerate(zip(starts, ends, strict=True))
    ]
    return DocumentText(id=doc.id, text=extracted.text, pages=pages)


@router.get("/documents/{doc_id}/file", response_class=Response)
async def get_file(doc: DocumentDep, request: Request, store: StoreDep) -> Response:
    """The upload as it was sent, streamed with ranges (server/api/served.py): the page shows a PDF with
    PDF.js from it. A part (``pages=`` / ``chars=``) gets the whole file: its page numbers are the file's own."""
    opened = await asyncio.to_thread(store.open_upload, doc.id)
    return served_file(doc, opened, request.headers.get("if-none-match"))


@router.delete("/documents/{doc_id}", status_code=204)
async def delete_document(doc: DocumentDep, store: StoreDep, engine: EngineDep) -> Response:
    """Remove the document: its files first (that works on a full disk, and waits for a snapshot
    being written), then its row."""
    engine.forget(doc.id)
    await asyncio.to_thread(store.delete, doc.id)
    return Response(status_code=204)


@router.post("/documents/{doc_id}/reingest", status_code=202, response_model=DocumentCreated)
async def reingest(
    doc: DocumentDep, engine: EngineDep, services: ServicesDep, body: ReingestRequest | None = None
) -> DocumentCreated:
    """Extract the stored upload again with the current text rules (ingest/reingest.py), then
    prefill with the current model (after an upgrade, or a model or cache-type change) and at the
    current context (a document read for a larger one: server/service/refit.py), in parts where it is
    longer. ``engine``: 503 until the model is loaded."""
    if doc.status == INGESTING:
        raise DocumentIngesting(f"document {doc.id} is already being ingested")
    return await reingest_document(services, doc, body.password if body else None)


async def reingest_document(state: Services, doc: DocRecord, password: str | None = None) -> DocumentCreated:
    """The re-ingest of ``doc`` (the route's, and DOCQA_REINGEST_UNFIT's after start-up: server/service/refit.py),
    one per document at a time, through the app's services."""
    running: set[str] = state.reingesting
    if doc.id in running:
        raise ReingestRunning(f"document {doc.id} is being re-ingested already; wait for it (GET its status)")
    running.add(doc.id)
    try:
        created = await _reingest(state, doc, state.store, state.engine, state.settings, state.extractor, password)
    finally:
        running.discard(doc.id)
    state.engine.refit(doc.id)  # read again at this size (server/service/refit.py)
    return created


async def _reingest(state, doc: DocRecord, store, engine, settings, extractor, password) -> DocumentCreated:
    upload = await asyncio.to_thread(store.read_upload, doc.id)
    try:
        stored = await asyncio.to_thread(store.read_text, doc.id)
    except TextDamaged as exc:  # the upload is what is left: read it again whole
        if upload is None:
            raise damaged(exc, doc.id) from None
        stored = None
    notes: list[str | None] = []

    async def extract(_cap: int):
        if stored is None:
            notes.append("the stored text was damaged; the upload was extracted again in full")
            return await extractor.extract_async(upload, password)
        extracted, note = await reextract_async(upload, stored, extractor.extract_async, password)
        notes.append(note)
        return extracted

    def store_doc(prepared: pipeline.Prepared) -> tuple[DocRecord, bool]:
        writes.store_again(store, doc, prepared)
        return doc, True

    await uploads.run(engine, store, settings, state.snapshot_bytes, extract, 0, store_doc, doc.id)
    return DocumentCreated(id=doc.id, name=doc.name, status=INGESTING, note=notes[0])


@router.post("/documents/{doc_id}/answers", response_model=AnswerResponse)
async def answer(
    doc: DocumentDep, req: AnswerRequest, request: Request, store: StoreDep, engine: EngineDep, settings: SettingsDep
):
    while_reading = check_answerable(doc, engine, settings)
    params = answer_params(req, settings, engine)
    stream, position = await submit(engine, store, settings, doc, req.question, params, while_reading=while_reading)
    return await respond(stream, position, req, request, settings)
