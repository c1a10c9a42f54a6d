"""Typed dependencies read from ``app.state``."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from ingest.store import DocStore
from ingest.worker import ExtractionWorker
from server.config.errors import EngineUnavailable
from server.config.settings import Settings
from server.engine.engine import Engine


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
