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
    "exc",
    [
        errors.DocumentNotFound("x"),
        ingest_errors.UnreadablePdf("x"),  # a subclass listed itself
        snapshot.SnapshotMissing("x"),
        ingest_errors.DiskFull("x"),
        ValueError("/secret/path"),  # anything else: a bug, no details
    ],
)
def test_the_response_carries_the_tables_status_and_type(exc):
    """The table itself is tests/server/config/test_errors.py's; here, that the response follows it."""
    response = handlers.response(exc)
    body = json.loads(response.body)
    assert (response.status_code, body["error"]["type"]) == errors.status_of(exc)
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
