"""Drafts from earlier answers on a real server (server/engine/history.py, spec/history.py): a
question asked again drafts from its first answer; the history survives a restart, is off with
DOCQA_ANSWER_HISTORY=false and starts empty after a re-ingest; answers with its drafts equal plain
greedy decoding."""

from __future__ import annotations

import time

from testkit.live import Live
from tests.conftest import upload, wait_ready

CRAZY = "pdf/pypdf-resources/crazyones.pdf"
# An open question: the answer is the model's own text, not a quote lookup could draft from the document.
OPEN = {"question": "Write a short poem about the crazy ones.", "max_tokens": 40}


def _history_file(data, doc_id):
    return data / "documents" / doc_id / "history.npy"


def _ask(client, doc_id: str, **extra) -> dict:
    r = client.post(f"/v1/documents/{doc_id}/answers", json={**OPEN, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def _flushed(client) -> None:
    client.app.state.services.engine.histories.flush()  # the history is written off the engine thread


def test_a_question_asked_again_is_drafted_from_its_first_answer_and_survives_a_restart(
    server, cases, tmp_path, gemma_f16_path
):
    """On the F16 copy of the embedded model: on the shipped Q4_K_M a verify call's logits depend on its
    row count (../shared/notes/llama-cpp.md section 14), so the second asking, verified in other
    shapes, may leave the first answer at its first token (seen: "The crazy ones ..." then "I am a
    crazy one." on a loaded machine) and draft nothing from it; F16's rows agree across shapes."""
    data = tmp_path / "data"
    with server(data_dir=data, answer_history=True, model_path=gemma_f16_path) as client:
        doc = upload(client, cases / CRAZY)
        first = _ask(client, doc["id"], draft_tokens=8)
        assert first["stats"]["accepted_by_source"]["history"] == 0, "nothing to draft from yet"
        _flushed(client)
        assert _history_file(data, doc["id"]).is_file()
        again = _ask(client, doc["id"], draft_tokens=8)
        _copied_from_history(again)
    # a restart: the history is read from the document's directory
    with server(data_dir=data, answer_history=True, model_path=gemma_f16_path) as client:
        _copied_from_history(_ask(client, doc["id"], draft_tokens=8))


def _copied_from_history(answer: dict) -> None:
    """The answer was drafted from its earlier asking: history drafts were accepted, and nearly every
    token came from a draft (history's, or lookup's where the answer repeats itself)."""
    stats = answer["stats"]
    assert stats["accepted_by_source"]["history"] >= 8, stats
    assert stats["accepted_tokens"] >= 0.6 * stats["completion_tokens"], stats


def test_no_history_when_it_is_turned_off(server, cases, tmp_path):
    data = tmp_path / "data"
    with server(data_dir=data, answer_history=False) as client:
        doc = upload(client, cases / CRAZY)
        _ask(client, doc["id"], draft_tokens=8)
        again = _ask(client, doc["id"], draft_tokens=8)
        _flushed(client)
        assert again["stats"]["drafted_by_source"]["history"] == 0
        assert not _history_file(data, doc["id"]).exists()
        assert {d["name"]: d["active"] for d in client.get("/health").json()["drafters"]}["history"] is False


def test_a_reingest_starts_the_history_empty(server, cases, tmp_path):
    data = tmp_path / "data"
    with server(data_dir=data, answer_history=True) as client:
        doc = upload(client, cases / CRAZY)
        _ask(client, doc["id"])
        _flushed(client)
        assert _history_file(data, doc["id"]).is_file()
        assert client.post(f"/v1/documents/{doc['id']}/reingest").status_code == 202
        assert not _history_file(data, doc["id"]).exists()
        wait_ready(client, doc["id"])
        again = _ask(client, doc["id"], draft_tokens=8)
        assert again["stats"]["drafted_by_source"]["history"] == 0


def test_a_conversations_earlier_answer_is_history_for_its_next_turn(server, cases):
    with server(answer_history=True) as client:
        doc = upload(client, cases / CRAZY)
        first = _ask(client, doc["id"])
        _flushed(client)
        messages = [
            {"role": "user", "content": OPEN["question"]},
            {"role": "assistant", "content": first["answer"]},
            {"role": "user", "content": "Write it again, word for word."},
        ]
        r = client.post(
            "/v1/chat/completions",
            json={"model": f"doc:{doc['id']}", "messages": messages, "max_tokens": 40, "draft_tokens": 8},
        )
        assert r.status_code == 200, r.text
        assert r.json()["docqa"]["drafted_by_source"]["history"] > 0


def test_answers_with_history_drafts_equal_plain_greedy_when_batch_invariant(tmp_path, gemma_path, cases):
    """Lossless: every emitted token is the target's own choice. Under DOCQA_BATCH_INVARIANT a row's
    logits do not depend on its call's row count, so the second asking, drafted from the first answer,
    equals plain greedy decoding token for token (a server process of its own: ggml reads the kernel
    switch once per process)."""
    server = Live(
        tmp_path / "data", gemma_path, DOCQA_BATCH_INVARIANT="true", DOCQA_SELFTEST="false", DOCQA_ANSWER_HISTORY="true"
    ).start()
    try:
        doc = server.ingest("crazyones.pdf", (cases / CRAZY).read_bytes())
        url = f"/v1/documents/{doc}/answers"
        for question in ("Write a short poem about the crazy ones.", "Who sees genius in them?"):
            body = {"question": question, "max_tokens": 32}
            status, plain = server.post_json(url, {**body, "draft_tokens": 0})
            assert status == 200, plain
            time.sleep(0.5)  # the first answer reaches the history (written off the engine thread)
            status, again = server.post_json(url, {**body, "draft_tokens": 8})
            assert status == 200, again
            assert again["answer"] == plain["answer"], question
            assert again["stats"]["accepted_by_source"]["history"] > 0, again["stats"]
    finally:
        server.stop()
