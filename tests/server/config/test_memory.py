"""Settings against the memory planner: DOCQA_PRESET fills unset fields (with_preset, which the app
and the server's entry point apply), check_fits refuses what does not fit DOCQA_VRAM_BYTES."""

from __future__ import annotations

import pytest

from runtime.plan import plan
from runtime.presets import preset
from server.config.memory import RS_CHOICES, check_fits, judging_cost, plan_config, with_preset
from server.config.settings import Settings


def test_rtx3090_preset_fills_only_unset_fields():
    s = with_preset(Settings(preset="rtx3090-27b"))
    assert (s.type_k, s.type_v, s.flash_attn) == ("q8_0", "q8_0", "on")
    assert s.vram_bytes == 24 * 1024**3 and s.n_ctx == 139_264 and s.n_seq_max >= 1
    shape = preset("qwen3.6-27b-q4_k_m")
    assert plan(shape, plan_config(s, shape)).device_total <= s.vram_bytes
    # The widest rollback window and the most questions the planner allows: one more does not fit.
    for more in ({"n_seq_max": s.n_seq_max + 1}, {"n_rs_seq": RS_CHOICES[RS_CHOICES.index(s.n_rs_seq) - 1]}):
        assert plan(shape, plan_config(s.model_copy(update=more), shape)).device_total > s.vram_bytes

    s = with_preset(Settings(preset="rtx3090-27b", type_k="q4_0", type_v="q4_0", n_ctx=32768, n_rs_seq=4))
    assert (s.type_k, s.n_ctx, s.n_rs_seq) == ("q4_0", 32768, 4)  # kept
    assert s.n_seq_max > 4  # a short context and few snapshots leave room for many questions

    s = with_preset(Settings(preset="rtx3090-27b", n_rs_seq=16))
    assert s.n_rs_seq == 16 and s.n_ctx < 139_264  # the window kept: the context shrinks instead


def test_preset_and_vram_from_the_environment(monkeypatch):
    monkeypatch.setenv("DOCQA_PRESET", "rtx3090-27b")
    monkeypatch.setenv("DOCQA_VRAM_BYTES", "20GiB")
    monkeypatch.setenv("DOCQA_N_SEQ_MAX", "1")
    s = with_preset(Settings())
    assert s.vram_bytes == 20 * 1024**3 and s.n_seq_max == 1
    assert 0 < s.n_ctx < 139_264  # the largest context that fits 20 GiB


def test_check_fits_names_the_components(tiny_qwen35_path, tmp_path):
    base = dict(model_path=tiny_qwen35_path, data_dir=tmp_path, n_ctx=4096)
    check_fits(Settings(**base), tiny_qwen35_path)  # no budget: no check
    check_fits(Settings(**base, vram_bytes="1GiB"), tiny_qwen35_path)
    with pytest.raises(ValueError) as err:
        check_fits(Settings(**base, vram_bytes="8MiB"), tiny_qwen35_path)
    message = str(err.value)
    assert "needs" in message and "DOCQA_VRAM_BYTES allows 8.0 MiB" in message
    assert "kv " in message and "rs " in message and "compute " in message and "reserve 512.0 MiB" in message


def test_the_judging_context_is_planned_beside_the_model(tiny_qwen35_path, tmp_path, caplog):
    """Quote-first's judging context (server/engine/loading.py ``_judging``) is made only where it fits
    what the model and its contexts leave of DOCQA_VRAM_BYTES; where it does not, a warning, and the
    server still starts (quotes are judged after them)."""
    from runtime.llama import Model
    from server.engine.loading import _judging

    base = dict(model_path=tiny_qwen35_path, data_dir=tmp_path, n_ctx=4096, answer_mode="quote")
    cost, left = judging_cost(Settings(**base), tiny_qwen35_path, 5)
    assert cost > 0 and left is None  # no budget: nothing to fit
    cost, left = judging_cost(Settings(**base, vram_bytes="1GiB"), tiny_qwen35_path, 5)
    assert 0 < cost < left < 1024**3
    tight = Settings(**base, vram_bytes=1024**3 - left + cost // 2)  # the model fits; the judging context not
    check_fits(tight, tiny_qwen35_path)
    assert judging_cost(tight, tiny_qwen35_path, 5) == (cost, cost // 2)
    model = Model(tiny_qwen35_path)
    try:
        assert _judging(tight, model, tiny_qwen35_path) is None
        assert "judged after their quote instead" in caplog.text
        made = _judging(Settings(**base, vram_bytes="1GiB"), model, tiny_qwen35_path)
        assert made is not None
        made.close()
    finally:
        model.close()


def test_server_refuses_to_start_when_the_plan_does_not_fit(server):
    with pytest.raises(RuntimeError, match=r"needs .* of GPU memory .* DOCQA_VRAM_BYTES allows 64\.0 MiB"):
        with server(vram_bytes="64MiB"):
            pass
