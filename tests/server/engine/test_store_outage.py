"""A store outage mid-ingestion strands nothing (issue 27 item 2): PostgreSQL stopped while a
segmented document is prefilled; the segments' jobs that meet the unreachable store are retried with
backoff, and once it is back the document becomes ready without a restart, on a real server process."""

from __future__ import annotations

import time

import pytest

from testkit.live import Live

BOOK = "text/gutenberg/alice-in-wonderland-pg11.txt"


@pytest.fixture
def postgres(postgres_server):  # the session server's binaries are there: a server of its own to stop
    from tests.pg import Postgres, pg_bin

    server = Postgres(pg_bin()).start()
    yield server
    server.remove()


@pytest.mark.slow  # ~17 s on 2 cores: make test ran 20 min; its PostgreSQL fault loop has store outages
def test_a_store_outage_mid_ingestion_leaves_nothing_stranded(postgres, tmp_path, gemma_path, cases):
    text = (cases / BOOK).read_bytes().decode("utf-8-sig")[:12_000]  # ~3k tokens: 3 segments at n_ctx 2048
    server = Live(
        tmp_path / "data", gemma_path, DOCQA_DATABASE_URL=postgres.url, DOCQA_N_CTX="2048",
        DOCQA_ANSWER_RESERVE="512", DOCQA_RESUME_CHECK_S="1", DOCQA_SELFTEST="false",
    ).start()  # fmt: skip
    try:
        status, created = server.upload("alice.txt", text.encode())
        assert status == 202, created
        doc = created["id"]
        segments = server.get(f"/v1/documents/{doc}")[1]["segments"]
        assert segments and len(segments) >= 3, segments
        first = segments[0]["tokens"] / sum(s["tokens"] for s in segments)
        _until(lambda: server.get(f"/v1/documents/{doc}")[1]["progress"] > first, 240)  # into segment 2
        postgres.stop()  # the store is touched as the next segment starts: that job meets it unreachable
        _until(lambda: "retrying in" in server.log.read_text(), 240)
        status, body = server.get(f"/v1/documents/{doc}")
        assert status == 503 and body["error"]["type"] == "store_busy", body
        postgres.start()
        info = server.wait_ready(doc, timeout=240)
        assert info["status"] == "ready", info
        status, answer = server.post_json(
            f"/v1/documents/{doc}/answers", {"question": "Who is Alice?", "max_tokens": 8}
        )
        assert status == 200, answer
    finally:
        server.stop()


def _until(condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
