"""``docqa tune`` end to end: a real server records a short mixed workload in its traffic log, then
tune replays it on two candidates, each a real server process, prints the table and writes the winner.
And the synthetic questions of the replay have the recorded lengths."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

from ingest.prompt import layout_for
from server.engine.traffic import read_log
from server.tools.cli import main
from server.tools.replay import synthesize
from testkit.live import Live
from testkit.traffic import record

ALICE = "text/gutenberg/alice-in-wonderland-pg11.txt"
ROW = re.compile(
    r"^\| (\*\*)?(?P<label>[^|*]+?)(\*\* \*)? \| (?P<ok>\d+)/(?P<n>\d+) \| (?P<tps>[\d.]+) \| (?P<p50>\d+) \| "
    r"(?P<p95>\d+) \| (?P<conc>[\d.]+) \| (?P<acc>\d+)% \|$"
)


# The whole tool's run (two candidate servers and a replay, 28 s on 2 cores): in make test-slow. make
# test keeps its parts: the synthetic questions below; the search, the grid, the winner rule, the
# settings file and the servers that read it (tests/server/config/test_tuned.py).
@pytest.mark.slow
def test_tune_replays_recorded_traffic_on_two_candidates_and_writes_the_winner(tmp_path, gemma_path, gemma, cases):
    data = tmp_path / "data"
    # One thread per server: on a busy 2-core machine two threads stall each other at llama.cpp's
    # barriers (decode falls to ~1 tok/s); this test checks the mechanism, not the speed.
    server = Live(data, gemma_path, DOCQA_SELFTEST="false", DOCQA_N_THREADS="1").start()
    try:
        text = (cases / ALICE).read_text(encoding="utf-8-sig")[:1500]
        doc = server.ingest("alice.txt", text.encode())
        doc_tokens = server.get(f"/v1/documents/{doc}")[1]["tokens"]
        burst = [  # three at once: admitted into 0, 1 and 2 running answers
            {"question": "Who is Alice?", "max_tokens": 12, "stop": []},
            {"question": "Quote the first sentence.", "max_tokens": 16, "stop": [], "verify16": True},
            {"question": "What did the Rabbit say?", "max_tokens": 8, "stop": [], "draft_tokens": 0},
        ]
        later = {"question": "Summarise.", "max_tokens": 10, "temperature": 0.7, "seed": 3, "draft_source": "lookup"}
        stats = record(server, [(0.0, doc, b) for b in burst] + [(1.0, doc, later)])
    finally:
        server.stop()

    # The log: one line per answer, lengths not text, as the server saw them.
    lines = (data / "traffic.jsonl").read_text().splitlines()
    assert len(lines) == 4 and all("Alice" not in line and "Rabbit" not in line for line in lines)
    records = read_log(data / "traffic.jsonl")
    layout = layout_for(gemma)
    by_tokens = {len(layout.question_suffix(gemma, b["question"])): i for i, b in enumerate([*burst, later])}
    assert len(by_tokens) == 4, "the test's questions must differ in length to be told apart"
    logged = {by_tokens[r.question_tokens]: r for r in records}
    assert [logged[i].answer_tokens for i in range(4)] == [s["completion_tokens"] for s in stats]
    assert {r.doc for r in records} == {doc} and {r.doc_tokens for r in records} == {doc_tokens}
    assert sorted(logged[i].concurrency for i in range(3)) == [0, 1, 2]
    assert [(logged[i].window, logged[i].window_by) for i in range(4)] == [
        (None, "server"), (16, "request"), (0, "request"), (None, "server")
    ]  # fmt: skip
    assert logged[3].sources == ("lookup",) and logged[3].temperature == 0.7
    assert all(r.ttft_ms > 0 and r.decode_ms > 0 for r in records)

    # Tune on two candidates. DOCQA_N_SEQ_MAX=2 in its environment must not reach the candidates (each
    # gets its own value in its settings file), but is reported as overriding the written file.
    env = {"DOCQA_MODEL_PATH": str(gemma_path), "DOCQA_SELFTEST": "false", "DOCQA_N_CTX": "8192"}
    env |= {"DOCQA_N_THREADS": "1", "DOCQA_N_SEQ_MAX": "2", "DOCQA_DATA_DIR": None}
    args = ["tune", "--data-dir", str(data), "--candidate", "n_seq_max=1", "--candidate", "n_seq_max=4"]
    r = CliRunner(env=env).invoke(main, args)
    assert r.exit_code == 0, r.output + (r.stderr if r.stderr_bytes else "")
    assert "question length off by 0.00 tokens on average" in r.stderr, r.stderr
    table = r.stdout.splitlines()
    assert table[0].startswith("| candidate | answers | tok/s | TTFT p50 ms | TTFT p95 ms | concurrency")
    mean_recorded = sum(x.concurrency for x in records) / 4
    assert table[2] == f"| (recorded) | | | | | {mean_recorded:.2f} | |"
    rows = {m["label"]: m for m in map(ROW.match, table[3:5])}
    assert set(rows) == {"n_seq_max=1", "n_seq_max=4"}, table
    for m in rows.values():
        assert m["ok"] == m["n"] == "4" and float(m["tps"]) > 0 and int(m["p50"]) <= int(m["p95"])
    # One question at a time: nothing else is running at any admission. Four at once: the burst overlaps.
    assert float(rows["n_seq_max=1"]["conc"]) == 0 and float(rows["n_seq_max=4"]["conc"]) > 0
    marked = [label for label, m in rows.items() if m.group(1)]
    assert len(marked) == 1 and f"winner: {marked[0]}; written to {data / 'settings.json'}" in r.stdout
    assert json.loads((data / "settings.json").read_text()) == {"n_seq_max": int(marked[0].split("=")[1])}
    assert f"note: DOCQA_N_SEQ_MAX is set in this environment and wins over {data / 'settings.json'}" in r.stderr


def test_synthetic_questions_have_the_recorded_suffix_length(gemma, cases):
    layout = layout_for(gemma)
    text = (cases / ALICE).read_text(encoding="utf-8-sig")[:4000]
    ids = gemma.tokenize(text, parse_special=False)
    floor = len(layout.question_suffix(gemma, "a"))  # the scaffolding and one token
    for n_tokens in (floor, floor + 1, 12, 40, 333):
        for start in (0, 517, len(ids) - 3):  # the end wraps around to the start
            question = synthesize(gemma, layout, ids, n_tokens, start)
            assert len(layout.question_suffix(gemma, question)) == n_tokens, (n_tokens, start, question)
    short = np.asarray(ids[:5], dtype=np.int32)  # shorter than the question: repeated
    assert len(layout.question_suffix(gemma, synthesize(gemma, layout, short, 60, 2))) == 60
