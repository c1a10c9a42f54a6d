"""Typed dependencies read from ``app.state``."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from ingest.store import DocStore
from server.engine import Engine
from server.errors import ApiError
from server.settings import Settings


def _settings(request: Request) -> Settings:
    return request.app.state.settings


def _store(request: Request) -> DocStore:
    return request.app.state.store


def _engine(request: Request) -> Engine:
    engine: Engine | None = getattr(request.app.state, "engine", None)
    if engine is None or not engine.ready.is_set() or engine.load_error:
        raise ApiError(503, "engine_unavailable", "the model is not loaded yet; retry in a few seconds")
    return engine


SettingsDep = Annotated[Settings, Depends(_settings)]
StoreDep = Annotated[DocStore, Depends(_store)]
EngineDep = Annotated[Engine, Depends(_engine)]
