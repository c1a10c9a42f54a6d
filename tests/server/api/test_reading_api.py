"""A document being read, as GET /v1/documents/{id} shows it (`reading`, server/engine/reading.py):
the second of two uploads waits its turn and says so, and the first reports the measured rate and the
time left (issue 36 item 7; issue 39 item 12: "preparing 0 %" for minutes with no word that it waits);
small documents are read before a big one queued first, each showing its place and wait (issue 51)."""

from __future__ import annotations

import time

from tests.conftest import wait_ready

ALICE = "text/gutenberg/alice-in-wonderland-pg11.txt"


def _post(client, name: str, data: bytes) -> str:
    r = client.post("/v1/documents", files={"file": (name, data)})
    assert r.status_code == 202, r.text
    return r.json()["id"]


def test_a_second_upload_waits_its_turn_and_the_first_shows_its_rate(client, cases):
    text = (cases / ALICE).read_text(encoding="utf-8-sig")
    alice = text[:4000].encode()  # ~1,000 tokens
    first = _post(client, "alice-reading.txt", alice)
    # ~600 tokens: more than half of what is left of the first, so it waits its turn (scheduler.py PREEMPT_SHARE)
    second = _post(client, "after-alice.txt", text[20_000:22_400].encode())
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


BOOK = "text/gutenberg/around-the-world-in-80-days-pg103.txt"


def test_small_documents_are_read_before_a_big_one_queued_first(client, cases):
    """Issue 51: a 6k-token text under way, then two of about 500 tokens: each small one is read
    before the big one goes on (shortest expected reading first), within twice its own reading time
    and a minute of its upload, and while it waits it shows its place and the expected wait; the big
    one is paused with its progress kept, and goes on from there."""
    book = (cases / BOOK).read_text(encoding="utf-8-sig")
    big = book[20_000:44_000].encode()  # ~6,000 tokens
    smalls = [book[60_000:62_000].encode(), book[90_000:92_000].encode()]  # ~500 tokens each
    big_id = _post(client, "big.txt", big)
    deadline = time.monotonic() + 120
    while (doc := client.get(f"/v1/documents/{big_id}").json())["reading"]["tokens_done"] == 0:
        assert doc["status"] == "ingesting" and time.monotonic() < deadline, doc
        time.sleep(0.05)
    queued = {}
    for k, data in enumerate(smalls):
        doc_id = _post(client, f"small-{k}.txt", data)
        queued[doc_id] = time.monotonic()
    began: dict[str, float] = {}
    ready: dict[str, float] = {}
    seen: dict[str, list[dict]] = {d: [] for d in [big_id, *queued]}
    while len(ready) < len(queued):
        assert time.monotonic() < deadline, (ready, {d: s[-1:] for d, s in seen.items()})
        for doc_id in seen:
            doc = client.get(f"/v1/documents/{doc_id}").json()
            now = time.monotonic()
            if doc["status"] == "ingesting":
                seen[doc_id].append(doc["reading"])
                if not doc["reading"]["waiting"]:
                    began.setdefault(doc_id, now)
            elif doc_id in queued:
                assert doc["status"] == "ready", doc
                ready.setdefault(doc_id, now)
        time.sleep(0.05)
    big_doc = client.get(f"/v1/documents/{big_id}").json()
    assert big_doc["status"] == "ingesting", "the big one was queued first, and is read after both small ones"
    for doc_id, t0 in queued.items():
        own = ready[doc_id] - began.get(doc_id, ready[doc_id])
        assert ready[doc_id] - t0 <= 2 * own + 60, (doc_id, ready[doc_id] - t0, own)
    # Waiting, each small one showed its place in the queue and, once the rate was known, its wait.
    for doc_id in queued:
        waiting = [r for r in seen[doc_id] if r["waiting"]]
        assert all(r["position"] >= 2 and r["documents_ahead"] == r["position"] - 1 for r in waiting), waiting
        timed = [r for r in seen[doc_id] if r["seconds_left"] is not None]
        assert timed and all(r["seconds_left"] >= 0 and r["tokens_per_s"] > 0 for r in timed), seen[doc_id]
    # The big one was paused with what it had read, and was never read from the start again.
    paused = [r for r in seen[big_id] if r["paused"]]
    assert paused and all(r["waiting"] and r["tokens_done"] > 0 for r in paused), seen[big_id]
    done = [r["tokens_done"] for r in seen[big_id]]
    assert done == sorted(done), "its progress is kept: never back to an earlier token"
    if paused[-1]["seconds_left"] is not None:
        assert paused[-1]["seconds_left"] > 0
    deadline = time.monotonic() + 60
    while (r := client.get(f"/v1/documents/{big_id}").json()["reading"]) and r["waiting"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert r is None or r["tokens_done"] >= paused[-1]["tokens_done"], "it went on from where it stopped"
