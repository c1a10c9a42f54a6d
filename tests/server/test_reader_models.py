"""The embedded reader models give real answers (issue 26): needles in a ~2k-token document, and a
refusal for a question the document does not answer. Slow: each model prefills the document on the
CPU (the 1.5B at about 35 tok/s on 2 cores)."""

from __future__ import annotations

import random

import pytest

from bench.quality_sets import needle_doc
from bench.score import is_refusal, score
from tests.conftest import upload

# (model, fewest needles of 5 right): the bar each model cleared in bench/results/quality.md
READERS = [("qwen-coder-1.5b", 4), ("qwen-coder-0.5b", 3)]


@pytest.fixture(scope="module")
def document(cases):
    """Alice in Wonderland, ~2k tokens, one invented fact at each of 10/30/50/70/90 % depth."""
    return needle_doc("needles-2k", "needles", "alice-in-wonderland-pg11.txt", 0.2, 2000, random.Random(5), set())


@pytest.mark.slow
@pytest.mark.parametrize("name, least", READERS)
def test_reader_model_finds_needles_and_refuses(server, tmp_path, document, name, least):
    from runtime.models import ModelUnavailable, model_path

    try:
        path = model_path(name, tmp_path / "models")
    except ModelUnavailable as exc:
        pytest.skip(str(exc))
    with server(model_path=path) as client:
        doc = upload(client, tmp_path / "doc.txt", name="needles.txt", data=document.text.encode())
        assert doc["status"] == "ready", doc
        answers = {}
        for item in document.items:
            r = client.post(f"/v1/documents/{doc['id']}/answers", json={"question": item.question, "max_tokens": 48})
            assert r.status_code == 200, r.text
            answers[item.qid] = (item, r.json()["answer"])
    needles = [(i, a) for i, a in answers.values() if i.kind == "exact"]
    right = [i.qid for i, a in needles if score(i, a)["right"]]
    assert len(right) >= least, {i.qid: a for i, a in needles}
    absent = [(i, a) for i, a in answers.values() if i.kind == "refusal"]
    assert any(is_refusal(a) for _, a in absent), {i.qid: a for i, a in absent}
