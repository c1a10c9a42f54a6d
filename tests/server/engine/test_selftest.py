"""The start-up self-test: a child that dies by a signal becomes a fallback or a clear exit, never a
bare segfault (issue 11). The probes below really kill their child process; the last test runs the
real probe on the embedded model."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time

import pytest

from server.engine import selftest
from testkit.live import free_port
from tests.conftest import ROOT, make_settings


def crash_with_extra_bufts(settings, model_path, extra_bufts) -> None:
    """Dies as the AMX kernels do (SIGSEGV on the first decode), unless extra buffer types are off."""
    if extra_bufts is not False:
        os.kill(os.getpid(), signal.SIGSEGV)


def always_crash(settings, model_path, extra_bufts) -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


def hang(settings, model_path, extra_bufts) -> None:
    time.sleep(3600)


def passes(settings, model_path, extra_bufts) -> None:
    """A child that loads nothing and passes."""


def must_not_run(settings, model_path, extra_bufts) -> None:
    raise AssertionError("the self-test ran although its result was cached")


def test_crash_falls_back_logs_and_caches(tmp_path, gemma_path, caplog):
    settings = make_settings(tmp_path, gemma_path, selftest=True)
    with caplog.at_level(logging.WARNING, logger="docqa.selftest"):
        result = selftest.check(settings, crash_with_extra_bufts)
    assert (result.status, result.extra_bufts) == ("fallback", False)
    warning = " ".join(r.getMessage() for r in caplog.records)
    assert "SIGSEGV" in warning and "DOCQA_CPU_REPACK=off" in warning
    assert "AMX_INT8" in warning or "CPU_REPACK" in warning  # the CPU feature it blames
    cached = json.loads((tmp_path / selftest.CACHE_FILE).read_text())
    assert [entry["extra_bufts"] for entry in cached.values()] == [False]
    again = selftest.check(settings, must_not_run)  # a restart starts no child
    assert (again.status, again.extra_bufts) == ("cached", False)


def test_explicit_setting_is_not_overridden(tmp_path, gemma_path):
    settings = make_settings(tmp_path, gemma_path, cpu_repack="on", selftest=True)
    with pytest.raises(selftest.SelfTestFailed, match="SIGSEGV"):
        selftest.check(settings, crash_with_extra_bufts)


def test_fallback_that_crashes_too_is_a_clear_message(tmp_path, gemma_path):
    settings = make_settings(tmp_path, gemma_path, selftest=True)
    with pytest.raises(selftest.SelfTestFailed) as info:
        selftest.check(settings, always_crash)
    message = str(info.value)
    assert gemma_path.name in message and "n_ctx 8192" in message and "SIGSEGV" in message
    assert not (tmp_path / selftest.CACHE_FILE).exists()  # a failure is tried again at the next start


def test_hanging_child_is_killed(tmp_path, gemma_path):
    settings = make_settings(tmp_path, gemma_path, selftest_timeout_s=1.0, selftest=True)
    t0 = time.monotonic()
    with pytest.raises(selftest.SelfTestFailed, match="no result within 1 s"):
        selftest.check(settings, hang)
    assert time.monotonic() - t0 < 30


def test_server_exits_non_zero_with_the_reason(tmp_path, gemma_path):
    """`python -m server` with a probe that always dies: exit code 1 and the message, before listening."""
    code = (
        "import server.engine.selftest as st; from tests.server.engine import test_selftest as t; "
        "st.probe = t.always_crash; from server.__main__ import main; main()"
    )
    env = dict(os.environ, DOCQA_DATA_DIR=str(tmp_path), DOCQA_MODEL_PATH=str(gemma_path), DOCQA_N_THREADS="2")
    env["DOCQA_PORT"] = str(free_port())  # the port is bound before the self-test: never one in use
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "self-test" in done.stderr and "SIGSEGV" in done.stderr and gemma_path.name in done.stderr
    assert "Segmentation fault" not in done.stderr  # no bare crash reaches the user


def test_real_probe_passes_and_is_cached(tmp_path, gemma_path):
    # The layout named, so only the probe runs (the slow test below times the layouts and attention).
    settings = make_settings(tmp_path, gemma_path, selftest=True, cpu_repack="on")
    result = selftest.check(settings)
    assert result.status == "passed", result.note
    assert selftest.check(settings, must_not_run).status == "cached"
    changed = make_settings(tmp_path, gemma_path, n_ctx=4096, selftest=True, cpu_repack="on")  # tested again
    assert selftest.check(changed).status == "passed"


def test_the_weight_layout_is_chosen_by_its_rates():
    """Plain weights only where they read faster and answer as fast (server/engine/layout.py); the
    rates are this session's AMD Zen 3 measurements of the default model (bench/results/prefill.md)."""
    from server.engine.layout import Rates, choose

    repacked = Rates(read=66.3, decode_ms=44.0, verify_ms=458.7)
    zen3 = choose(repacked, Rates(read=71.0, decode_ms=45.0, verify_ms=685.8))  # 1.07x: too little to read faster
    assert not zen3.plain and "verify 0.67x" in zen3.note and "no faster reading" in zen3.note
    zen4 = choose(repacked, Rates(read=110.0, decode_ms=55.0, verify_ms=600.0))  # reads faster, answers slower
    assert not zen4.plain and zen4.pair and "answering with the repacked ones" in zen4.note
    faster = choose(repacked, Rates(read=101.0, decode_ms=44.5, verify_ms=455.0))
    assert faster.plain and not faster.pair and "reading and answering with the plain weights" in faster.note
    slower = choose(repacked, Rates(read=67.0, decode_ms=40.0, verify_ms=400.0))  # no faster reading
    assert not slower.plain and not slower.pair and not zen3.pair


def test_flash_attention_is_chosen_by_its_rates_at_a_documents_depth():
    """Off where llama.cpp's CPU flash attention makes a verify call at depth slower (this session's AMD
    Zen 4 measurement of the default model at 1,024 tokens, bench/results/prefill.md), on where it
    costs nothing or reading or decoding would lose."""
    from server.engine.layout import Rates, choose_attention

    on = Rates(read=83.3, decode_ms=38.3, verify_ms=430.9)
    zen4, note = choose_attention(on, Rates(read=84.6, decode_ms=36.9, verify_ms=360.2))
    assert zen4 == "off" and "verifies 1.20x" in note and note.endswith("flash attention off")
    assert choose_attention(on, Rates(read=84.0, decode_ms=38.0, verify_ms=425.0))[0] == "on", "1.01x: no gain"
    assert choose_attention(on, Rates(read=70.0, decode_ms=37.0, verify_ms=300.0))[0] == "on", "reading would lose"
    assert choose_attention(on, Rates(read=84.0, decode_ms=45.0, verify_ms=300.0))[0] == "on", "decoding would lose"


def test_attention_is_chosen_only_where_it_is_this_servers_to_choose(tmp_path):
    from server.engine.layout import attention_matters

    model = tmp_path / "m.gguf"
    assert attention_matters(make_settings(tmp_path, model))
    assert not attention_matters(make_settings(tmp_path, model, flash_attn="on"))
    assert not attention_matters(make_settings(tmp_path, model, type_k="q8_0", type_v="q8_0", flash_attn="auto"))
    assert not attention_matters(make_settings(tmp_path, model, n_ctx=1024, n_batch=512, answer_reserve=128))
    shared = make_settings(tmp_path, model, database_url="postgresql://u@h/db")  # servers sharing their data
    assert not attention_matters(shared)


def test_a_choice_with_attention_is_kept_and_read_back():
    from server.engine.layout import Choice, Rates

    attention = (Rates(83, 38, 431), Rates(85, 37, 360))
    chosen = Choice(False, Rates(92, 38, 315), Rates(124, 56, 450), "n", True, "off", attention)
    assert Choice.from_dict(json.loads(json.dumps(chosen.as_dict()))) == chosen
    assert Choice.from_dict({**chosen.as_dict(), "flash_attn": None, "attention": None}).flash_attn is None


def test_a_layout_kept_before_the_pair_existed_is_chosen_again_by_its_rates():
    from server.engine.layout import Choice, Rates

    old = {"plain": False, "repacked": vars_of(Rates(100, 49, 366)), "plain_rates": vars_of(Rates(131, 64, 409))}
    assert Choice.from_dict(old).pair and not Choice.from_dict({**old, "pair": False}).pair


def vars_of(rates) -> dict:
    return {"read": rates.read, "decode_ms": rates.decode_ms, "verify_ms": rates.verify_ms}


def test_a_measured_pair_is_cached_and_read_back(tmp_path, gemma_path):
    """The pair (read with the plain weights, answer with the repacked ones) is kept with the self-test
    and read back at a restart, where server/api/serve.py turns it into DOCQA_CPU_REPACK=pair."""
    from server.engine.layout import Choice, Rates

    def pair_wins(settings, model_path):
        return Choice(False, Rates(100, 49, 366), Rates(131, 64, 409), "plain weights read 1.31x", pair=True)

    settings = make_settings(tmp_path, gemma_path, selftest=True)
    result = selftest.check(settings, passes, pair_wins)
    if result.layout is None:  # a GPU build, or no repacking kernels: nothing to choose
        pytest.skip("this build has no CPU repacking kernels")
    assert result.extra_bufts is not False and result.layout.pair and not result.layout.plain
    again = selftest.check(settings, must_not_run)
    assert again.status == "cached" and again.layout == result.layout and again.layout.pair


def test_a_measured_layout_is_used_cached_and_shown(tmp_path, gemma_path):
    """With DOCQA_CPU_REPACK=auto the self-test measures the layouts (here a stand-in for the child's
    timings) and serves with the plain weights when they win; a restart reads the choice back."""
    from server.engine.layout import Choice, Rates

    def plain_wins(settings, model_path):
        return Choice(True, Rates(60, 44, 450), Rates(90, 44, 440), "plain weights read 1.50x")

    settings = make_settings(tmp_path, gemma_path, selftest=True)
    result = selftest.check(settings, passes, plain_wins)
    if result.layout is None:  # a GPU build, or no repacking kernels: nothing to choose
        pytest.skip("this build has no CPU repacking kernels")
    assert (result.status, result.extra_bufts, result.layout.plain) == ("passed", False, True)
    again = selftest.check(settings, must_not_run)
    assert again.status == "cached" and again.extra_bufts is False and again.layout == result.layout


@pytest.mark.slow
def test_the_layouts_are_measured_on_the_embedded_model(tmp_path, gemma_path):
    """The real measurement: two children load Gemma with each layout and time a read, a decode and a
    verify call; whichever is chosen, the note gives the three ratios."""
    from server.engine import layout

    choice = layout.measured(make_settings(tmp_path, gemma_path, n_ctx=4096), gemma_path)
    assert choice.repacked is not None and choice.unpacked is not None, choice.note
    assert all(r.read > 0 and r.decode_ms > 0 and r.verify_ms > 0 for r in (choice.repacked, choice.unpacked))
    assert "read" in choice.note and "verify" in choice.note
    assert choice.flash_attn in ("on", "off") and len(choice.attention) == 2, choice.note
    assert f"at {layout.DEPTH} tokens without flash attention" in choice.note
