"""One table maps every error to a status and a type (server/config/errors.py)."""

from __future__ import annotations

import json

import pytest

from ingest import errors as ingest_errors
from ingest import snapshot
from runtime.llama import DecodeError
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
        (errors.ClientGone("x"), 499, "client_closed_request"),
        (errors.HostNotAllowed("x"), 403, "host_not_allowed"),
        (errors.OriginNotAllowed("x"), 403, "origin_not_allowed"),
        (ValueError("/secret/path"), 500, "internal_error"),  # anything else: a bug, no details
    ],
)
def test_every_error_has_one_status_and_type(exc, status, error_type):
    assert errors.status_of(exc) == (status, error_type)
    assert "/secret/path" not in json.dumps(errors.payload(exc))


def test_engine_failures_become_api_errors_without_details():
    assert isinstance(errors.from_engine(DecodeError(1, 17)), errors.KvCacheFull)
    failed = errors.from_engine(RuntimeError("/data/documents/abc/state.bin is corrupt"))
    assert isinstance(failed, errors.GenerationFailed) and "/data" not in str(failed)
    full = ingest_errors.DiskFull("the disk is full")  # an engine error with a status of its own stays itself
    assert errors.from_engine(full) is full
