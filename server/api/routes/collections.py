"""Collection routes: create (documents already uploaded and ready, under a unique name), list, get,
delete, and a question to a collection (server/service/collection.py), answered as a document's
question is (the same body and response; each citation names its document)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request, Response

from server.api.answering import answer_params
from server.api.deps import CollectionDep, EngineDep, SettingsDep, StoreDep, find_document
from server.api.responses import respond
from server.api.schemas import (
    AnswerRequest,
    AnswerResponse,
    CollectionDocument,
    CollectionList,
    CollectionPublic,
    CollectionRequest,
)
from server.config.errors import CollectionDocumentsInvalid, CollectionExists, InvalidRequest
from server.service import collection
from server.service.collection import status as collection_status
from server.service.questions import answers_while_reading, submit_collection
from store.docstore import READY, CollectionRecord, DocRecord, DocumentsMissing, DuplicateCollection, printable

router = APIRouter(prefix="/v1")


def _refuse(unknown: list[str], not_ready: list[tuple[str, str]]) -> CollectionDocumentsInvalid:
    """The 422 naming the documents a collection cannot hold: unknown ids, and (id, status) of those
    not ready."""
    why = []
    if unknown:
        why.append(f"no document with id {', '.join(repr(i) for i in unknown)} (GET /v1/documents lists them)")
    if not_ready:
        states = ", ".join(f"{i} is {s}" for i, s in not_ready)
        why.append(f"only ready documents can be asked together: {states} (wait for it, or leave it out)")
    return CollectionDocumentsInvalid("; ".join(why), unknown, [i for i, _ in not_ready])


@router.post("/collections", status_code=201, response_model=CollectionPublic)
async def create_collection(req: CollectionRequest, store: StoreDep) -> CollectionPublic:
    name = printable(req.name)  # as a document's name: no NUL (PostgreSQL refuses it), no bidi overrides
    if not name:
        raise InvalidRequest("name: a collection needs a name with printable characters in it, not only spaces")
    ids = list(dict.fromkeys(req.document_ids))
    docs = await asyncio.to_thread(lambda: [find_document(store, i) for i in ids])
    unknown = [i for i, d in zip(ids, docs, strict=True) if d is None]
    not_ready = [(d.id, d.status) for d in docs if d is not None and d.status != READY]
    if unknown or not_ready:
        raise _refuse(unknown, not_ready)
    try:
        created = await asyncio.to_thread(store.create_collection, name, ids)
    except DuplicateCollection as dup:
        raise CollectionExists(
            f"a collection named {name!r} exists already ({dup.existing.id}); ask it, delete it, or choose "
            "another name",
            dup.existing.id,
        ) from None
    except DocumentsMissing as missing:  # deleted since they were looked up
        raise _refuse(list(missing.ids), []) from None
    return public(created, [d for d in docs if d is not None])


@router.get("/collections", response_model=CollectionList)
def list_collections(store: StoreDep) -> CollectionList:
    return CollectionList(collections=[public(c, collection.members(store, c)) for c in store.collections()])


@router.get("/collections/{collection_id}", response_model=CollectionPublic)
def get_collection(found: CollectionDep, store: StoreDep) -> CollectionPublic:
    return public(found, collection.members(store, found))


@router.delete("/collections/{collection_id}", status_code=204)
def delete_collection(found: CollectionDep, store: StoreDep) -> Response:
    """Remove the collection (its index, then its row); its documents stay."""
    store.delete_collection(found.id)
    return Response(status_code=204)


@router.post("/collections/{collection_id}/answers", response_model=AnswerResponse)
async def answer(
    found: CollectionDep,
    req: AnswerRequest,
    request: Request,
    store: StoreDep,
    engine: EngineDep,
    settings: SettingsDep,
):
    docs = await asyncio.to_thread(collection.members, store, found)
    reading, unfit = engine.reading_ids(), engine.unfit_ids()
    left_out = collection.check_answerable(found, docs, reading, unfit, answers_while_reading(settings))
    params = answer_params(req, settings, engine)
    stream, position = await submit_collection(
        engine, store, settings, found.id, docs, req.question, params, left_out=left_out
    )
    return await respond(stream, position, req, request, settings)


def public(collection: CollectionRecord, docs: list[DocRecord]) -> CollectionPublic:
    """A collection and its documents as the API shows them."""
    return CollectionPublic(
        id=collection.id,
        name=collection.name,
        created_at=collection.created_at,
        status=collection_status(docs),
        documents=[
            CollectionDocument(id=d.id, name=d.name, status=d.status, pages=d.pages, tokens=d.tokens) for d in docs
        ],
    )
