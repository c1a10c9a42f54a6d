"""The question routes' shared path (server/service/questions.py): the question is tokenized before it
queues, so one that cannot fit next to its document gets its 413 without the engine seeing it."""

from __future__ import annotations

from tests.conftest import upload

CRAZY = "pdf/pypdf-resources/crazyones.pdf"


def test_a_question_over_the_budget_is_refused_before_it_queues(server, cases, monkeypatch):
    with server(n_ctx=1024, answer_reserve=256) as client:
        doc = upload(client, cases / CRAZY)
        engine = client.app.state.services.engine
        submitted = []
        monkeypatch.setattr(engine, "submit_answer", lambda job: submitted.append(job) or 0)
        long = "Which of these words are in the document? " + "misfits rebels troublemakers " * 600
        r = client.post(f"/v1/documents/{doc['id']}/answers", json={"question": long})
        assert r.status_code == 413 and r.json()["error"]["type"] == "question_too_long", r.text
        assert "context of 1024 tokens" in r.json()["error"]["message"]
        history = [{"role": "user", "content": long[:4000]}, {"role": "assistant", "content": long[:4000]}]
        chat = client.post(
            "/v1/chat/completions",
            json={"model": f"doc:{doc['id']}", "messages": [*history, {"role": "user", "content": "And then?"}]},
        )
        assert chat.status_code == 413 and chat.json()["error"]["type"] == "question_too_long", chat.text
        assert submitted == [], "nothing reached the engine"
        monkeypatch.undo()
        ok = client.post(f"/v1/documents/{doc['id']}/answers", json={"question": "Who is it for?", "max_tokens": 8})
        assert ok.status_code == 200 and ok.json()["stats"]["prompt_tokens"] > 0
