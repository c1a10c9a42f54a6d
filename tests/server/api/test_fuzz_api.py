"""Fuzz-style, on a real server process (issue 27): the 200 malformed files of
tests/ingest/test_fuzz.py uploaded under their formats' names, and 200 malformed JSON bodies (from a
fixed seed: cut, wrong types, out-of-range and non-finite numbers, deep nesting, huge integers,
bytes that are not UTF-8) sent to both question routes. No 500, no crash, and the server still
answers a normal question afterwards. Bounded: fixed counts; slow (every file that extracts is also
prefilled, about 4 minutes on 2 cores)."""

from __future__ import annotations

import json
import random

import pytest

from testkit.live import Live
from tests.ingest.test_fuzz import cases as malformed_files

pytestmark = pytest.mark.slow

SEED = 2727
SUFFIX = {
    "pdf": ".pdf", "pdf-plain": ".pdf", "docx": ".docx", "docx-chunk": ".docx", "epub": ".epub", "html": ".html",
    "xhtml": ".xhtml", "text": ".txt", "text-utf16": ".txt", "markdown": ".md",
}  # fmt: skip


def _file_name(case: str) -> str:
    kind = case.split(" ")[0]
    return "fuzz" + SUFFIX.get(kind, ".bin")


def _bodies(rng: random.Random) -> list[bytes]:
    """200 bodies no question route may answer with a 500."""
    good = {"question": "Who painted the fence?", "max_tokens": 8}
    values = [None, True, -1, 0, 2**70, 1e308, -1e308, "x" * 5000, [], {}, [1, [2, [3]]], "", " ", "\u0000"]
    out: list[bytes] = []
    text = json.dumps(good).encode()
    for _ in range(40):  # cut anywhere
        out.append(text[: rng.randrange(0, len(text))])
    for _ in range(60):  # a field of the wrong type or range
        body = dict(good)
        body[rng.choice(["question", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "stream",
                         "draft_tokens", "draft_source", "messages", "model", "n"])] = rng.choice(values)  # fmt: skip
        out.append(json.dumps(body).encode())
    for word in ("NaN", "Infinity", "-Infinity", "1" * 5000, "1e99999"):
        out.append(b'{"question": "q", "max_tokens": ' + word.encode() + b"}")
    for depth in (100, 1000, 5000):
        out.append(b'{"question": ' + b"[" * depth + b"]" * depth + b"}")
    while len(out) < 200:  # random bytes, some of them not UTF-8, some JSON-looking
        raw = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
        out.append(rng.choice([raw, b"{" + raw + b"}", b'{"question": "' + raw + b'"}']))
    return out


def _post(server: Live, path: str, body: bytes) -> int:
    c = server.conn(120)
    c.request("POST", path, body, {"Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    return r.status


def test_malformed_files_and_bodies_never_get_a_500_and_the_server_answers_afterwards(tmp_path, gemma_path):
    server = Live(tmp_path / "data", gemma_path, DOCQA_EXTRACT_TIMEOUT_S="20").start(timeout=600)
    try:
        # First, so that its question is not queued behind the prefills of the fuzzed files that read.
        doc = server.ingest("fence.txt", b"Tom Sawyer painted the fence while Ben Rogers watched.\n")
        statuses: dict[int, int] = {}
        for case, data in malformed_files():
            status, body = server.upload(_file_name(case), data)
            assert status < 500, (case, status, body)
            statuses[status] = statuses.get(status, 0) + 1
        assert len(statuses) >= 2, f"the files reach several outcomes: {statuses}"
        rng = random.Random(SEED)
        routes = (f"/v1/documents/{doc}/answers", "/v1/chat/completions")
        for i, body in enumerate(_bodies(rng)):
            status = _post(server, routes[i % 2], body)
            assert status < 500, (routes[i % 2], body[:200], status)
        assert server.proc.poll() is None, "the server died"
        status, answer = server.post_json(routes[0], {"question": "Who painted the fence?", "max_tokens": 8})
        assert status == 200 and answer["answer"], answer
    finally:
        server.stop()
