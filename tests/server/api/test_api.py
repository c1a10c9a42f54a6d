"""The HTTP API end to end, on the real embedded model and real documents from ../shared/cases."""

from __future__ import annotations

import pytest

from server.api.schemas import MAX_QUESTION_CHARS
from testkit.harness import is_control
from tests.conftest import sse_events, upload

CRAZY = "pdf/pypdf-resources/crazyones.pdf"
QUOTE = "Quote the whole text of the document verbatim."


def ask(client, doc_id: str, question: str, **body) -> dict:
    r = client.post(f"/v1/documents/{doc_id}/answers", json={"question": question, **body})
    assert r.status_code == 200, r.text
    return r.json()


def test_ingest_a_pdf_and_stream_an_answer(client, cases):
    doc = upload(client, cases / CRAZY)
    assert doc["status"] == "ready" and doc["pages"] == 1 and doc["progress"] == 1.0
    with client.stream(
        "POST", f"/v1/documents/{doc['id']}/answers", json={"question": QUOTE, "stream": True, "max_tokens": 40}
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r)
    kinds = [k for k, _ in events]
    assert kinds[-3:] == ["citations", "stats", "done"] and kinds.count("token") >= 2
    text = "".join(d["text"] for k, d in events if k == "token")
    assert "misfits" in text
    stats = dict(events)["stats"]
    assert stats["completion_tokens"] == 40 and stats["finish_reason"] == "length"
    assert stats["accepted_tokens"] > 0 and stats["ttft_ms"] > 0
    assert stats["cached_tokens"] == doc["tokens"]
    # The quoted passage is cited: offsets into the document text, its page, and where it came from.
    document = client.get(f"/v1/documents/{doc['id']}/text").json()["text"]
    citations = dict(events)["citations"]["citations"]
    assert any("misfits" in c["text"] for c in citations), (text, citations)
    for c in citations:
        assert document[c["start"] : c["end"]] == c["text"] and c["page"] == c["page_end"] == 1
    assert any("lookup" in c["source"] for c in citations)  # the quote was copied by lookup drafts


def test_second_question_only_evaluates_the_question(client, cases):
    doc = upload(client, cases / CRAZY)
    first = ask(client, doc["id"], "Who are the crazy ones?", max_tokens=8)
    second = ask(client, doc["id"], "What do they change?", max_tokens=8)
    question_len = len("What do they change?".split()) + 6
    assert doc["tokens"] > 200
    for answer in (first, second):
        assert answer["stats"]["prompt_tokens"] <= question_len + 4  # the question, not the document


@pytest.mark.slow  # STATE-01 below restarts too; keeps `make test` under 30 minutes
def test_restart_answers_without_ingesting_again(server, cases, tmp_path):
    data = tmp_path / "persist"
    with server(data_dir=data) as client:
        doc = upload(client, cases / CRAZY)
        before = ask(client, doc["id"], QUOTE, max_tokens=24, draft_tokens=8)  # fixed window: see the next test
    with server(data_dir=data) as client:
        again = client.get(f"/v1/documents/{doc['id']}").json()
        assert again["status"] == "ready"  # no ingestion after the restart
        after = ask(client, doc["id"], QUOTE, max_tokens=24, draft_tokens=8)
    assert after["answer"] == before["answer"]
    assert after["stats"]["prompt_tokens"] == before["stats"]["prompt_tokens"] < 20


def test_two_documents_alternate_without_leaking(client, cases):
    a = upload(client, cases / CRAZY)
    b = upload(client, cases / "pdf/sample-files/001-trivial/minimal-document.pdf")
    # A fixed window: the adaptive one follows step times, so the calls' shapes (and, off the batch-invariant
    # mode, a near-tie's greedy choice) could differ between askings for no fault of the state (seen once).
    fixed = {"max_tokens": 16, "draft_tokens": 8}
    first_a = ask(client, a["id"], QUOTE, **fixed)["answer"]
    first_b = ask(client, b["id"], QUOTE, **fixed)["answer"]
    assert ask(client, a["id"], QUOTE, **fixed)["answer"] == first_a
    assert ask(client, b["id"], QUOTE, **fixed)["answer"] == first_b
    assert first_a != first_b


def test_same_bytes_return_the_existing_document(client, cases):
    doc = upload(client, cases / CRAZY)
    r = client.post("/v1/documents", files={"file": ("other-name.pdf", (cases / CRAZY).read_bytes())})
    assert r.status_code == 200 and r.json()["id"] == doc["id"]
    assert len(client.get("/v1/documents").json()["documents"]) == 1


def test_text_endpoint_returns_text_and_page_map(client, cases):
    doc = upload(client, cases / "pdf/sample-files/015-arabic/habibi-rotated.pdf")
    body = client.get(f"/v1/documents/{doc['id']}/text").json()
    assert [p["page"] for p in body["pages"]] == [1, 2, 3, 4]
    for p in body["pages"]:
        assert "habibi" in body["text"][p["start"] : p["end"]]


def test_delete_removes_the_document(client, cases):
    doc = upload(client, cases / CRAZY)
    assert client.delete(f"/v1/documents/{doc['id']}").status_code == 204
    assert client.get(f"/v1/documents/{doc['id']}").status_code == 404
    r = client.post(f"/v1/documents/{doc['id']}/answers", json={"question": "x"})
    assert r.status_code == 404 and r.json()["error"]["type"] == "document_not_found"


@pytest.mark.parametrize(
    ("path", "form", "status", "error_type", "words"),
    [
        (
            "pdf/sample-files/005-libreoffice-writer-password/libreoffice-writer-password.pdf",
            {},
            422,
            "password_required",
            "password",
        ),
        ("pdf/pypdf-resources/crazyones-encrypted-256.pdf", {"password": "nope"}, 422, "wrong_password", "wrong"),
        ("synthetic/png-renamed-to.pdf", {}, 415, "unsupported_type", "PNG"),
        ("synthetic/empty-0-bytes.pdf", {}, 422, "empty_document", "empty"),
        ("synthetic/truncated-half.pdf", {}, 422, "unreadable_pdf", "could not be read"),
        ("synthetic/flate-bomb-256MiB.pdf", {}, 422, "unreadable_pdf", "could not be read"),
        (
            "pdf/sample-files/007-imagemagick-images/imagemagick-CCITTFaxDecode.pdf",
            {},
            422,
            "no_text_layer",
            "no extractable text",
        ),
    ],
)
def test_bad_uploads_get_a_clear_4xx(client, cases, path, form, status, error_type, words):
    r = client.post("/v1/documents", files={"file": ("upload.pdf", (cases / path).read_bytes())}, data=form)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["type"] == error_type and words in err["message"]
    assert client.get("/health").json()["status"] == "ok"
    assert client.get("/v1/documents").json()["documents"] == []


def test_encrypted_pdf_opens_with_its_password(client, cases):
    doc = upload(client, cases / "pdf/pypdf-resources/crazyones-encrypted-256.pdf", password="password")
    assert doc["status"] == "ready"
    assert "misfits" in client.get(f"/v1/documents/{doc['id']}/text").json()["text"]


@pytest.mark.parametrize(
    "settings",
    [{"long_documents": "refuse"}, {"max_segments": 4}],  # refused, or more segments than allowed (~13)
)
def test_document_over_the_budget_is_refused_with_counts(server, cases, settings):
    with server(**settings) as client:
        r = client.post(
            "/v1/documents",
            files={"file": ("book.txt", (cases / "text/gutenberg/around-the-world-in-80-days-pg103.txt").read_bytes())},
        )
        assert r.status_code == 413
        message = r.json()["error"]["message"]
        assert "limit is 7168 tokens" in message and "document is" in message


def test_upload_over_the_size_limit_is_refused(server):
    with server(max_upload_bytes=1000) as client:
        r = client.post("/v1/documents", files={"file": ("big.txt", b"x" * 200_000)})
        assert r.status_code == 413 and r.json()["error"]["type"] == "upload_too_large"


def test_invalid_requests_get_422(client, cases):
    doc = upload(client, cases / CRAZY)
    for body in ({"question": ""}, {"question": "q", "draft_tokens": 17}, {"question": "q", "temperature": -1}):
        r = client.post(f"/v1/documents/{doc['id']}/answers", json=body)
        assert r.status_code == 422 and r.json()["error"]["type"] == "invalid_request"
    # An over-long question gets the same 422 on both question routes (the chat route used to cut it).
    long = "y" * (MAX_QUESTION_CHARS + 1)
    native = client.post(f"/v1/documents/{doc['id']}/answers", json={"question": long})
    chat = client.post(
        "/v1/chat/completions", json={"model": f"doc:{doc['id']}", "messages": [{"role": "user", "content": long}]}
    )
    for r in (native, chat):
        assert r.status_code == 422 and r.json()["error"]["type"] == "invalid_request", r.text
        assert "20000 characters" in r.json()["error"]["message"]


def test_head_on_every_get_route_and_allow_on_405(client, cases):
    """Uptime monitors send HEAD; RFC 9110 wants Allow on every 405."""
    doc = upload(client, cases / CRAZY)
    for path in ("/", "/health", "/metrics", "/v1/models", f"/v1/models/doc:{doc['id']}", "/v1/documents",
                 f"/v1/documents/{doc['id']}", f"/v1/documents/{doc['id']}/text", "/static/js/app.js"):  # fmt: skip
        get, head = client.get(path), client.head(path)
        assert head.status_code == get.status_code == 200, path
        assert head.content == b"" and head.headers["content-type"] == get.headers["content-type"], path
    r = client.put("/v1/documents")
    assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD, POST"
    assert client.delete("/health").headers["allow"] == "GET, HEAD"
    r = client.post(f"/v1/documents/{doc['id']}/answers", json={"question": "Who?", "seed": -1, "max_tokens": 2})
    assert r.status_code == 200  # -1: unseeded, as in llama-server and vLLM


def test_stop_strings_and_sampling_are_honoured(client, cases):
    doc = upload(client, cases / CRAZY)
    free = ask(client, doc["id"], QUOTE, max_tokens=60)["answer"]
    stop = free.split()[len(free.split()) // 2]  # a word of the greedy answer's middle, whatever it says
    out = ask(client, doc["id"], QUOTE, max_tokens=60, stop=[stop])
    assert stop not in out["answer"] and free.startswith(out["answer"].strip()) and len(out["answer"]) < len(free)
    assert out["stats"]["finish_reason"] == "stop"
    # Same seed, same answer, where the decode calls have the same shapes (docs/api.md): without drafts. With
    # them the adaptive window follows step times, and off the batch-invariant mode a logit's last bits (and so
    # a draw near a boundary) can differ: seen on CI's CPU (no AMX), never here.
    sampled = [
        ask(client, doc["id"], "Who are they?", max_tokens=12, temperature=0.9, seed=5, draft_tokens=0)["answer"]
        for _ in range(2)
    ]
    assert sampled[0] == sampled[1]


# 10 s on 2 cores, and implied by make test: tests/spec/test_lossless.py on F16, and
# tests/server/engine/test_batching.py's answers through the API equal to a plain greedy reference.
@pytest.mark.slow
def test_speculative_equals_plain_through_the_api_on_f16(server, cases, gemma_f16_path):
    with server(model_path=gemma_f16_path) as client:
        doc = upload(client, cases / CRAZY)
        plain = ask(client, doc["id"], QUOTE, max_tokens=48, draft_tokens=0)
        v16 = ask(client, doc["id"], QUOTE, max_tokens=48, verify16=True)
        auto = ask(client, doc["id"], QUOTE, max_tokens=48)
        assert plain["stats"]["drafted_tokens"] == 0
        assert v16["stats"]["accepted_tokens"] > 24 and v16["stats"]["verify_steps"] < 24
        assert v16["answer"] == plain["answer"] == auto["answer"]


def test_web_page_is_served(client):
    r = client.get("/")
    assert r.status_code == 200 and "<html" in r.text.lower()
    assert client.get("/static/js/app.js").status_code == 200


def test_chat_model_answers_through_its_template(server, cases, smollm_path):
    """SmolLM2 (llama architecture, chat template): the template is split around the document."""
    with server(model_path=smollm_path) as client:
        assert client.get("/health").json()["layout"] == "chat"
        doc = upload(client, cases / "synthetic/injection-chat-template-tokens.pdf")
        out = ask(client, doc["id"], "What is the replacement part number for valve V-12?", max_tokens=40)
        assert "KX-5521" in out["answer"]  # the document's fact, not its injected instructions
        assert not any(w in out["answer"].lower() for w in ("banana", "pwned"))
        assert "<|im_start|>" in client.get(f"/v1/documents/{doc['id']}/text").json()["text"]


def test_injected_template_text_stays_text(client, cases, gemma):
    doc = upload(client, cases / "synthetic/injection-chat-template-tokens.pdf")
    text = client.get(f"/v1/documents/{doc['id']}/text").json()["text"]
    assert "KX-5521" in text
    ids = gemma.tokenize(text, parse_special=False)
    assert not any(is_control(gemma, int(t)) for t in ids)
    out = ask(client, doc["id"], "What is the replacement part number for valve V-12?", max_tokens=24)
    assert "KX-5521" in out["answer"]
    assert not any(w in out["answer"].lower() for w in ("banana", "pwned"))


def test_state01_alternating_documents_and_a_restart_give_identical_answers(server, cases, tmp_path):
    """STATE-01: upload A, upload B, ask A, ask B, ask A again, restart, ask A."""
    data = tmp_path / "state01"
    q = {"question": QUOTE, "max_tokens": 24}
    with server(data_dir=data) as client:
        a = upload(client, cases / CRAZY)
        b = upload(client, cases / "pdf/sample-files/001-trivial/minimal-document.pdf")
        first_a = ask(client, a["id"], **q)["answer"]
        first_b = ask(client, b["id"], **q)["answer"]
        again_a = ask(client, a["id"], **q)["answer"]
    with server(data_dir=data) as client:
        restarted_a = ask(client, a["id"], **q)["answer"]
    assert first_a == again_a == restarted_a
    assert "Lorem" in first_b and "Lorem" not in first_a  # no cross-document leakage


def test_kvq01_quantized_v_without_flash_attention_is_refused_at_startup(server):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="quantized V cache.*flash attention"):
        with server(type_v="q8_0", flash_attn="off"):
            pass


@pytest.mark.slow  # one of the longest in make test (2 cores); its check stays in make test-slow
def test_kvq01_quantized_kv_with_a_document_filling_the_context(server, cases):
    with server(type_k="q8_0", type_v="q8_0", flash_attn="on", n_ctx=2048, answer_reserve=128) as client:
        text = (cases / "text/gutenberg/alice-in-wonderland-pg11.txt").read_text(encoding="utf-8-sig")[:7000]
        doc = upload(client, cases / CRAZY, name="alice.txt", data=text.encode())
        assert 1700 < doc["tokens"] <= 2048 - 128
        out = ask(client, doc["id"], "Who is Alice?", max_tokens=100, stop=[])
        assert out["stats"]["completion_tokens"] >= 1  # runs to the end of the context, no abort
