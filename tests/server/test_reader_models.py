"""The embedded reader models give real answers (issue 26): facts planted in a ~2k-token text, and a
refusal for a question the document does not answer. Slow: each model prefills the documents on the CPU
(the 1.5B at about 38 tok/s on 2 idle cores). The documents are bench/quality.py's (seed 26), and the
bars are what bench/results/quality.md measured, less one."""

from __future__ import annotations

import random

import pytest

from bench.quality_sets import counterfactual_doc, needle_doc
from bench.score import is_refusal, score
from tests.conftest import upload

# (model, fewest of 5 needles right, must refuse): the 0.5B measured 4 of 5 and refused 1 of 3
# not-in-document questions, so only its needles are asserted.
READERS = [("qwen-coder-1.5b", 4, True), ("qwen-coder-0.5b", 3, False)]
ABSENT = "What is the tallest mountain of the Meridian World?"  # the survey names no mountain


def ask(client, doc_id: str, question: str) -> str:
    r = client.post(f"/v1/documents/{doc_id}/answers", json={"question": question, "max_tokens": 48})
    assert r.status_code == 200, r.text
    return r.json()["answer"]


@pytest.mark.slow
@pytest.mark.parametrize("name, least, refuses", READERS)
def test_reader_model_finds_needles_and_refuses(server, tmp_path, cases, name, least, refuses):
    from runtime.models import ModelUnavailable, model_path

    try:
        path = model_path(name, tmp_path / "models")
    except ModelUnavailable as exc:
        pytest.skip(str(exc))
    needles = needle_doc("needles-2k", "needles", "alice-in-wonderland-pg11.txt", 0.05, 2000, random.Random(26), set())
    survey = counterfactual_doc()
    with server(model_path=path) as client:
        doc = upload(client, tmp_path / "n.txt", name="needles.txt", data=needles.text.encode())
        answers = [(item, ask(client, doc["id"], item.question)) for item in needles.items if item.kind == "exact"]
        right = [item.qid for item, answer in answers if score(item, answer)["right"]]
        assert len(right) >= least, answers
        doc = upload(client, tmp_path / "s.txt", name="survey.txt", data=survey.text.encode())
        fact = survey.items[0]
        assert score(fact, ask(client, doc["id"], fact.question))["right"]  # Lyon, from the document
        if refuses:
            answer = ask(client, doc["id"], ABSENT)
            assert is_refusal(answer), answer
