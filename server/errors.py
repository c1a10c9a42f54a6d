"""Errors become JSON ``{"error": {"type", "message"}}`` with one status each, in one place."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ingest.errors import (
    DocumentError,
    DocumentTooLong,
    EmptyDocument,
    NoTextLayer,
    PasswordRequired,
    UnreadableDocument,
    UnreadablePdf,
    UnsupportedType,
    WrongPassword,
)

log = logging.getLogger("docqa.http")


class ApiError(Exception):
    """An error with an HTTP status, a stable type string and a message that says what to do."""

    def __init__(self, status: int, error_type: str, message: str) -> None:
        super().__init__(message)
        self.status, self.error_type, self.message = status, error_type, message


# (status, type) per ingest error class; order matters only for subclasses.
_DOCUMENT_ERRORS: dict[type[DocumentError], tuple[int, str]] = {
    DocumentTooLong: (413, "document_too_long"),
    UnsupportedType: (415, "unsupported_type"),
    EmptyDocument: (422, "empty_document"),
    PasswordRequired: (422, "password_required"),
    WrongPassword: (422, "wrong_password"),
    UnreadablePdf: (422, "unreadable_pdf"),
    UnreadableDocument: (422, "unreadable_document"),
    NoTextLayer: (422, "no_text_layer"),
}


def document_error(exc: DocumentError) -> ApiError:
    status, error_type = _DOCUMENT_ERRORS.get(type(exc), (422, "bad_document"))
    return ApiError(status, error_type, str(exc))


def body(error_type: str, message: str) -> dict:
    return {"error": {"type": error_type, "message": message}}


def install(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(body(exc.error_type, exc.message), status_code=exc.status)

    @app.exception_handler(DocumentError)
    async def _doc(_: Request, exc: DocumentError) -> JSONResponse:
        err = document_error(exc)
        return JSONResponse(body(err.error_type, err.message), status_code=err.status)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        parts = []
        for e in exc.errors():
            where = ".".join(str(p) for p in e.get("loc", ()) if p != "body")
            parts.append(f"{where}: {e.get('msg')}" if where else str(e.get("msg")))
        return JSONResponse(body("invalid_request", "; ".join(parts) or "invalid request"), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = {404: "not_found", 405: "method_not_allowed", 413: "upload_too_large"}.get(exc.status_code, "http_error")
        return JSONResponse(body(kind, str(exc.detail)), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return JSONResponse(body("internal_error", f"{type(exc).__name__}: {exc}"), status_code=500)
