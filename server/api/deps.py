"""Typed dependencies, the only reads of ``app.state``: the settings, the service room's one value
(server/service/__init__.py ``Services``, made in the lifespan) and what it holds, the metrics, the
watched folders, and the document or collection a request's path names. Code holding an app rather
than a request (the cluster's replicas, the benches) reads it through the ``*_of`` functions.

The document and collection dependencies are sync functions: FastAPI runs a sync dependency in its
thread pool, so their row reads never run on the event loop (with PostgreSQL each is a network
round trip that would stall every stream on the loop; tests/server/api/test_slow_store.py).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from server.api.metrics import Metrics
from server.config.errors import CollectionNotFound, DocumentNotFound, EngineUnavailable
from server.config.settings import Settings
from server.engine.engine import Engine
from server.engine.selftest import SelfTest
from server.service import Services
from server.service.watch import FolderWatch
from store.docstore import CollectionRecord, DocRecord, DocStore


def _settings(request: Request) -> Settings:
    return request.app.state.settings


def services_of(app) -> Services | None:
    """The app's services (None before the lifespan made them, or after a failed start)."""
    return getattr(app.state, "services", None)


def settings_of(app) -> Settings:
    return app.state.settings


def metrics_of(app) -> Metrics:
    """The app's Prometheus metrics (made with the app, before the lifespan)."""
    return app.state.metrics


def selftest_of(app) -> SelfTest | None:
    """The start-up self-test's result (None: not run, as in tests and the cluster's replicas)."""
    return getattr(app.state, "selftest", None)


def watch_of(app) -> FolderWatch | None:
    """The watched folders (None without DOCQA_WATCH, or before the lifespan started them)."""
    return getattr(app.state, "watch", None)


def _services(request: Request) -> Services:
    services = services_of(request.app)
    if services is None:  # before the lifespan opened the store and loaded the model
        raise EngineUnavailable("the server is starting; retry in a few seconds", {"Retry-After": "5"})
    return services


def _store(request: Request) -> DocStore:
    return _services(request).store


def _engine(request: Request) -> Engine:
    engine = _services(request).engine
    if not engine.ready.is_set() or engine.load_error:
        raise EngineUnavailable("the model is not loaded yet; retry in a few seconds", {"Retry-After": "5"})
    return engine


def _watch(request: Request) -> FolderWatch | None:
    return watch_of(request.app)


SettingsDep = Annotated[Settings, Depends(_settings)]
StoreDep = Annotated[DocStore, Depends(_store)]
EngineDep = Annotated[Engine, Depends(_engine)]
ServicesDep = Annotated[Services, Depends(_services)]
WatchDep = Annotated["FolderWatch | None", Depends(_watch)]


def find_document(store: DocStore, doc_id: str) -> DocRecord | None:
    """The document with this id, or None (an id is alphanumeric: anything else is no id of ours)."""
    return store.get(doc_id) if doc_id.isalnum() else None


def existing_document(store: DocStore, doc_id: str) -> DocRecord:
    """The document with this id; DocumentNotFound (404) naming how to list them otherwise."""
    doc = find_document(store, doc_id)
    if doc is None:
        raise DocumentNotFound(f"no document with id {doc_id!r}; list them with GET /v1/documents")
    return doc


def find_collection(store: DocStore, collection_id: str) -> CollectionRecord | None:
    """The collection with this id, or None (an id is alphanumeric: anything else is no id of ours)."""
    return store.collection(collection_id) if collection_id.isalnum() else None


def existing_collection(store: DocStore, collection_id: str) -> CollectionRecord:
    """The collection with this id; CollectionNotFound (404) naming how to list them otherwise."""
    found = find_collection(store, collection_id)
    if found is None:
        raise CollectionNotFound(f"no collection with id {collection_id!r}; list them with GET /v1/collections")
    return found


def _document(doc_id: str, store: StoreDep) -> DocRecord:
    return existing_document(store, doc_id)


def _collection(collection_id: str, store: StoreDep) -> CollectionRecord:
    return existing_collection(store, collection_id)


#: The document of the path's ``doc_id`` (404 without one), read in the thread pool.
DocumentDep = Annotated[DocRecord, Depends(_document)]
#: The collection of the path's ``collection_id`` (404 without one), read in the thread pool.
CollectionDep = Annotated[CollectionRecord, Depends(_collection)]
