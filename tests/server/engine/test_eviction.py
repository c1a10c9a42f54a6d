"""The disk budget's eviction (store/disk.py) never strands a document (issue 27 item 11): a
document still being ingested keeps its segments' snapshots, an upload that is refused evicts
nothing, and a segment whose snapshot went missing mid-ingestion is prefilled again."""

from __future__ import annotations

import time

import pytest

from ingest import snapshot
from tests.conftest import upload, wait_ready

ALICE = "text/gutenberg/alice-in-wonderland-pg11.txt"
MIB = 1024**2


def _text(cases, start: int, chars: int) -> bytes:
    return (cases / ALICE).read_text(encoding="utf-8-sig")[start : start + chars].encode()


def test_an_upload_that_is_refused_evicts_nothing(server, cases, tmp_path):
    data = tmp_path / "data"
    with server(data_dir=data, disk_budget_bytes=36 * MIB, snapshot_ram_bytes=0) as client:
        first = upload(client, cases / ALICE, name="a.txt", data=_text(cases, 0, 6000))
        state = data / "documents" / first["id"] / "state.bin"
        assert state.exists()
        big = client.post("/v1/documents", files={"file": ("big.txt", _text(cases, 6000, 60_000))})
        assert big.status_code == 507 and big.json()["error"]["type"] == "insufficient_storage", big.text
        assert state.exists(), "the refused upload evicted the other document's snapshot first"


@pytest.mark.slow  # ~18 s on 2 cores: make test ran 20 min; the fault loop's eviction points stay in it
def test_a_document_being_ingested_keeps_its_segments_and_becomes_ready(server, cases, tmp_path):
    """n_ctx 2048 splits A into segments; while A is prefilled, B arrives under a budget that only
    evicting A's finished segments could make room for: B is refused (or fits), A is never evicted
    mid-ingestion, and A becomes ready."""
    data = tmp_path / "data"
    with server(data_dir=data, n_ctx=2048, answer_reserve=512, disk_budget_bytes=60 * MIB) as client:
        r = client.post("/v1/documents", files={"file": ("a.txt", _text(cases, 0, 12_000))})
        assert r.status_code == 202, r.text
        a = r.json()["id"]
        seg0 = data / "documents" / a / "segments" / "0"
        deadline = time.monotonic() + 300
        while not (seg0 / "state.json").exists():
            assert time.monotonic() < deadline, "segment 0 was never saved"
            time.sleep(0.05)
        b = client.post("/v1/documents", files={"file": ("b.txt", _text(cases, 20_000, 9000))})
        assert b.status_code in (202, 507), b.text
        assert (seg0 / "state.json").exists(), "an ingesting document's segment was evicted"
        assert wait_ready(client, a, timeout=300)["status"] == "ready"
        ok = client.post(f"/v1/documents/{a}/answers", json={"question": "Who is Alice?", "max_tokens": 8})
        assert ok.status_code in (200, 409), ok.text


# 20 s on 2 cores; a lost snapshot prefilled again stays in make test (tests/server/engine/
# test_snapshot_damage.py, test_store_races.py): this adds the path where the last segment finds it.
@pytest.mark.slow
def test_a_segment_snapshot_lost_mid_ingestion_is_prefilled_again(server, cases, tmp_path):
    """Whatever removed it (an older server's eviction, a disk problem): when the last segment
    finishes and an earlier one has no snapshot, its prefill is queued again instead of the document
    staying ingesting at 100 % forever."""
    data = tmp_path / "data"
    with server(data_dir=data, n_ctx=2048, answer_reserve=512) as client:
        r = client.post("/v1/documents", files={"file": ("a.txt", _text(cases, 0, 12_000))})
        a = r.json()["id"]
        seg0 = data / "documents" / a / "segments" / "0"
        deadline = time.monotonic() + 300
        while not (seg0 / "state.json").exists():
            assert time.monotonic() < deadline, "segment 0 was never saved"
            time.sleep(0.02)
        snapshot.remove(seg0)
        info = wait_ready(client, a, timeout=300)
        assert info["status"] == "ready" and (seg0 / "state.json").exists(), info
