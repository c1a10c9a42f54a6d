"""Asking while a document is read (issue 52), through the API on a real chat model (SmolLM2-135M):
a question during the first reading is answered from the part read so far and says how far that is
(``partial``, first in the stream), nothing beyond it is cited, and once the reading ends the same
question is answered from the whole. The reading is slowed by a pause between its chunks (the small
model reads a page in well under a second on 2 cores), which changes no token."""

from __future__ import annotations

import time

import pytest

from server.engine.ingestion import Ingestion
from tests.conftest import sse_events, wait_ready

PARAS = [
    f"Section {i}. The harbour office on quay {i} opens at {7 + i % 3}:00 and keeps the ferry timetable."
    for i in range(1, 61)
]
TEXT = "First fact: the first ferry to Morrow leaves Pier 2 at 07:40.\n\n" + "\n\n".join(PARAS)
QUESTION = "When does the first ferry to Morrow leave?"


@pytest.fixture
def slow_reading(monkeypatch):
    """The reading paused ``pause["s"]`` seconds before each chunk; a test sets it to 0 once its
    questions are asked, so the rest of the reading goes at full speed."""
    step, pause = Ingestion.step, {"s": 0.15}

    def slow(self, n_max):
        time.sleep(pause["s"])
        return step(self, n_max)

    monkeypatch.setattr(Ingestion, "step", slow)
    return pause


def _reading(client, share: float, text: str = TEXT) -> str:
    r = client.post("/v1/documents", files={"file": ("guide.txt", text.encode())})
    assert r.status_code == 202, r.text
    doc_id = r.json()["id"]
    deadline = time.monotonic() + 60
    while (doc := client.get(f"/v1/documents/{doc_id}").json())["progress"] < share:
        assert doc["status"] == "ingesting" and time.monotonic() < deadline, doc
        time.sleep(0.05)
    return doc_id


def test_a_question_while_reading_is_answered_from_the_part_read_and_says_so(server, smollm_path, slow_reading):
    settings = dict(model_path=smollm_path, quote_support=0.0, n_ubatch=32, n_batch=32, prefill_alone_s=0.01)
    with server(**settings) as client:
        doc_id = _reading(client, 0.2)
        body = {"question": QUESTION, "mode": "quote", "max_tokens": 24}
        chat = {"model": doc_id, "messages": [{"role": "user", "content": QUESTION}], "max_tokens": 24}
        r = client.post("/v1/chat/completions", json=chat)
        assert r.status_code == 200, r.text
        content = r.json()["choices"][0]["message"]["content"]
        assert r.json()["partial"]["share"] > 0 and content.startswith("_Read so far: "), content
        with client.stream("POST", f"/v1/documents/{doc_id}/answers", json=body | {"stream": True}) as r:
            assert r.status_code == 200, r.read()
            events = sse_events(r)
        kinds = [k for k, _ in events]
        assert kinds[:2] == ["queued", "partial"], kinds
        partial = dict(events)["partial"]
        assert 0 < partial["share"] < 1 and partial["pages"] == {"first": 1, "last": 1}
        read = partial["read_through"]["char"]
        assert 0 < read < len(TEXT) and partial["read_through"]["page"] == 1
        assert dict(events)["stats"]["document_state"] == "reading"
        cited = dict(events)["citations"]
        for c in cited["citations"] + [p for p in [cited["quote"] and cited["quote"]["passage"]] if p]:
            assert c["start"] < read, "nothing beyond the part read is cited"

        slow_reading["s"] = 0
        wait_ready(client, doc_id)
        whole = client.post(f"/v1/documents/{doc_id}/answers", json=body).json()
        assert whole["partial"] is None and whole["stats"]["document_state"] != "reading"


def test_asking_while_reading_off_keeps_the_409(server, smollm_path, slow_reading):
    with server(model_path=smollm_path, ask_while_reading=False, n_ubatch=32, n_batch=32) as client:
        doc_id = _reading(client, 0.1)
        r = client.post(f"/v1/documents/{doc_id}/answers", json={"question": QUESTION})
        assert r.status_code == 409 and r.json()["error"]["type"] == "document_ingesting", r.text


def test_a_document_read_in_segments_is_answered_from_the_segments_read(server, smollm_path, slow_reading):
    # Read in segments, a question asked during the second waits for it to end and goes before the
    # third (server/engine/scheduler.py: between two segments, the questions first). A small context
    # makes small segments (about 750 tokens), so two are read in seconds.
    long_text = TEXT + "\n\n" + "\n\n".join(p.replace("Section", "Annex") for p in PARAS * 2)
    settings = dict(model_path=smollm_path, n_ctx=1024, answer_reserve=256, n_ubatch=64, n_batch=64)
    with server(**settings) as client:
        r = client.post("/v1/documents", files={"file": ("long.txt", long_text.encode())})
        assert r.status_code == 202, r.text
        doc_id = r.json()["id"]
        doc = client.get(f"/v1/documents/{doc_id}").json()
        segments = doc["segments"]
        assert len(segments) >= 3, doc
        first = segments[0]["tokens"] / sum(s["tokens"] for s in segments)
        deadline = time.monotonic() + 120
        while (doc := client.get(f"/v1/documents/{doc_id}").json())["progress"] < first + 0.02:
            assert doc["status"] == "ingesting" and time.monotonic() < deadline, doc
            time.sleep(0.05)
        # The second segment need not be slow: the question waits for its end in any case, and the third
        # (a dozen chunks at this pause) is still being read when the answer is in.
        slow_reading["s"] = 0.03
        body = {"question": "What does the harbour office on quay 59 keep?", "max_tokens": 16, "stream": True}
        with client.stream("POST", f"/v1/documents/{doc_id}/answers", json=body) as r:
            assert r.status_code == 200, r.read()
            events = sse_events(r)
        kinds = [k for k, _ in events]
        assert kinds[:2] == ["queued", "partial"], kinds
        partial = dict(events)["partial"]
        assert 0 < partial["share"] < 1 and partial["read_through"]["char"] >= segments[0]["end"]
        used = [s["index"] for s in dict(events)["stats"]["segments"]]
        read = partial["read_through"]["char"]
        assert used and all(segments[i]["end"] <= read for i in used), "only the segments read answer"
        doc = client.get(f"/v1/documents/{doc_id}").json()
        assert doc["status"] == "ingesting", "answered between two segments, before the rest is read"
        r = client.delete(f"/v1/documents/{doc_id}")
        assert r.status_code == 204, r.text  # its reading stops, and nothing of it is left
        assert client.get(f"/v1/documents/{doc_id}").status_code == 404


def test_with_a_reader_of_plain_weights_the_same_questions_are_answered(server, smollm_path, slow_reading):
    # DOCQA_CPU_REPACK=pair (server/engine/layout.py): a second instance reads, the first answers; a
    # question while reading gets a copy of the part read, and the finished reading moves across.
    settings = dict(model_path=smollm_path, cpu_repack="pair", n_ubatch=32, n_batch=32, prefill_alone_s=0.01)
    with server(**settings) as client:
        assert "second instance" in client.get("/health").json()["reader"]
        doc_id = _reading(client, 0.2, TEXT[: len(TEXT) // 3])
        body = {"question": QUESTION, "mode": "direct", "max_tokens": 12}
        during = client.post(f"/v1/documents/{doc_id}/answers", json=body).json()
        assert 0 < during["partial"]["share"] < 1 and during["stats"]["document_state"] == "reading", during
        slow_reading["s"] = 0
        wait_ready(client, doc_id)
        after = client.post(f"/v1/documents/{doc_id}/answers", json=body).json()
        assert after["partial"] is None and after["answer"] and after["stats"]["cached_tokens"] > 0, after
