"""Typed dependencies read from ``app.state``, and a document looked up by the id a request names."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from ingest.worker import ExtractionWorker
from server.config.errors import DocumentNotFound, EngineUnavailable
from server.config.settings import Settings
from server.engine.engine import Engine
from store.docstore import DocRecord, DocStore


def _settings(request: Request) -> Settings:
    return request.app.state.settings


def _store(request: Request) -> DocStore:
    store: DocStore | None = getattr(request.app.state, "store", None)
    if store is None:  # before the lifespan opened it
        raise EngineUnavailable("the server is starting; retry in a few seconds", {"Retry-After": "5"})
    return store


def _engine(request: Request) -> Engine:
    engine: Engine | None = getattr(request.app.state, "engine", None)
    if engine is None or not engine.ready.is_set() or engine.load_error:
        raise EngineUnavailable("the model is not loaded yet; retry in a few seconds", {"Retry-After": "5"})
    return engine


def _extractor(request: Request):
    return request.app.state.extractor


SettingsDep = Annotated[Settings, Depends(_settings)]
StoreDep = Annotated[DocStore, Depends(_store)]
EngineDep = Annotated[Engine, Depends(_engine)]
ExtractorDep = Annotated[ExtractionWorker, Depends(_extractor)]


def find_document(store: DocStore, doc_id: str) -> DocRecord | None:
    """The document with this id, or None (an id is alphanumeric: anything else is no id of ours)."""
    return store.get(doc_id) if doc_id.isalnum() else None


def existing_document(store: DocStore, doc_id: str) -> DocRecord:
    """The document with this id; DocumentNotFound (404) naming how to list them otherwise."""
    doc = find_document(store, doc_id)
    if doc is None:
        raise DocumentNotFound(f"no document with id {doc_id!r}; list them with GET /v1/documents")
    return doc
