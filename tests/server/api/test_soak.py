"""Slow soak: 200 questions over 5 documents from 4 client threads, with a server restart in the
middle. Zero errors, every answer equal to the first answer to the same (document, question) (so none
reached the wrong request), and flat RSS. Run with `make test-slow`."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from testkit.live import Live

pytestmark = pytest.mark.slow

DOCS = [
    "pdf/pypdf-resources/crazyones.pdf",
    "pdf/sample-files/001-trivial/minimal-document.pdf",
    "pdf/sample-files/011-google-doc-document/google-doc-document.pdf",
    "pdf/sample-files/022-pdfkit/pdfkit.pdf",
    "pdf/pypdf-resources/multilang.pdf",
]
QUESTIONS = ["What is this document about?", "Quote the first line.", "Name one word in it.", "Who wrote it?"]


def test_soak_200_questions_with_a_restart(tmp_path, gemma_path, cases):
    data = tmp_path / "soak"
    server = Live(data, gemma_path).start()
    ids = []
    for path in DOCS:
        status, doc = server.upload(path.rsplit("/", 1)[-1], (cases / path).read_bytes())
        assert status == 202
        ids.append(doc["id"])
    for doc_id in ids:
        assert server.wait_ready(doc_id)["status"] == "ready"
    expected: dict[tuple[str, str], str] = {}
    lock = threading.Lock()
    errors: list[str] = []
    rss: list[int] = []

    def ask(i: int, srv: Live) -> None:
        doc_id, q = ids[i % len(ids)], QUESTIONS[(i // len(ids)) % len(QUESTIONS)]
        status, body = srv.post_json(f"/v1/documents/{doc_id}/answers", {"question": q, "max_tokens": 12})
        with lock:
            if status != 200:
                errors.append(f"{status} {body}")
                return
            first = expected.setdefault((doc_id, q), body["answer"])
            if body["answer"] != first:
                errors.append(f"answer changed for {(doc_id, q)}: {first!r} -> {body['answer']!r}")

    def run(srv: Live, start: int) -> None:
        with ThreadPoolExecutor(4) as pool:
            for block in range(start, start + 100, 20):
                list(pool.map(lambda i: ask(i, srv), range(block, block + 20)))
                rss.append(srv.rss_kib())

    run(server, 0)
    server.stop()
    server = Live(data, gemma_path).start()
    run(server, 100)
    server.stop()
    print(f"soak: 200 questions, {len(errors)} errors, RSS per 20 questions (MiB): {[r // 1024 for r in rss]}")
    assert errors == []
    assert len(expected) == len(DOCS) * len(QUESTIONS)
    # Flat: after warm-up, each server's RSS moves by less than 40 MiB over its 100 questions.
    assert abs(rss[4] - rss[1]) < 40 * 1024 and abs(rss[9] - rss[6]) < 40 * 1024
