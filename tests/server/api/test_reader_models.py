"""The embedded reader models give real answers (issue 26): facts planted in a ~2k-token text, and a
refusal for a question the document does not answer. Slow: each model prefills the documents on the CPU
(the 1.5B at about 38 tok/s on 2 idle cores). The documents are bench/quality.py's (seed 26), and the
bars are what bench/results/quality.md measured, less one."""

from __future__ import annotations

import pytest

from bench.quality_sets import build
from bench.score import is_refusal, score
from tests.conftest import upload

# (model, fewest of 5 needles right, must refuse): measured 5/5 and a refusal (1.5B), 4/5 and no
# refusal on the 10-page PDF (0.5B), so only the 0.5B's needles are asserted.
READERS = [("qwen-coder-1.5b", 4, True), ("qwen-coder-0.5b", 3, False)]


@pytest.fixture(scope="module")
def docs(cases):
    """bench/quality.py's documents of its results run (seed 26), by id."""
    return {d.doc_id: d for d in build(26, {"needles-2k": 2000, "long": 8000}, ["leval-quality-1"])}


def ask(client, doc_id: str, question: str) -> str:
    r = client.post(f"/v1/documents/{doc_id}/answers", json={"question": question, "max_tokens": 48})
    assert r.status_code == 200, r.text
    return r.json()["answer"]


@pytest.mark.slow
@pytest.mark.parametrize("name, least, refuses", READERS)
def test_reader_model_finds_needles_and_refuses(server, tmp_path, docs, name, least, refuses, reader_model):
    path = reader_model(name)
    needles, pdf = docs["needles-2k"], docs["pdf10"]
    with server(model_path=path) as client:
        doc = upload(client, tmp_path / "n.txt", name="needles.txt", data=needles.text.encode())
        answers = [(item, ask(client, doc["id"], item.question)) for item in needles.items if item.kind == "exact"]
        right = [item.qid for item, answer in answers if score(item, answer)["right"]]
        assert len(right) >= least, answers
        if refuses:  # the 10-page PDF: the fact on page 7, and a question it does not answer
            doc = upload(client, tmp_path / "ten-pages.pdf", data=pdf.data)
            fact, absent = pdf.items
            assert score(fact, ask(client, doc["id"], fact.question))["right"]
            answer = ask(client, doc["id"], absent.question)
            assert is_refusal(answer), answer
