"""Errors, in one place: each exception class has one HTTP status and one stable type string (the
table :data:`STATUS`), and every error leaves the server as JSON ``{"error": {"type", "message"}}``.

Routes, dependencies and the engine raise (or fail jobs with) the classes below; ingest raises its
own (ingest/errors.py) and snapshots theirs (ingest/snapshot.py), mapped here too. Messages say what
to do next; an error with ``details`` (a 413 with the part that fits) carries them as more fields of
the error object. Anything else is a bug: a 500 whose body carries only the request id, which the log
line with the trace carries too. The HTTP side (the exception handlers, the JSON response) is
server/api/handlers.py; this module imports no web framework, so the engine can use it.
"""

from __future__ import annotations

from ingest import errors as ingest_errors
from ingest import snapshot
from ingest.cut import OutsideDocument
from runtime.llama import DecodeError


class ApiError(Exception):
    """An error the client can act on; its status and type come from :data:`STATUS`. ``headers``
    travel with the response (``Retry-After``, ``WWW-Authenticate``)."""

    def __init__(self, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message, self.headers = message, headers or {}


class InvalidRequest(ApiError):
    """A field is out of range or the request cannot be served as asked."""


class DocumentRequired(ApiError):
    """An OpenAI request names no loaded document."""


class AmbiguousModel(ApiError):
    """An OpenAI ``model`` names several documents."""


class Unauthorized(ApiError):
    """DOCQA_API_KEY is set and the request does not carry it."""


class DocumentNotFound(ApiError):
    """No document with this id (or it was deleted)."""


class CollectionNotFound(ApiError):
    """No collection with this id (or it was deleted)."""


class CollectionExists(ApiError):
    """A collection with this name exists already; ``details`` names it (``collection_id``)."""

    def __init__(self, message: str, collection_id: str) -> None:
        super().__init__(message)
        self.details = {"collection_id": collection_id}


class CollectionEmpty(ApiError):
    """A question to a collection whose documents were all deleted."""


class CollectionDocumentsInvalid(ApiError):
    """A new collection names documents that do not exist or are not ready; ``details`` lists them
    (``unknown``, ``not_ready``: document ids)."""

    def __init__(self, message: str, unknown: list[str], not_ready: list[str]) -> None:
        super().__init__(message)
        self.details = {"unknown": unknown, "not_ready": not_ready}


class DocumentIngesting(ApiError):
    """The document is still being prefilled."""


class DocumentFailed(ApiError):
    """The document's ingestion failed; it must be uploaded again."""


class DocumentNotReady(ApiError):
    """The document is being ingested again (re-ingest, or a missing snapshot being rebuilt)."""


class SnapshotUnusable(ApiError):
    """The saved state was made by another model or cache layout."""


class SnapshotRebuilding(ApiError):
    """The saved state was missing; it is being rebuilt."""


class DocumentDamaged(ApiError):
    """A stored file of the document is damaged beyond what the server repairs (store/checked.py, store/repair.py)."""


class ReingestRunning(ApiError):
    """A re-ingest of this document is already running."""


class NeedsReingest(ApiError):
    """The document's saved state no longer fits the served context (DOCQA_N_CTX was lowered since it
    was read): it must be read again, in parts, before it can be asked (server/service/refit.py)."""


class QuestionTooLong(ApiError):
    """The question and the document together exceed n_ctx."""


class UploadTooLarge(ApiError):
    """The request body is over DOCQA_MAX_UPLOAD_BYTES (an upload) or DOCQA_MAX_JSON_BYTES (the rest)."""


class BodyTimeout(ApiError):
    """The client stopped sending the request body for longer than DOCQA_BODY_TIMEOUT_S."""


class ClientGone(ApiError):
    """The client hung up before its answer was ready. Nobody reads this response (nginx's 499); raising
    it ends the request's handler at once, and /metrics counts the request as ``cancelled``."""


class HostNotAllowed(ApiError):
    """The ``Host`` header names no host this server answers to (a DNS-rebinding page, or a proxy)."""


class OriginNotAllowed(ApiError):
    """A state-changing request from another site's page (``Origin`` neither ours nor allowed)."""


class KvCacheFull(ApiError):
    """The shared KV cache has no room for another question now."""


class EngineUnavailable(ApiError):
    """The model is not loaded (yet)."""


class EngineStopped(ApiError):
    """The server is shutting down."""


class GenerationFailed(ApiError):
    """llama.cpp failed while answering."""


#: Exception class -> (HTTP status, error type). Subclasses not listed use their nearest listed base.
STATUS: dict[type[Exception], tuple[int, str]] = {
    InvalidRequest: (422, "invalid_request"),
    DocumentRequired: (400, "document_required"),
    AmbiguousModel: (400, "ambiguous_model"),
    Unauthorized: (401, "unauthorized"),
    DocumentNotFound: (404, "document_not_found"),
    CollectionNotFound: (404, "collection_not_found"),
    CollectionExists: (409, "collection_exists"),
    CollectionEmpty: (409, "collection_empty"),
    CollectionDocumentsInvalid: (422, "invalid_documents"),
    DocumentIngesting: (409, "document_ingesting"),
    DocumentFailed: (409, "document_failed"),
    DocumentNotReady: (409, "document_not_ready"),
    SnapshotUnusable: (409, "snapshot_incompatible"),
    SnapshotRebuilding: (409, "snapshot_missing"),
    DocumentDamaged: (409, "document_damaged"),
    ReingestRunning: (409, "reingest_running"),
    NeedsReingest: (409, "needs_reingest"),
    QuestionTooLong: (413, "question_too_long"),
    UploadTooLarge: (413, "upload_too_large"),
    BodyTimeout: (408, "body_timeout"),
    ClientGone: (499, "client_closed_request"),
    HostNotAllowed: (403, "host_not_allowed"),
    OriginNotAllowed: (403, "origin_not_allowed"),
    KvCacheFull: (503, "kv_cache_full"),
    EngineUnavailable: (503, "engine_unavailable"),
    EngineStopped: (503, "engine_stopped"),
    GenerationFailed: (500, "engine_error"),
    # ingest/errors.py: what is wrong with an uploaded file
    ingest_errors.DocumentTooLong: (413, "document_too_long"),
    ingest_errors.UnsupportedType: (415, "unsupported_type"),
    ingest_errors.EmptyDocument: (422, "empty_document"),
    ingest_errors.PasswordRequired: (422, "password_required"),
    ingest_errors.WrongPassword: (422, "wrong_password"),
    ingest_errors.UnreadablePdf: (422, "unreadable_pdf"),
    ingest_errors.UnreadableDocument: (422, "unreadable_document"),
    ingest_errors.OcrUnavailable: (422, "ocr_unavailable"),
    ingest_errors.NoTextLayer: (422, "no_text_layer"),
    ingest_errors.ExtractorBusy: (503, "extractor_busy"),
    OutsideDocument: (422, "outside_document"),
    ingest_errors.DocumentError: (422, "bad_document"),
    snapshot.SnapshotIncompatible: (409, "snapshot_incompatible"),
    snapshot.SnapshotMissing: (409, "snapshot_missing"),
    ingest_errors.DocumentFilesDamaged: (409, "document_damaged"),
    # ingest/errors.py: the data directory, not the document
    ingest_errors.DiskFull: (507, "insufficient_storage"),
    ingest_errors.StoreBusy: (503, "store_busy"),
    ingest_errors.StorageError: (500, "storage_error"),
}
INTERNAL = (500, "internal_error")


def damaged(exc: ingest_errors.DocumentFilesDamaged, doc_id: str) -> DocumentDamaged:
    """A damaged file of document ``doc_id`` as the 409 its client gets: what is damaged, and the
    action that repairs it."""
    return DocumentDamaged(f"document {doc_id}: {exc}; {exc.action.format(id=doc_id)}")


def from_engine(exc: Exception) -> Exception:
    """An engine failure as the error its job reports (the details stay in the log): errors with a
    status of their own (a full disk, a locked database) as they are, the rest as GenerationFailed."""
    if isinstance(exc, ApiError | ingest_errors.StorageError):
        return exc
    if isinstance(exc, DecodeError) and exc.rc == 1:
        return KvCacheFull("the KV cache is full with other answers in progress; retry in a moment")
    return GenerationFailed(f"generation failed ({type(exc).__name__}); see the server log")


def status_of(exc: BaseException) -> tuple[int, str]:
    """(HTTP status, error type) of ``exc`` by :data:`STATUS` (the nearest listed base class)."""
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return INTERNAL


def body(error_type: str, message: str, **details: object) -> dict:
    """The JSON error body every route, the middleware and the SSE ``error`` event use."""
    return {"error": {"type": error_type, "message": message, **details}}


def payload(exc: BaseException, request_id: str | None = None) -> dict:
    """``exc`` as the JSON error body: for anything not in :data:`STATUS`, a generic message with the
    request id (the log has the details under the same id)."""
    status, error_type = status_of(exc)
    if (status, error_type) == INTERNAL:
        where = f" (request {request_id})" if request_id else ""
        return body(INTERNAL[1], f"the server failed to handle this request{where}; its log has the details")
    return body(error_type, str(exc), **(getattr(exc, "details", None) or {}))
