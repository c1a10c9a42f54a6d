"""A document read for a larger context than the server now serves (server/service/refit.py; issue 39
item 9: after lowering DOCQA_N_CTX, old documents stayed `ready` and every question got a 413 advising
"ask a shorter question", on the CLI, REST and the OpenAI route alike), and the split note once the
context grows back (item 11: "In 2 parts: 3,922 tokens, more than the 31,744 the model reads at once")."""

from __future__ import annotations

import time

from server.service import refit
from server.tools.shown import segment_lines
from tests.conftest import make_settings, upload, wait_ready

ALICE = "text/gutenberg/alice-in-wonderland-pg11.txt"
LARGE = {"n_ctx": 2048, "answer_reserve": 448, "segment_overlap_tokens": 32}  # a document may hold 1,600 tokens
SMALL = {**LARGE, "n_ctx": 1024}  # 576


def _ask(client, doc_id: str):
    return client.post(f"/v1/documents/{doc_id}/answers", json={"question": "Who is Alice?", "max_tokens": 8})


def test_a_document_read_for_a_larger_context_is_marked_refused_with_409_and_read_again(server, cases, tmp_path):
    alice = (cases / ALICE).read_text(encoding="utf-8-sig")
    data = tmp_path / "data"
    with server(data, **LARGE) as client:  # both ~900 tokens: one piece each at this size
        first = upload(client, None, name="alice-a.txt", data=alice[:3500].encode())
        second = upload(client, None, name="alice-b.txt", data=alice[3500:7000].encode())
        assert first["segments"] is None and 600 < first["tokens"] <= 1600, first["tokens"]

    with server(data, **SMALL) as client:
        doc = client.get(f"/v1/documents/{first['id']}").json()
        assert doc["status"] == "ready" and doc["needs_reingest"] == refit.reason(
            first["tokens"], make_settings(data, data, **SMALL), segmented=False
        )
        assert f"holds {first['tokens']:,} tokens, more than the 576" in doc["needs_reingest"]
        r = _ask(client, first["id"])
        assert r.status_code == 409 and r.json()["error"]["type"] == "needs_reingest", r.text
        assert f"docqa reingest {first['id']}" in r.json()["error"]["message"]
        chat = client.post(
            "/v1/chat/completions",
            json={"model": f"doc:{first['id']}", "messages": [{"role": "user", "content": "Who is Alice?"}]},
        )
        assert chat.status_code == 409 and chat.json()["error"]["type"] == "needs_reingest", chat.text

        r = client.post(f"/v1/documents/{first['id']}/reingest")  # the user's word: the page's button, the CLI's
        assert r.status_code == 202, r.text
        again = wait_ready(client, first["id"], timeout=300)
        assert again["status"] == "ready" and again["needs_reingest"] is None
        assert len(again["segments"]) >= 2 and all(s["tokens"] <= 576 for s in again["segments"])  # in parts
        assert _ask(client, first["id"]).status_code == 200
        assert client.get(f"/v1/documents/{second['id']}").json()["needs_reingest"]  # not asked for: still marked

    with server(data, **SMALL, reingest_unfit=True) as client:  # on its own at start-up
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # the re-read is queued a moment after start-up
            doc = client.get(f"/v1/documents/{second['id']}").json()
            if doc["needs_reingest"] is None and doc["status"] == "ready":
                break
            time.sleep(0.2)
        assert doc["status"] == "ready" and doc["needs_reingest"] is None and len(doc["segments"]) >= 2
        assert _ask(client, second["id"]).status_code == 200

    with server(data, **LARGE) as client:  # the context grew back: the parts now fit whole (item 11)
        doc = client.get(f"/v1/documents/{first['id']}").json()
        assert doc["needs_reingest"] is None and len(doc["segments"]) >= 2
        budget = client.get("/health").json()["document_budget"]
        note = segment_lines(doc, budget)[0]
        assert "now fit in one piece" in note and f"docqa reingest {first['id']}" in note, note
        assert "more than the" not in note
