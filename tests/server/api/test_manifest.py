"""Every file case in ../shared/cases/manifest.json, through the HTTP API of one running server.

Cases about server behaviour (HTTP-*, STATE-01, KVQ-01, SPEC-01) have their own tests in
test_live.py, test_api.py and tests/spec/test_lossless.py; this module checks each case's stated
expectation about extraction, errors and answers.
"""

from __future__ import annotations

import json
import re
import unicodedata

import pytest

from testkit.harness import is_control
from testkit.live import LOCAL
from tests.conftest import CASES, make_settings, sse_events, wait_ready

FILE_EXPECTATIONS = {
    "text_contains",
    "text_contains_all",
    "text_contains_all_pages",
    "text_equals",
    "text_starts_with",
    "text_contains_after_NFKC",
    "text_contains_after_dehyphenation",
    "same_text_as",
    "text_with_password",
    "text_without_password",
    "clear_error",
    "clear_error_or_empty",
    "clear_error_or_flag",
    "answer",
    "answer_or_clear_error",
}
PASSWORDS = {"ENC-03": "asdfzxcv"}


def _file_cases() -> list[str]:
    path = CASES / "manifest.json"
    if not path.is_file():
        return ["(no ../shared/cases)"]
    cases = json.loads(path.read_text())
    return [c["id"] for c in cases if c["expect"] in FILE_EXPECTATIONS and (CASES / c["path"]).is_file()]


@pytest.fixture(scope="module")
def client(tmp_path_factory, gemma_path):
    from fastapi.testclient import TestClient

    from server.api.app import create_app

    settings = make_settings(
        tmp_path_factory.mktemp("manifest"), gemma_path, n_ctx=32768, long_documents="refuse"
    )  # the long cases' 413 is what this checks; segmenting them is tests/server/api/test_segments.py
    with TestClient(create_app(settings), base_url=LOCAL) as c:
        yield c


def _upload(client, case, **form):
    data = (CASES / case["path"]).read_bytes()
    return client.post("/v1/documents", files={"file": (case["path"].rsplit("/", 1)[-1], data)}, data=form)


def _text(client, response) -> tuple[dict, str]:
    assert response.status_code in (200, 202), response.text
    doc = wait_ready(client, response.json()["id"], timeout=600)
    assert doc["status"] == "ready", doc
    return doc, client.get(f"/v1/documents/{doc['id']}/text").json()["text"]


def _extract_direct(path: str) -> str:
    from ingest.extract import extract

    return extract((CASES / path).read_bytes()).text


@pytest.mark.parametrize("case_id", _file_cases())
def test_manifest_case(client, manifest, case_id):
    case = manifest[case_id]
    expect, value = case["expect"], case.get("value")
    healthy_before = client.get("/v1/documents").json()["documents"]
    if expect in ("clear_error", "clear_error_or_flag", "clear_error_or_empty", "answer_or_clear_error"):
        r = _upload(client, case)
        if r.status_code >= 400:
            assert 400 <= r.status_code < 500, r.text
            err = r.json()["error"]
            assert err["type"] and len(err["message"]) > 20
            if expect == "clear_error_or_flag":
                assert value in err["message"]
            # The server stays up and the other documents are untouched.
            assert client.get("/health").json()["status"] == "ok"
            assert client.get("/v1/documents").json()["documents"] == healthy_before
            print(f"{case_id}: {r.status_code} {err['type']}: {err['message'][:100]}")
            return
        assert expect != "clear_error", f"{case_id} should have been refused, got {r.status_code}"
        doc, text = _text(client, r)
        if expect == "answer_or_clear_error":
            assert "MARIGOLD" in text
        return
    if expect == "text_with_password":
        assert _upload(client, case).json()["error"]["type"] == "password_required"
        _, text = _text(client, _upload(client, case, password=PASSWORDS[case_id]))
        assert value in text
        return
    r = _upload(client, case)
    if r.status_code == 413 and r.json()["error"]["type"] == "document_too_long":
        # Longer than the embedded model's 32k context (GeoTopo ~62k tokens, the whole Alice ~45k):
        # refused with its size; the extraction itself must still meet the expectation.
        print(f"{case_id}: {r.json()['error']['message']}")
        assert expect in ("text_contains", "text_starts_with")
        doc, text = None, _extract_direct(case["path"])
    else:
        doc, text = _text(client, r)
    if expect in ("text_contains", "text_without_password"):
        assert value in text
    elif expect == "text_contains_all":
        assert all(v in text for v in value)
    elif expect == "text_contains_all_pages":
        pages = client.get(f"/v1/documents/{doc['id']}/text").json()["pages"]
        assert doc["pages"] == len(pages) > 1
        for p in pages:
            assert all(v in text[p["start"] : p["end"]] for v in value)
    elif expect == "text_equals":
        assert text.strip() == value
    elif expect == "text_starts_with":
        assert text.startswith(value) and not text.startswith("\ufeff")
    elif expect == "text_contains_after_NFKC":
        assert value in text and text == unicodedata.normalize("NFKC", text)
    elif expect == "text_contains_after_dehyphenation":
        assert value in re.sub(r"\s+", " ", re.sub(r"-\n", "", text))
    elif expect == "same_text_as":
        assert text == _extract_direct(value)
    elif expect == "answer":
        from runtime.llama import Model

        assert value in text  # the fact is in the extracted text
        model = Model(client.app.state.settings.model_path)
        ids = model.tokenize(text, parse_special=False)
        assert not any(is_control(model, int(t)) for t in ids)  # no special-token ids from the document
        model.close()
        body = {"question": case["q"], "max_tokens": 32, "stream": True}
        events = sse_events(client.post(f"/v1/documents/{doc['id']}/answers", json=body))
        tokens = [data["text"] for kind, data in events if kind == "token"]
        assert tokens and events[-1][0] == "done", events[-3:]
        assert all("\ufffd" not in t for t in tokens)  # every streamed chunk holds whole UTF-8 characters
        answer = "".join(tokens).lower()
        assert "banana" not in answer and "pwned" not in answer  # injected turns in a document stay text
