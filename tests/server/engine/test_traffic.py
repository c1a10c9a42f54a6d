"""The traffic log as ``docqa tune`` reads it (server/engine/traffic.py): a line that is not a valid,
bounded record is skipped and counted, never a traceback or a runaway workload (issue 27 item 13)."""

from __future__ import annotations

import json

import pytest

from server.engine.traffic import read_log_counted

GOOD = {
    "v": 1, "t": 1700000000.0, "doc": "abc123", "doc_tokens": 900, "question_tokens": 20, "turns": 0,
    "answer_tokens": 40, "max_tokens": 64, "finish": "stop", "concurrency": 1, "window": None,
    "window_by": "server", "sources": ["lookup", "mtp"], "temperature": 0.0, "top_k": 0,
    "top_p": 1.0, "drafted": {}, "accepted": {}, "verify_steps": 10, "ttft_ms": 50.0, "decode_ms": 900.0,
}  # fmt: skip


@pytest.mark.parametrize(
    ("why", "change"),
    [
        ("a question of a billion tokens (grew tune to 22.8 GB)", {"question_tokens": 1e9}),
        ("an arrival time that is a string", {"t": "t"}),
        ("a document id that is a path", {"doc": "../../../etc"}),
        ("an unknown draft source", {"sources": ["telepathy"]}),
        ("a negative answer", {"answer_tokens": -5}),
        ("an impossible window", {"window": 99}),
        ("NaN seconds", {"ttft_ms": float("nan")}),
        ("another layout version", {"v": 2}),
    ],
)
def test_a_bad_line_is_skipped_and_counted(tmp_path, why, change):
    path = tmp_path / "traffic.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, **change}) + "\n{not json\n")
    records, skipped = read_log_counted(path)
    assert len(records) == 1 and skipped == 2, why
    assert records[0].doc == "abc123" and records[0].sources == ("lookup", "mtp")
