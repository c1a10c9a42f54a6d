"""A separate draft model (server/engine/draft_model.py, spec/draft_model.py) on real models: the
embedded Gemma drafting for itself (the same vocabulary, so its drafts are mostly accepted: the
plumbing is what is tested), a draft model of another vocabulary refused at start-up, and a
document ingested before the draft model was set answered without it."""

from __future__ import annotations

import pytest

from tests.conftest import upload

CRAZY = "pdf/pypdf-resources/crazyones.pdf"
OPEN = {"question": "Write a short note about the crazy ones.", "max_tokens": 32, "draft_source": "draft"}


def test_the_draft_model_drafts_and_its_drafts_are_accepted(server, cases, gemma_path):
    with server(draft_model_path=gemma_path, draft_model_tokens=4) as client:
        health = client.get("/health").json()
        assert {d["name"]: d["active"] for d in health["drafters"]}["draft"] is True
        doc = upload(client, cases / CRAZY)
        plain = client.post(f"/v1/documents/{doc['id']}/answers", json={**OPEN, "draft_tokens": 0}).json()
        fixed = client.post(f"/v1/documents/{doc['id']}/answers", json={**OPEN, "draft_tokens": 4}).json()
        stats = fixed["stats"]
        assert stats["drafted_by_source"]["draft"] > 0, stats
        # A model drafting for itself: nearly everything is accepted (rows of another call count differ a little).
        assert stats["accepted_by_source"]["draft"] >= 0.7 * stats["drafted_by_source"]["draft"], stats
        assert plain["answer"] and fixed["answer"]  # equal text needs batch-invariant numerics: the next test
        for s in (plain["stats"], fixed["stats"]):
            assert set(s["drafted_by_source"]) >= {"lookup", "history", "mtp", "draft"}
        adaptive = client.post(f"/v1/documents/{doc['id']}/answers", json={**OPEN, "draft_source": "all"}).json()
        assert adaptive["answer"] and adaptive["stats"]["completion_tokens"] == 32


@pytest.mark.slow  # ~18 s on 2 cores: make test ran 20:34; the next test checks the draft model drafts and is accepted
def test_answers_with_the_draft_model_equal_plain_greedy_when_batch_invariant(tmp_path, gemma_path, cases):
    """Lossless: every emitted token is the target's own choice. Under DOCQA_BATCH_INVARIANT a row's
    logits do not depend on its call's row count, so the answers with the draft model's drafts equal
    plain greedy decoding token for token (a server process of its own: ggml reads the kernel switch
    once per process)."""
    from testkit.live import Live

    server = Live(
        tmp_path / "data", gemma_path, DOCQA_BATCH_INVARIANT="true", DOCQA_DRAFT_MODEL_PATH=str(gemma_path),
        DOCQA_SELFTEST="false",
    ).start()  # fmt: skip
    try:
        doc = server.ingest("crazyones.pdf", (cases / CRAZY).read_bytes())
        questions = ["Who are the crazy ones?", "What do they change?", "Quote the title.", "What can you not do?"]
        drafted = 0
        for q in questions:
            body = {"question": q, "max_tokens": 24, "draft_source": "draft"}
            s1, plain = server.post_json(f"/v1/documents/{doc}/answers", {**body, "draft_tokens": 0})
            s2, spec = server.post_json(f"/v1/documents/{doc}/answers", {**body, "draft_tokens": 4})
            assert s1 == s2 == 200, (plain, spec)
            assert spec["answer"] == plain["answer"], q
            drafted += spec["stats"]["accepted_by_source"]["draft"]
        assert drafted > 0
    finally:
        server.stop()


def test_a_draft_model_of_another_vocabulary_is_refused_at_start(tmp_path, gemma_path, smollm_path):
    from server.config.settings import Settings
    from server.engine.loading import LoadError, load

    settings = Settings(data_dir=tmp_path, model_path=gemma_path, draft_model_path=smollm_path, n_ctx=2048, n_threads=2)
    try:
        load(settings, 0)
    except LoadError as exc:
        message = str(exc)
    else:
        raise AssertionError("a SmolLM2 draft for Gemma was accepted")
    assert "cannot draft for" in message and "must share the target's vocabulary" in message
    assert "tokens" in message or "token 0 differs" in message or "types differ" in message, message


# An upgrade's edge (9 s on 2 cores): in make test-slow, beside the other draft-model edges.
@pytest.mark.slow
def test_a_document_ingested_before_the_draft_model_is_answered_without_it(server, cases, gemma_path, tmp_path):
    data = tmp_path / "shared"
    with server(data_dir=data) as client:
        doc = upload(client, cases / CRAZY)
    with server(data_dir=data, draft_model_path=gemma_path) as client:
        r = client.post(f"/v1/documents/{doc['id']}/answers", json={**OPEN, "draft_tokens": 4})
        assert r.status_code == 200 and r.json()["answer"]
        assert r.json()["stats"]["drafted_by_source"]["draft"] == 0
        off = {d["name"]: d for d in client.get("/health").json()["drafters"]}
        assert off["mtp"]["active"] is False and "no MTP layers" in off["mtp"]["why_not"]


QUESTIONS = [
    "Who are the crazy ones?", "What do they push forward?", "Quote the title.", "What can you not do about them?",
    "What do they invent?", "Who sees genius?", "What do they change?", "Why do some see them as crazy?",
    "Quote the last sentence.", "What do they have no respect for?",
]  # fmt: skip


@pytest.mark.slow
def test_the_qwen_draft_model_keeps_the_1_5b_targets_greedy_answers(tmp_path, reader_model, cases):
    """Issue 28's pair: Qwen2.5-Coder-0.5B-Instruct drafting for Qwen2.5-Coder-1.5B-Instruct (one
    vocabulary). Under DOCQA_BATCH_INVARIANT the target's greedy answers on 10 prompts equal its plain
    answers, token for token, with the draft model's drafts verified."""
    from testkit.live import Live

    server = Live(
        tmp_path / "data", reader_model("qwen-coder-1.5b"), DOCQA_DRAFT_MODEL_PATH=str(reader_model("qwen-coder-0.5b")),
        DOCQA_BATCH_INVARIANT="true", DOCQA_SELFTEST="false", DOCQA_N_CTX="4096",
    ).start(timeout=900)  # fmt: skip
    try:
        doc = server.ingest("crazyones.pdf", (cases / CRAZY).read_bytes())
        accepted = 0
        for q in QUESTIONS:
            body = {"question": q, "max_tokens": 24, "draft_source": "draft"}
            s1, plain = server.post_json(f"/v1/documents/{doc}/answers", {**body, "draft_tokens": 0})
            s2, spec = server.post_json(f"/v1/documents/{doc}/answers", {**body, "draft_tokens": 4})
            assert s1 == s2 == 200, (plain, spec)
            assert spec["answer"] == plain["answer"], q
            accepted += spec["stats"]["accepted_by_source"]["draft"]
        assert accepted > 0
    finally:
        server.stop()


@pytest.mark.slow
def test_gemma_as_a_draft_for_qwen_is_refused_naming_the_first_difference(tmp_path, reader_model, gemma_path):
    from server.config.settings import Settings
    from server.engine.loading import LoadError, load

    settings = Settings(
        data_dir=tmp_path, model_path=reader_model("qwen-coder-1.5b"), draft_model_path=gemma_path, n_ctx=2048
    )
    with pytest.raises(LoadError, match="cannot draft for .* must share the target's vocabulary"):
        load(settings, 0)
