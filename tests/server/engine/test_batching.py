"""Continuous batching: concurrent questions share each decode call and the document prefix.

Exactness is asserted on the F16 copy of the embedded model, up to the first near-tie of a plain
one-row-at-a-time greedy decode (notes §14): with the default settings batching changes how many rows
each call has, which on Q4_K_M legitimately changes logits. Under DOCQA_BATCH_INVARIANT it does not;
what is left there is where each sequence's cells lie in the shared KV cache.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from runtime.llama import Model
from testkit.harness import Prompt, first_divergence, open_ctx, plain_greedy
from tests.conftest import batch_steps, metric, upload

CRAZY = "pdf/pypdf-resources/crazyones.pdf"
QUESTIONS = [
    "Quote the whole text of the document verbatim.",
    "Who are the crazy ones?",
    "What do the crazy ones change?",
    "What can you not do about them?",
    "What is the title of the text?",
    "What do they invent?",
    "What do they push forward?",
    "Quote the last sentence.",
]
MAX_TOKENS = 24
NEAR_TIE = 0.5  # top-2 logit margin; about 4x the F16 row-count noise (notes §14)


def _ask_all(client, doc_id: str, questions: list[str], concurrent: bool) -> dict[str, dict]:
    def ask(q: str) -> dict:
        if concurrent:
            start.wait(30)
        r = client.post(f"/v1/documents/{doc_id}/answers", json={"question": q, "max_tokens": MAX_TOKENS})
        assert r.status_code == 200, r.text
        return r.json()

    if not concurrent:
        return {q: ask(q) for q in questions}
    start = threading.Barrier(len(questions))
    with ThreadPoolExecutor(len(questions)) as pool:
        return dict(zip(questions, pool.map(ask, questions), strict=True))


def test_eight_concurrent_greedy_answers_equal_alone_on_f16(server, cases, gemma_f16_path):
    with server(model_path=gemma_f16_path, n_seq_max=8) as client:
        doc = upload(client, cases / CRAZY)
        engine = client.app.state.services.engine
        alone = _ask_all(client, doc["id"], QUESTIONS, concurrent=False)
        before = batch_steps(client)
        assert before[1] == before[float("inf")] > 0  # one question per step
        together = _ask_all(client, doc["id"], QUESTIONS, concurrent=True)
        after = batch_steps(client)
        assert after[6] - before[6] < after[8] - before[8], after  # steps really carried all eight sequences
        assert after[8] == after[float("inf")]
        prefix = engine.store.read_prefix(doc["id"])
        layout = engine.layout

    # Reference: plain greedy decoding, one row per call, with the top-2 margin at every position.
    model = Model(gemma_f16_path)
    ctx = open_ctx(model)
    agreed, total = 0, 0
    try:
        for q in QUESTIONS:
            suffix = layout.question_suffix(model, q)
            tokens, margins = plain_greedy(ctx, Prompt(ctx, prefix, suffix), MAX_TOKENS)
            tie = next((i for i, m in enumerate(margins) if m < NEAR_TIE), len(tokens))
            reference = model.detokenize(tokens[:tie]).lstrip()  # answers start at their first visible character
            one, batched = alone[q]["answer"], together[q]["answer"]
            for text in (one, batched):  # exact up to the first near-tie
                n = min(len(reference), len(text))
                assert text[:n] == reference[:n], (q, tie, text, reference)
            assert together[q]["stats"]["cached_tokens"] == len(prefix)
            agreed += first_divergence(list(one), list(batched))
            total += max(len(one), len(batched))
            print(f"{q!r}: first near-tie at token {tie}; alone == batched: {one == batched}")
    finally:
        ctx.close()
        model.close()
    # Past the near-ties the answers are not guaranteed equal, but on F16 they nearly always are: a
    # crossed wire between sequences would show up here as early disagreement.
    assert agreed >= total // 2, (agreed, total)


def test_questions_about_another_document_wait_for_the_batch(server, cases):
    """FIFO across documents: a question about B after questions about A is answered correctly once
    A's batch drains, and A's later questions do not overtake it."""
    with server(n_seq_max=4) as client:
        a = upload(client, cases / CRAZY)
        b = upload(client, cases / "pdf/sample-files/001-trivial/minimal-document.pdf")
        jobs = [(a["id"], "Who are the crazy ones?"), (b["id"], "Quote the first sentence."), (a["id"], "What?")]
        with ThreadPoolExecutor(3) as pool:
            results = list(
                pool.map(
                    lambda j: client.post(
                        f"/v1/documents/{j[0]}/answers", json={"question": j[1], "max_tokens": 16}
                    ).json(),
                    jobs,
                )
            )
        assert all(r["stats"]["completion_tokens"] >= 1 for r in results), results
        assert results[1]["stats"]["cached_tokens"] == b["tokens"]
        assert results[0]["stats"]["cached_tokens"] == results[2]["stats"]["cached_tokens"] == a["tokens"]
        alone = client.post(
            f"/v1/documents/{b['id']}/answers", json={"question": "Quote the first sentence.", "max_tokens": 16}
        ).json()
        assert alone["answer"] == results[1]["answer"]  # answered alone in both cases: same numerics


def test_hybrid_mtp_model_batches_with_shared_recurrent_prefix(server, tiny_qwen35_path):
    """The tiny qwen35 (attention + gated delta net, MTP head, f32): four concurrent questions share
    the document's KV cells and its recurrent state copy-on-write (notes §6, hybrid caveat), each
    with its own MTP drafter (drafting and catching up in shared MTP decodes), and each answer
    equals the same question answered alone."""
    doc_text = b"the cat sat on the mat and the dog ran in the sun. " * 12
    bodies = [
        {"question": "what did the cat do", "verify16": True},
        {"question": "what did the dog do", "draft_source": "mtp", "draft_tokens": 3},
        {"question": "where is the sun"},
        {"question": "the mat", "draft_tokens": 0},
    ]
    with server(model_path=tiny_qwen35_path, n_threads=1, n_ctx=4096, n_seq_max=4) as client:
        doc = upload(client, tiny_qwen35_path, name="doc.txt", data=doc_text)

        def ask(body: dict) -> dict:
            r = client.post(f"/v1/documents/{doc['id']}/answers", json={"max_tokens": 32, **body})
            assert r.status_code == 200, r.text
            return r.json()

        alone = [ask(b) for b in bodies]
        before = batch_steps(client)
        assert metric(client, "docqa_model_batched_decodes_total") == 0
        with ThreadPoolExecutor(len(bodies)) as pool:
            together = list(pool.map(ask, bodies))
        after = batch_steps(client)
        assert after[2] - before[2] < after[float("inf")] - before[float("inf")], after  # steps with >= 3
        assert metric(client, "docqa_model_batched_decodes_total") > 0  # drafts and catch-up shared MTP decodes
    for one, batched, body in zip(alone, together, bodies, strict=True):
        assert batched["answer"] == one["answer"], body
        assert batched["stats"]["completion_tokens"] == one["stats"]["completion_tokens"]
    assert together[1]["stats"]["accepted_by_source"]["mtp"] > 0  # MTP drafts were accepted in the batch


# Each case prefills ~3k tokens (13 s on 2 cores); one sequence, the tightest, stays in make test.
@pytest.mark.parametrize("n_seq_max", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_sliding_window_model_answers_right_after_ingesting_a_long_document(server, cases, tmp_path, n_seq_max):
    """Gemma 3's sliding-window cache holds every cell a long prefill cycled through; sharing those
    into a question's sequence used to fill the window cache ("context is full") with few sequences."""
    text = (cases / "text/gutenberg/alice-in-wonderland-pg11.txt").read_text(encoding="utf-8-sig")[:12_000]
    with server(n_seq_max=n_seq_max, data_dir=tmp_path / f"seq{n_seq_max}") as client:
        doc = upload(client, cases / CRAZY, name="alice.txt", data=text.encode())
        assert doc["tokens"] > 4 * 512  # several times the 512-token window
        with ThreadPoolExecutor(n_seq_max) as pool:
            replies = list(
                pool.map(
                    lambda q, url=f"/v1/documents/{doc['id']}/answers": client.post(
                        url, json={"question": q, "max_tokens": 24}
                    ),
                    ["Who is Alice?", "What did the Rabbit say?"][:n_seq_max],
                )
            )
        for r in replies:
            assert r.status_code == 200, r.text
            assert r.json()["stats"]["completion_tokens"] >= 1
