"""The exception handlers: every exception a request raises leaves the server as the JSON error body
of server/config/errors.py, with the status of its table; anything unexpected as a 500 that carries
only the request id (the log line with the trace carries it too)."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ingest import errors as ingest_errors
from ingest import snapshot
from server.api.parsing import json_invalid, unparsable
from server.config.errors import ApiError, InvalidRequest, body, damaged, payload, status_of

log = logging.getLogger("docqa.http")


def request_id(request: Request) -> str | None:
    """The id server/api/guard.py gave this request (None outside it: a bare test app)."""
    return request.scope.get(REQUEST_ID)


#: Scope key of the request id (server/api/guard.py sets it and the X-Request-ID response header).
REQUEST_ID = "docqa.request_id"
NOT_AN_OBJECT = (
    "the request body must be a JSON object, sent with Content-Type: application/json "
    '(for a question: {"question": "..."})'
)


def response(exc: BaseException, rid: str | None = None) -> JSONResponse:
    status, _ = status_of(exc)
    headers = dict(getattr(exc, "headers", None) or {})
    if rid:  # a 500 is sent from outside server/api/guard.py, which tags the other responses
        headers["X-Request-ID"] = rid
    return JSONResponse(payload(exc, rid), status_code=status, headers=headers)


def install(app: FastAPI) -> None:
    """Register the handlers that turn every exception into the JSON error body."""

    @app.exception_handler(ApiError)
    @app.exception_handler(ingest_errors.DocumentError)
    @app.exception_handler(ingest_errors.StorageError)
    @app.exception_handler(snapshot.SnapshotIncompatible)
    @app.exception_handler(snapshot.SnapshotMissing)
    async def _known(_: Request, exc: Exception) -> JSONResponse:
        return response(exc)

    @app.exception_handler(ingest_errors.DocumentFilesDamaged)
    async def _damaged(request: Request, exc: ingest_errors.DocumentFilesDamaged) -> JSONResponse:
        """A damaged file that reached a route unconverted: 409 with the repairing action."""
        doc_id = request.path_params.get("doc_id") or "<id>"
        return response(damaged(exc, doc_id))

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        parts = []
        for e in exc.errors():
            if e.get("type") == "json_invalid":  # loc: ("body", character position)
                return response(json_invalid(e["loc"][-1], (e.get("ctx") or {}).get("error", "JSON decode error")))
            where = ".".join(str(p) for p in e.get("loc", ()) if p != "body")
            if not where and e.get("type") in ("model_attributes_type", "dict_type"):  # text, a list, a number
                return response(InvalidRequest(NOT_AN_OBJECT))
            parts.append(f"{where}: {e.get('msg')}" if where else str(e.get("msg")))
        return response(InvalidRequest("; ".join(parts) or "invalid request"))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and (named := unparsable(exc)) is not None:  # a body that could not be parsed
            return response(named)
        kind = {404: "not_found", 405: "method_not_allowed", 413: "upload_too_large"}.get(exc.status_code, "http_error")
        return JSONResponse(body(kind, str(exc.detail)), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        rid = request_id(request)
        log.exception("unexpected error in request %s (%s %s)", rid, request.method, request.url.path)
        return response(exc, rid)
