"""A failed rollback on the server path: the runner rebuilds the sequence from the shared prefix and
checks where it ends (issue 12). On the tiny hybrid qwen35 (f32, so answers must be identical)."""

from __future__ import annotations

from spec.loop import Answer
from tests.conftest import metric, upload

DOC = b"the cat sat on the mat and the dog ran in the sun. " * 12
# Sampled (seeded), because greedy answers of the tiny model end after 4 tokens with every draft
# accepted; the same seed gives the same tokens, rollback or rebuild (one uniform draw per token).
BODY = {"question": "what did the cat do", "max_tokens": 40, "verify16": True, "temperature": 1.5, "seed": 3}


def _refuse_first_rollback(ctx) -> list[int]:
    """Make the context's next partial ``seq_rm`` of a question's sequence refuse (as a recurrent state
    does past ``n_rs_seq``) and leave the cells in place. Returns the list the refusals are logged to."""
    refused: list[int] = []
    real = ctx.seq_rm

    def seq_rm(seq_id: int, p0: int, p1: int = -1) -> bool:
        if seq_id > 0 and p0 > 0 and not refused:
            refused.append(seq_id)
            return False
        return real(seq_id, p0, p1)

    ctx.seq_rm = seq_rm
    return refused


def test_a_refused_rollback_is_rebuilt_and_the_answer_is_unchanged(server, tiny_qwen35_path):
    with server(model_path=tiny_qwen35_path, n_threads=1, n_ctx=4096) as client:
        doc = upload(client, tiny_qwen35_path, name="doc.txt", data=DOC)
        url = f"/v1/documents/{doc['id']}/answers"
        clean = client.post(url, json=BODY).json()
        assert clean["stats"]["accepted_tokens"] < clean["stats"]["drafted_tokens"]  # some drafts rejected
        refused = _refuse_first_rollback(client.app.state.services.engine.loaded.ctx)
        rebuilt = client.post(url, json=BODY).json()
    assert refused, "no rollback was attempted"
    assert metric(client, "docqa_rollback_rebuilds_total") == 1
    assert rebuilt["answer"] == clean["answer"]
    assert rebuilt["stats"]["prompt_tokens"] > clean["stats"]["prompt_tokens"]  # the replay was prefilled


def test_a_rebuild_that_ends_elsewhere_fails_the_answer_not_the_server(server, tiny_qwen35_path, monkeypatch):
    """Negative control: a rebuild that leaves the sequence one token short is caught by the position
    check, and the answer ends with an error instead of decoding on from the wrong state."""
    with server(model_path=tiny_qwen35_path, n_threads=1, n_ctx=4096) as client:
        doc = upload(client, tiny_qwen35_path, name="doc.txt", data=DOC)
        url = f"/v1/documents/{doc['id']}/answers"
        engine = client.app.state.services.engine
        refused = _refuse_first_rollback(engine.loaded.ctx)
        with monkeypatch.context() as patch:  # the replay is one token short
            patch.setattr(Answer, "replay_ids", lambda self: self.output_ids[:-2])
            r = client.post(url, json=BODY)
        assert refused
        assert r.status_code == 500 and r.json()["error"]["type"] == "engine_error"
        assert metric(client, "docqa_rollback_rebuilds_total") == 0
        assert client.post(url, json=BODY).status_code == 200  # the next question is served as usual
        assert client.app.state.services.engine.active_answers == 0
