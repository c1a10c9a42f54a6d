"""Slow: a ~24k-token book in the embedded model's full 32k context, many questions, and a restart.

Run with `make test-slow`.
"""

from __future__ import annotations

import resource

import pytest

from tests.conftest import upload

pytestmark = pytest.mark.slow

BOOK = "text/gutenberg/around-the-world-in-80-days-pg103.txt"


def test_long_book_in_full_context_survives_many_questions_and_a_restart(server, cases, tmp_path):
    text = (cases / BOOK).read_text(encoding="utf-8-sig")[:95_000]
    data = tmp_path / "long"
    questions = [
        "Who is Phileas Fogg?",
        "What is the name of Fogg's new servant?",
        "Quote the first sentence of the book.",
        "What wager does Fogg make?",
    ]
    with server(data_dir=data, n_ctx=32768) as client:
        doc = upload(client, cases / BOOK, name="book.txt", data=text.encode())
        assert doc["status"] == "ready" and 15_000 < doc["tokens"] < 31_744
        print(f"book prefix: {doc['tokens']} tokens")
        answers = {}
        rss = []
        for round_ in range(5):
            for q in questions:
                r = client.post(f"/v1/documents/{doc['id']}/answers", json={"question": q, "max_tokens": 32})
                assert r.status_code == 200, r.text
                body = r.json()
                assert body["stats"]["prompt_tokens"] < 40  # never the document again
                if round_ == 0:
                    answers[q] = body["answer"]
                else:
                    assert body["answer"] == answers[q]  # greedy, same state: same answer every time
            rss.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        print(f"max RSS per round (KiB): {rss}")
        assert rss[-1] - rss[1] < 200_000  # no growth with the number of questions
    with server(data_dir=data, n_ctx=32768) as client:
        for q in questions:
            r = client.post(f"/v1/documents/{doc['id']}/answers", json={"question": q, "max_tokens": 32})
            assert r.status_code == 200 and r.json()["answer"] == answers[q]
            assert r.json()["stats"]["prompt_tokens"] < 40
