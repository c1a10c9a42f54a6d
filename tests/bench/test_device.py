"""bench/device/: the prepared GPU run. What can be checked here: the carried tree keeps what a build
reads, the contexts are the preset's, the random-weight model loads and decodes finite logits, the
expected-speed arithmetic, and (slow) the whole script in its --cpu mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.device import pack, report
from bench.device.measure import context_configs
from testkit.qwen35_shapes import QWEN35_27B, Shape, tensors
from testkit.random_qwen35 import file_bytes, q4_k_m_types, use_more_bits, write_random_qwen35

ROOT = Path(__file__).resolve().parents[2]
LLAMA = "vendor/llama.cpp"


def test_the_carried_tree_keeps_what_the_build_reads():
    keep = [
        "CMakeLists.txt", "llama_cpp/llama_cpp.py", f"{LLAMA}/CMakeLists.txt", f"{LLAMA}/src/llama.cpp",
        f"{LLAMA}/ggml/src/ggml.c", f"{LLAMA}/ggml/src/ggml-cuda/mmq.cu", f"{LLAMA}/ggml/src/ggml-cpu/amx/mmq.cpp",
        f"{LLAMA}/ggml/CMakeLists.txt", f"{LLAMA}/common/common.cpp", f"{LLAMA}/vendor/nlohmann/json.hpp",
    ]  # fmt: skip
    drop = [
        f"{LLAMA}/models/ggml-vocab-qwen2.gguf", f"{LLAMA}/docs/build.md", f"{LLAMA}/tools/server/server.cpp",
        f"{LLAMA}/ggml/src/ggml-vulkan/ggml-vulkan.cpp", f"{LLAMA}/tests/test-backend-ops.cpp",
        "llama_cpp/__pycache__/x.pyc",
    ]  # fmt: skip
    assert [p for p in keep if not pack.kept(p)] == []
    assert [p for p in drop if pack.kept(p)] == []


def test_contexts_are_the_rtx3090_presets_with_the_widest_rollback():
    from server.config.memory import context_config, with_preset
    from server.config.settings import Settings
    from spec.limits import MAX_WINDOW

    target, mtp = context_configs("gpu")
    preset = context_config(with_preset(Settings(preset="rtx3090-27b")), recurrent=True)
    same = ("n_ctx", "n_batch", "n_ubatch", "type_k", "type_v", "flash_attn", "swa_full", "n_seq_max", "kv_unified")
    assert {k: getattr(target, k) for k in same} == {k: getattr(preset, k) for k in same}
    assert target.n_rs_seq == MAX_WINDOW and mtp.mtp and mtp.n_rs_seq == 0


SMALL = Shape(
    "small qwen35", n_embd=256, n_layer=4, n_ff=512, n_head=2, n_head_kv=1, head_dim=128, ssm_conv=4, ssm_state=64,
    ssm_groups=2, ssm_dt_rank=4, n_vocab=1024, context_length=4096, rope_dims=64, rope_sections=(11, 11, 10, 0),
    rope_freq_base=1e6,
)  # fmt: skip


def test_q4_k_m_types_follow_llama_quant():
    types = q4_k_m_types(QWEN35_27B)
    assert types["output.weight"] == "q6_K" and types["token_embd.weight"] == "q4_K"
    assert types["blk.0.attn_qkv.weight"] == "q5_K" and types["blk.0.ssm_conv1d.weight"] == "f32"
    downs = [t.name for t in tensors(QWEN35_27B) if t.name.endswith("ffn_down.weight")]
    assert [types[n] == "q6_K" for n in downs] == [use_more_bits(i, len(downs)) for i in range(len(downs))]
    assert types["blk.64.nextn.eh_proj.weight"] == "q4_K"  # the MTP block is written too
    assert 16.4e9 < file_bytes(QWEN35_27B) < 17.0e9  # the published Q4_K_M file: 16.5 GB


def test_a_random_weight_model_loads_and_decodes_finite_logits(tmp_path):
    from runtime.llama import Model
    from runtime.shape import ModelShape
    from testkit.harness import open_ctx

    path = write_random_qwen35(tmp_path / "small.gguf", SMALL)
    shape = ModelShape.from_gguf(path)
    assert shape.n_layer == 4 and shape.n_layer_nextn == 1 and shape.n_vocab == 1024
    assert shape.file_bytes == file_bytes(SMALL)
    model = Model(path, load_mtp=True)
    try:
        assert model.mtp_loaded and model.is_recurrent
        ctx = open_ctx(model, n_ctx=512, n_batch=64, n_ubatch=64, n_threads=1, n_threads_batch=1, n_rs_seq=4)
        ctx.decode(np.arange(10, 40, dtype=np.int32), 0, outputs="all")
        logits = ctx.logits()
        assert np.isfinite(logits).all() and logits.std() > 0
        ctx.close()
    finally:
        model.close()


def test_expected_speed_at_an_acceptance():
    verify = {1: 10.0, 2: 10.5, 3: 11.0, 4: 11.5, 5: 12.0}
    assert report.expected(verify, 0.0, 0) == pytest.approx(100.0)
    assert report.expected(verify, 1.0, 3) == pytest.approx(4 / 11.5 * 1000)  # every draft accepted
    assert report.expected(verify, 0.5, 2, draft_ms=1.0) == pytest.approx(1.75 / 13.0 * 1000)  # 3 rows + 2 drafts
    assert report.best(verify, 0.9, max_k=4)[0] == 4 and report.best(verify, 0.01)[0] == 0


@pytest.mark.slow
def test_the_device_script_runs_here_in_cpu_mode(tmp_path):
    """bench/device/run.sh --cpu: the carried tree unpacked, patched and configured (with make cuda-check's
    toolkit when there is one), then every measurement on the tiny model; 1.5 to 2.5 minutes on 2 shared cores."""
    env = {**os.environ, "OUT": str(tmp_path / "out"), "PYTHON": sys.executable, "DEVICE_WORK": str(tmp_path / "w")}
    r = subprocess.run(["bash", "bench/device/run.sh", "--cpu"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=900)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    carried = next(line for line in r.stdout.splitlines() if line.startswith("carried size:"))
    assert float(carried.split()[2]) <= 60 and "within" in carried
    assert "already patched" in r.stdout
    res = json.loads((tmp_path / "out" / "result.json").read_text())
    assert res["errors"] == [] and res["skipped"] == []
    assert [p["tokens"] for p in res["prefill"]] == [1024, 4096, 16384]
    assert [s["tokens"] for s in res["snapshots"]] == [4096, 16384] and all(s["load_s"] for s in res["snapshots"])
    assert sorted(int(k) for k in res["verify"]["16384"]) == list(range(1, 18))
    assert res["equality"]["equal"] and res["equality"]["loop_no_drafts_equal"]  # f32: exact
    assert [a["window"] for a in res["accept_all"]] == [1, 2, 3]
    assert all(a["tokens_per_step"] > 1.5 for a in res["accept_all"])
    for row in res["plan"]["rows"]:  # the CPU buffers follow the planner's exact rules (tests/runtime/test_plan.py)
        if row["allocated"] > 2**20:
            assert abs(row["planned"] / row["allocated"] - 1) < 0.10, row
    assert (tmp_path / "out" / "result.md").read_text().startswith("# docqa on")
