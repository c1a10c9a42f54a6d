"""The parts of ``docqa tune`` that need no model: the settings file below the environment, its errors,
the traffic log's rotation and reading, candidates, the default grid and the choice of the winner."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from server.config.settings import Settings
from server.config.tuned import describe
from server.engine.traffic import TrafficLog, read_log
from server.tools.tune import Measured, Tuner, default_axes, label, parse_candidate, render, winner
from testkit.live import ROOT

FIELDS = Settings.model_fields


@pytest.fixture(autouse=True)
def no_docqa_env(monkeypatch):
    for name in ("DOCQA_DATA_DIR", "DOCQA_N_SEQ_MAX", "DOCQA_TYPE_K", "DOCQA_N_UBATCH"):
        monkeypatch.delenv(name, raising=False)


def test_settings_file_is_below_environment_and_arguments(tmp_path, monkeypatch):
    (tmp_path / "settings.json").write_text(json.dumps({"n_seq_max": 8, "type_k": "q8_0", "n_ubatch": 256}))
    s = Settings(data_dir=tmp_path)
    assert (s.n_seq_max, s.type_k, s.n_ubatch, s.type_v) == (8, "q8_0", 256, "f16")  # file over defaults
    monkeypatch.setenv("DOCQA_N_SEQ_MAX", "2")
    s = Settings(data_dir=tmp_path, n_ubatch=128)
    assert (s.n_seq_max, s.type_k, s.n_ubatch) == (2, "q8_0", 128)  # environment and arguments over the file
    assert describe(tmp_path, FIELDS) == (
        f"settings from {tmp_path / 'settings.json'} (docqa tune): type_k=q8_0, n_ubatch=256; "
        "the environment overrides n_seq_max"
    )
    monkeypatch.setenv("DOCQA_DATA_DIR", str(tmp_path))  # DATA_DIR from the environment finds the file too
    assert Settings().type_k == "q8_0"
    assert Settings(data_dir=tmp_path / "elsewhere").type_k == "f16"


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("{oops", "is not readable JSON"),  # a hand edit gone wrong
        ("[4]", "must hold a JSON object"),
        ('{"port": 80}', "names port, which it may not set"),  # only what tune measures belongs there
        ('{"n_seq_max": 99}', "n_seq_max=99 is refused (Input should be less than or equal to 64)"),
        ('{"n_seq_max": "4"}', "n_seq_max='4' is refused"),  # JSON has types: text is not a number here
        ('{"type_k": "f8"}', "type_k='f8' is refused"),
    ],
)
def test_a_bad_settings_file_names_itself(tmp_path, content, says):
    (tmp_path / "settings.json").write_text(content)
    with pytest.raises(ValueError, match=r"settings\.json") as err:
        Settings(data_dir=tmp_path)
    assert says in str(err.value) and "or run `docqa tune` again" in str(err.value)


def test_server_start_reports_the_settings_file(tmp_path):
    """`python -m server` refuses a bad file before loading anything, and logs a good one's settings."""
    env = {"PATH": "/usr/bin:/bin", "DOCQA_DATA_DIR": str(tmp_path), "DOCQA_SELFTEST": "false"}
    env["DOCQA_MODEL_PATH"] = str(tmp_path / "missing.gguf")  # the server stops at the model, after the log line
    (tmp_path / "settings.json").write_text('{"n_seq_max": 0}')
    serve = [sys.executable, "-m", "server"]
    bad = subprocess.run(serve, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and f"{tmp_path / 'settings.json'}: n_seq_max=0 is refused" in bad.stderr, bad.stderr
    (tmp_path / "settings.json").write_text('{"n_seq_max": 3, "default_draft_tokens": null}')
    good = subprocess.run(serve, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    line = f"settings from {tmp_path / 'settings.json'} (docqa tune): n_seq_max=3, default_draft_tokens=unset"
    assert good.returncode != 0 and line in good.stderr, good.stderr


def _answer(i: int, window=None, sources=("mtp", "lookup")):
    """What TrafficLog.record reads of a finished answer (server/engine/sequence.py Sequence, AnswerStats)."""
    sampling = SimpleNamespace(temperature=0.0, top_k=0, top_p=1.0)
    params = SimpleNamespace(max_tokens=32, window=window, sources=sources, sampling=sampling)
    job = SimpleNamespace(doc_id="d1", params=params, history=(), t_start=time.perf_counter())  # arrived now
    seq = SimpleNamespace(job=job, n_prefix=900, suffix=[0] * (5 + i), n_running=i % 3)
    stats = {
        "completion_tokens": 20 + i, "finish_reason": "length", "drafted_by_source": {"lookup": 4},
        "accepted_by_source": {"lookup": 3}, "verify_steps": 6, "ttft_ms": 50.0,
    }  # fmt: skip
    return seq, stats


def test_traffic_log_rotates_and_reads_back_oldest_first(tmp_path, monkeypatch):
    log = TrafficLog(Settings(data_dir=tmp_path, traffic_log_bytes=4096, default_draft_tokens=4))
    clock = iter(range(1000, 2000))
    monkeypatch.setattr("server.engine.traffic.time.time", lambda: float(next(clock)))
    for i in range(40):  # ~450 bytes a line: rotates about every 9 lines; two older files are kept
        log.record(*_answer(i, window=4 if i % 2 else 16))
    log.close()
    files = sorted(p.name for p in tmp_path.glob("traffic.jsonl*"))
    assert files == ["traffic.jsonl", "traffic.jsonl.1", "traffic.jsonl.2"]
    assert all(p.stat().st_size <= 4096 for p in tmp_path.glob("traffic.jsonl*"))
    (tmp_path / "traffic.jsonl").open("a").write('{"v": 1, "t": 5\n{"v": 99}\n')  # a cut line, another version
    records = read_log(tmp_path / "traffic.jsonl")
    assert [r.question_tokens - 5 for r in records] == list(range(40 - len(records), 40))  # the newest, in order
    assert len(records) >= 20
    r = records[-1]  # i = 39
    assert (r.answer_tokens, r.concurrency, r.doc_tokens, r.window, r.window_by) == (59, 0, 900, 4, "server")
    assert (records[-2].window, records[-2].window_by) == (16, "request")
    assert r.sources == ("mtp", "lookup") and r.ttft_ms == 50.0


def test_candidates_are_checked_like_settings():
    assert parse_candidate("n_seq_max=8, kv=q8_0,default_draft_tokens=adaptive", FIELDS) == {
        "n_seq_max": 8, "type_k": "q8_0", "type_v": "q8_0", "default_draft_tokens": None
    }  # fmt: skip
    for bad, says in [("n_seq_max", "not KEY=VALUE"), ("port=1", "cannot be tuned"), ("n_ubatch=8", "refused")]:
        with pytest.raises(ValueError, match=says):
            parse_candidate(bad, FIELDS)


def test_default_grid_holds_the_current_settings_and_mtp_only_with_an_mtp_model():
    current = {"n_seq_max": 6, "default_draft_tokens": None, "mtp_draft_tokens": 2, "n_ubatch": 256}
    current |= {"type_k": "q8_0", "type_v": "f16"}
    axes = dict(default_axes(current, n_batch=256, has_mtp=False))
    assert list(axes) == ["n_seq_max", "default_draft_tokens", "n_ubatch", "kv"]
    assert axes["n_seq_max"][0] == {"n_seq_max": 6} and len(axes["n_seq_max"]) == 5
    assert axes["n_ubatch"] == [{"n_ubatch": 128}, {"n_ubatch": 256}]  # none above n_batch
    assert axes["kv"][0] == {"type_k": "q8_0", "type_v": "f16"}
    assert [v["mtp_draft_tokens"] for v in dict(default_axes(current, 512, True))["mtp_draft_tokens"]] == [1, 2, 3]
    assert label({"n_seq_max": 6, "type_k": "f16", "type_v": "f16"}, current) == "kv=f16"
    assert label({"n_seq_max": 6}, current) == "current settings"


def test_winner_is_the_lowest_ttft_p95_among_the_near_best_throughput():
    def m(name, tps, p95, errors=()):
        stats = [{"completion_tokens": tps, "ttft_ms": p95}] * 2
        result = SimpleNamespace(stats=stats, errors=list(errors), tokens_per_s=tps, ttft_ms=lambda q: p95)
        return Measured({}, name, result)

    fast, steady, broken = m("fast", 100.0, 900.0), m("steady", 97.0, 300.0), m("broken", 150.0, 10.0, ["500"])
    slow = m("slow", 80.0, 100.0)
    assert winner([fast, steady, broken, slow], tolerance=0.05) is steady  # within 5 % of 100 tok/s, lower p95
    assert winner([fast, steady, slow], tolerance=0.0) is fast
    down = Measured({}, "down", None, "the server exited with 1:\nValueError: a|b")
    assert winner([broken, down], 0.05) is None  # no candidate answered all
    table = render([down], None, 0.5).splitlines()
    assert table[2:] == ["| (recorded) | | | | | 0.50 | |", "| down | failed: the server exited with 1: | | | | | |"]


def test_search_goes_axis_by_axis_and_never_measures_a_configuration_twice(tmp_path, monkeypatch):
    """Fake servers whose TTFT p95 is lowest at n_seq_max=2 and with no speculation (window 0)."""
    started: list[dict] = []

    class FakeServer:
        def __init__(self, data_dir, model, settings, source_dir):
            started.append(settings)

        def start(self, timeout_s):
            return self

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    def fake_replay(server, workload):
        s = {**current, **started[-1]}
        p95 = 100.0 * abs(s["n_seq_max"] - 2) + (0 if s["default_draft_tokens"] == 0 else 50) + 300
        stats = [{"completion_tokens": 10, "ttft_ms": p95}]
        return SimpleNamespace(stats=stats, errors=[], tokens_per_s=50.0, ttft_ms=lambda q: p95, wall_s=1.0)

    monkeypatch.setattr("server.tools.candidate.CandidateServer", FakeServer)
    monkeypatch.setattr("server.tools.replay.replay", fake_replay)
    current = {"n_seq_max": 4, "default_draft_tokens": None, "mtp_draft_tokens": 2, "n_ubatch": 512}
    current |= {"type_k": "f16", "type_v": "f16"}
    tuner = Tuner(tmp_path, tmp_path / "m.gguf", None, {"n_ubatch": 512}, current, 10)
    axes = default_axes(current, 512, has_mtp=False)
    tuner.search(axes, tolerance=0.05)
    labels = [m.label for m in tuner.measured.values()]
    # 4 values of n_seq_max, then 2 new windows, 2 new n_ubatch values, 1 new KV type: the rest were measured.
    assert len(started) == len(labels) == len(set(labels)) == 4 + 2 + 2 + 1, labels
    assert started[0] == {"n_ubatch": 512, "n_seq_max": 1}  # the file's values go to every candidate
    best = winner(list(tuner.measured.values()), 0.05)
    assert (
        best.settings == {"n_seq_max": 2, "default_draft_tokens": 0}
        and best.label == "default_draft_tokens=0,n_seq_max=2"
    )
