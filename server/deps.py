"""Typed dependencies read from ``app.state``."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from ingest.store import DocStore
from ingest.worker import ExtractionWorker
from server.engine import Engine
from server.errors import EngineUnavailable, Unauthorized
from server.settings import Settings


def _settings(request: Request) -> Settings:
    return request.app.state.settings


def _store(request: Request) -> DocStore:
    return request.app.state.store


def _engine(request: Request) -> Engine:
    engine: Engine | None = getattr(request.app.state, "engine", None)
    if engine is None or not engine.ready.is_set() or engine.load_error:
        raise EngineUnavailable("the model is not loaded yet; retry in a few seconds", {"Retry-After": "5"})
    return engine


def require_api_key(request: Request) -> None:
    """Bearer-token check for /v1 routes when DOCQA_API_KEY is set (constant-time comparison)."""
    import hmac

    expected = request.app.state.settings.api_key
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if not (scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), expected.encode())):
        raise Unauthorized(
            "this server needs an API key: send `Authorization: Bearer <key>`", {"WWW-Authenticate": "Bearer"}
        )


def _extractor(request: Request):
    return request.app.state.extractor


SettingsDep = Annotated[Settings, Depends(_settings)]
StoreDep = Annotated[DocStore, Depends(_store)]
EngineDep = Annotated[Engine, Depends(_engine)]
ExtractorDep = Annotated[ExtractionWorker, Depends(_extractor)]
