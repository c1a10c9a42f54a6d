"""The MCP tools' calls (server/api/mcp_tools.py :class:`DocqaApi`) answered in-process, for ``/mcp`` on
the running server (server/api/mcp_http.py): each calls the functions its route calls, with the app's
services looked up at call time (the lifespan makes them after the endpoint exists), in the order the
route's dependencies are resolved, and returns what the route returns as JSON. The request went
through the HTTP guard once already, as ``/mcp``; no second request, no second count in /metrics.

An error is raised as the route's client would have read it: :class:`mcp_tools.ApiError` with
``type: message`` (the routes a message names in the tools' words), the type and message of
server/config/errors.py; anything unexpected is logged and becomes ``internal_error``, as a 500 is.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from ingest.errors import DocumentFilesDamaged
from server.api import deps
from server.api.mcp_tools import ApiError, in_tool_words
from server.api.routes import collections, documents
from server.api.schemas import AnswerRequest
from server.config.errors import INTERNAL, EngineUnavailable, InvalidRequest, damaged, payload, status_of
from server.engine.engine import Engine
from server.service import Services

log = logging.getLogger("docqa.mcp")
T = TypeVar("T")


class LocalApi:
    """docqa's service layer for the tools, in the process of ``app``."""

    def __init__(self, app) -> None:
        self.app = app

    async def documents(self) -> list[dict]:
        async def listed() -> list[dict]:
            services = self._services()
            watch = deps.watch_of(self.app)
            found = await asyncio.to_thread(documents.list_documents, services.store, self._engine(services), watch)
            return _json(found)["documents"]

        return await _answered(listed)

    async def document(self, doc_id: str) -> dict:
        async def got() -> dict:
            services = self._services()
            doc = await asyncio.to_thread(deps.existing_document, services.store, doc_id)
            engine, watch = self._engine(services), deps.watch_of(self.app)
            return _json(await asyncio.to_thread(documents.get_document, doc, engine, watch))

        return await _answered(got, doc_id)

    async def text(self, doc_id: str) -> dict:
        async def got() -> dict:
            services = self._services()
            doc = await asyncio.to_thread(deps.existing_document, services.store, doc_id)
            return _json(await documents.get_text(doc, services.store, self._engine(services)))

        return await _answered(got, doc_id)

    async def collections(self) -> list[dict]:
        async def listed() -> list[dict]:
            store = self._services().store
            return _json(await asyncio.to_thread(collections.list_collections, store))["collections"]

        return await _answered(listed)

    async def ask(self, question: str, max_tokens: int, document_id: str | None, collection_id: str | None) -> dict:
        async def answered() -> dict:
            services = self._services()
            store, settings = services.store, deps.settings_of(self.app)
            if document_id:
                doc = await asyncio.to_thread(deps.existing_document, store, document_id)
                engine = self._engine(services)
                reply = await documents.answer(doc, _request(question, max_tokens), None, store, engine, settings)
            else:
                found = await asyncio.to_thread(deps.existing_collection, store, collection_id or "")
                engine = self._engine(services)
                reply = await collections.answer(found, _request(question, max_tokens), None, store, engine, settings)
            return _json(reply)

        return await _answered(answered, document_id)

    async def upload(self, name: str, data: bytes) -> dict:
        async def uploaded() -> dict:
            services = self._services()
            engine = self._engine(services)

            async def read() -> bytes:
                return data

            created, _ = await documents.receive(services, engine, name, len(data), read)
            return _json(created)

        return await _answered(uploaded)

    def _services(self) -> Services:
        """As the routes' ``ServicesDep`` (server/api/deps.py): 503 before the lifespan made them."""
        services = deps.services_of(self.app)
        if services is None:
            raise EngineUnavailable("the server is starting; retry in a few seconds", {"Retry-After": "5"})
        return services

    @staticmethod
    def _engine(services: Services) -> Engine:
        """As the routes' ``EngineDep``: 503 until the model is loaded."""
        engine = services.engine
        if not engine.ready.is_set() or engine.load_error:
            raise EngineUnavailable("the model is not loaded yet; retry in a few seconds", {"Retry-After": "5"})
        return engine


def _request(question: str, max_tokens: int) -> AnswerRequest:
    """The question as the route's body: its checks, and their 422 in the words of the route's."""
    try:
        return AnswerRequest(question=question, max_tokens=max_tokens)
    except ValidationError as exc:
        parts = []
        for e in exc.errors():
            where = ".".join(str(p) for p in e.get("loc", ()))
            parts.append(f"{where}: {e.get('msg')}" if where else str(e.get("msg")))
        raise InvalidRequest("; ".join(parts) or "invalid request") from None


def _json(model: BaseModel) -> dict:
    """A route's response model as its client reads it."""
    return model.model_dump(mode="json")


async def _answered(work: Callable[[], Awaitable[T]], doc_id: str | None = None) -> T:
    """``work()``, its errors as the tools' :class:`ApiError` with the type and message the route's
    JSON error body carries (server/api/handlers.py); ``doc_id``: the document a damaged file is of."""
    try:
        return await work()
    except DocumentFilesDamaged as exc:
        error = payload(damaged(exc, doc_id or "<id>"))["error"]
    except Exception as exc:
        if status_of(exc) == INTERNAL:
            log.exception("unexpected error in an MCP tool")
        error = payload(exc)["error"]
    raise ApiError(f"{error['type']}: {in_tool_words(error['message'])}")
