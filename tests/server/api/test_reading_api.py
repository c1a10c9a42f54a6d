"""A document being read, as GET /v1/documents/{id} shows it (`reading`, server/engine/reading.py):
the second of two uploads waits its turn and says so, and the first reports the measured rate and the
time left (issue 36 item 7; issue 39 item 12: "preparing 0 %" for minutes with no word that it waits)."""

from __future__ import annotations

import time

from tests.conftest import wait_ready

ALICE = "text/gutenberg/alice-in-wonderland-pg11.txt"


def _post(client, name: str, data: bytes) -> str:
    r = client.post("/v1/documents", files={"file": (name, data)})
    assert r.status_code == 202, r.text
    return r.json()["id"]


def test_a_second_upload_waits_its_turn_and_the_first_shows_its_rate(client, cases):
    alice = (cases / ALICE).read_text(encoding="utf-8-sig")[:7000].encode()  # ~1,800 tokens: 4 chunks of 512
    first = _post(client, "alice-reading.txt", alice)
    second = _post(client, "after-alice.txt", b"A short note read after Alice, once her turn is over.\n")
    seen: dict[str, list[dict]] = {first: [], second: []}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        docs = {d: client.get(f"/v1/documents/{d}").json() for d in seen}
        for d, doc in docs.items():
            if doc["status"] == "ingesting":
                seen[d].append(doc["reading"])
        if all(doc["status"] != "ingesting" for doc in docs.values()):
            break
        time.sleep(0.05)
    ready = wait_ready(client, first)
    assert ready["status"] == "ready" and ready["reading"] is None  # a finished reading shows none
    # The second waited behind the first, and said so, before it was read.
    assert seen[second] and seen[second][0]["waiting"] and seen[second][0]["documents_ahead"] == 1, seen[second][:3]
    # The first: its tokens counted, then a measured rate and the time left, never "0.0 tok/s".
    rates = [r for r in seen[first] if r and r["tokens_per_s"] is not None]
    assert rates, seen[first]
    assert all(r["tokens_per_s"] > 0 and r["seconds_left"] >= 0 for r in rates)
    assert {r["tokens_total"] for r in seen[first] if r} == {ready["tokens"]}
    assert all(r["tokens_per_s"] is None for r in seen[first] if r and r["tokens_done"] == 0)
    for d in seen:
        client.delete(f"/v1/documents/{d}")
