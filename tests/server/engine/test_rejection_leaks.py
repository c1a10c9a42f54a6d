"""Forced rejection (issue 37 item 3): with ``DOCQA_DEBUG_REJECT_DRAFTS`` every draft is rejected after
its verify call, so every step takes the rollback path (``seq_rm`` of the draft's cells). 50 questions
through a small context (n_ctx 1024, 4 sequences), 5 at a time, on a real server process: the KV
positions held (``docqa_kv_positions``) the same after the last round as after the first, RSS after
the last round within 2 % of what it was after the first five, and KV positions, open file
descriptors and threads never more in the last 25 questions than at the highest point of the first
25 (worker threads come and go). The
answers stay the target's own: in invariant mode a greedy answer with rejected drafts equals the one
decoded without drafts. llama-server's server tests check the same with drafts forced to be
rejected. ``DOCQA_LEAK_RESULTS=<file>`` writes the footprints there (bench/results/leaks.md)."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from testkit.live import Live

TEXT = (
    "The lighthouse keeper wrote in her log every evening. On the first of May she counted eleven "
    "fishing boats leaving the harbour before dawn. The storm that followed broke two windows of the "
    "tower and carried the red flag out to sea. The keeper repaired the lamp by candlelight and wrote "
    "that the lamp must never go dark while a boat is out. "
) * 4
QUESTIONS = [
    "Quote the sentence about the storm.",
    "How many fishing boats did she count?",
    "Quote the sentence about the lamp.",
    "What did the storm carry out to sea?",
    "Quote the first sentence of the document.",
]


def _metric(server: Live, name: str) -> float:
    conn = server.conn(10)
    conn.request("GET", "/metrics")
    body = conn.getresponse().read().decode()
    conn.close()
    return float(next(line.split()[-1] for line in body.splitlines() if line.startswith(name + " ")))


def _footprint(server: Live) -> dict[str, int]:
    kv = int(_metric(server, "docqa_kv_positions"))
    time.sleep(0.5)  # the server sees the last connections close
    pid = server.proc.pid
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return {
        "kv_positions": kv,
        "rss_kib": int(status["VmRSS"].split()[0]),
        "fds": fds,
        "threads": int(status["Threads"]),
    }


def _write(out: Path, seen: list[dict[str, int]]) -> None:
    rows = "\n".join(
        f"| {5 * i + 5} | {m['kv_positions']} | {m['rss_kib'] / 1024:.1f} | {m['fds']} | {m['threads']} |"
        for i, m in enumerate(seen)
    )
    out.write_text(
        "# Forced rejection: 50 questions with every draft rejected (issue 37 item 3)\n\n"
        "Made by tests/server/engine/test_rejection_leaks.py (`make test-slow`) with `DOCQA_LEAK_RESULTS`: a real "
        "server, the embedded Gemma 3 270M, `DOCQA_DEBUG_REJECT_DRAFTS=true`, `DOCQA_BATCH_INVARIANT=true`, n_ctx "
        f"1024, 4 sequences, 5 questions at a time. `{os.uname().nodename}`, load {os.getloadavg()[0]:.2f} at the "
        "end.\n\n| after question | KV positions held | RSS MiB | open fds | threads |\n|---|---|---|---|---|\n"
        f"{rows}\n"
    )


@pytest.mark.slow  # 2.7 min on 2 loaded cores, past make test's 20 minutes; make test-slow runs it
def test_fifty_questions_with_every_draft_rejected_leak_nothing(tmp_path, gemma_path):
    env = {
        "DOCQA_N_CTX": "1024",
        "DOCQA_ANSWER_RESERVE": "256",
        "DOCQA_N_SEQ_MAX": "4",
        "DOCQA_BATCH_INVARIANT": "true",
    }
    server = Live(tmp_path / "data", gemma_path, DOCQA_DEBUG_REJECT_DRAFTS="true", **env).start(timeout=300)
    try:
        doc_id = server.ingest("keeper.txt", TEXT.encode())
        path = f"/v1/documents/{doc_id}/answers"

        def ask(i: int) -> dict:
            status, body = server.post_json(path, {"question": QUESTIONS[i % 5], "max_tokens": 24, "verify16": True})
            assert status == 200, body
            return body

        # Correct: each answer equals the one decoded without drafts (invariant mode: rows do not matter).
        for q in QUESTIONS[:3]:
            plain = server.post_json(path, {"question": q, "max_tokens": 24, "draft_tokens": 0})[1]
            rejected = server.post_json(path, {"question": q, "max_tokens": 24, "verify16": True})[1]
            assert rejected["answer"] == plain["answer"], (q, plain["answer"], rejected["answer"])
            assert rejected["stats"]["drafted_tokens"] > 0 and rejected["stats"]["accepted_tokens"] == 0
        seen: list[dict[str, int]] = []
        with ThreadPoolExecutor(5) as pool:
            for round_ in range(10):  # 50 questions, 5 at a time: more than the 4 sequences, so some wait
                answers = list(pool.map(ask, range(round_ * 5, round_ * 5 + 5)))
                assert all(a["stats"]["accepted_tokens"] == 0 for a in answers)
                assert sum(a["stats"]["drafted_tokens"] for a in answers) > 0
                seen.append(_footprint(server))
                print(f"after {5 * round_ + 5} questions: {seen[-1]}")
        first, last = seen[4], seen[-1]
        print(f"footprint after 25 questions {first}, after 50 {last}")
        if out := os.environ.get("DOCQA_LEAK_RESULTS"):
            _write(Path(out), seen)
        # KV positions: after some rounds one finished answer's cells were still held when its response
        # had come (348 + 381 seen in 2 of 10 rounds), and gone by the next: no growth, checked as below.
        assert last["kv_positions"] == seen[0]["kv_positions"], [m["kv_positions"] for m in seen]
        assert last["rss_kib"] <= first["rss_kib"] * 1.02 + 2048, seen
        # Worker threads come and go with the requests (anyio's idle ones end): no more at any point of
        # the last 25 than at the busiest point of the first 25, and open files likewise.
        for key in ("kv_positions", "fds", "threads"):
            assert max(m[key] for m in seen[5:]) <= max(m[key] for m in seen[:5]), (key, seen)
    finally:
        server.stop()
