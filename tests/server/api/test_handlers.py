"""Every exception leaves the server as the JSON error body with its table's status (server/api/handlers.py);
headers travel with it, and a 500 carries no details."""

from __future__ import annotations

import json

import pytest

from ingest import errors as ingest_errors
from ingest import snapshot
from server.api import handlers
from server.config import errors


@pytest.mark.parametrize(
    ("exc", "status", "error_type"),
    [
        (errors.InvalidRequest("x"), 422, "invalid_request"),
        (errors.DocumentNotFound("x"), 404, "document_not_found"),
        (errors.KvCacheFull("x"), 503, "kv_cache_full"),
        (ingest_errors.DocumentTooLong(10, 5), 413, "document_too_long"),
        (ingest_errors.UnreadablePdf("x"), 422, "unreadable_pdf"),  # a subclass listed itself
        (ingest_errors.UnreadableDocument("x"), 422, "unreadable_document"),
        (ingest_errors.ExtractorBusy("x", retry_after=5), 503, "extractor_busy"),
        (snapshot.SnapshotMissing("x"), 409, "snapshot_missing"),
        (ingest_errors.DiskFull("x"), 507, "insufficient_storage"),
        (ingest_errors.StoreBusy("x"), 503, "store_busy"),
        (ingest_errors.StorageFailed("x"), 500, "storage_error"),
        (errors.BodyTimeout("x"), 408, "body_timeout"),
        (errors.HostNotAllowed("x"), 403, "host_not_allowed"),
        (errors.OriginNotAllowed("x"), 403, "origin_not_allowed"),
        (ValueError("/secret/path"), 500, "internal_error"),  # anything else: a bug, no details
    ],
)
def test_every_error_has_one_status_and_type(exc, status, error_type):
    response = handlers.response(exc)
    body = json.loads(response.body)
    assert (response.status_code, body["error"]["type"]) == (status, error_type)
    assert "/secret/path" not in response.body.decode()


def test_headers_travel_with_the_error():
    busy = handlers.response(ingest_errors.ExtractorBusy("wait", retry_after=5))
    assert busy.headers["retry-after"] == "5"
    unauthorized = handlers.response(errors.Unauthorized("key", {"WWW-Authenticate": "Bearer"}))
    assert unauthorized.headers["www-authenticate"] == "Bearer"
    assert handlers.response(ingest_errors.StoreBusy("locked")).headers["retry-after"] == "5"


def test_a_413_carries_the_part_that_fits():
    exc = ingest_errors.DocumentTooLong(
        90_000, 7168, estimated=True, fits={"pages": [1, 16]}, n_ctx=8192, n_ctx_train=32768
    )
    error = json.loads(handlers.response(exc).body)["error"]
    assert (error["n_tokens"], error["limit"], error["estimated"], error["fits"]) == (
        90_000,
        7168,
        True,
        {"pages": [1, 16]},
    )
