"""`docqa plan`: the memory breakdown of a GGUF file or a preset, and what fits a VRAM budget."""

from __future__ import annotations

from click.testing import CliRunner

from server.tools.cli import main


def test_plan_a_preset_on_a_24_gib_card():
    args = ["plan", "--vram", "24GiB", "--preset", "qwen3.6-27b-q4_k_m", "--type-k", "q8_0", "--type-v", "q8_0"]
    r = CliRunner().invoke(main, [*args, "--n-ctx", "139264"])
    assert r.exit_code == 0, r.output
    assert "n_ctx 139,264" in r.output and "K q8_0 / V q8_0" in r.output
    assert "| kv           |   4.52 GiB |" in r.output  # notes §7: 34 KiB/token x 136 Ki tokens
    assert "| rs           |   2.48 GiB |" in r.output  # (1 + 16) x 149.6 MiB
    assert "Budget 24.00 GiB: fits" in r.output
    assert "Largest n_seq_max at n_ctx 139,264: 1" in r.output
    # Without --n-ctx the plan is made at the largest context that fits.
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    largest = r.output.split("Largest n_ctx at n_seq_max 1: ")[1].split()[0]
    assert f"n_ctx {largest} " in r.output


def test_plan_a_gguf_file(tiny_qwen35_path):
    r = CliRunner().invoke(
        main, ["plan", "--vram", "64MiB", "--n-ctx", "4096", "--reserve", "0", str(tiny_qwen35_path)]
    )
    assert r.exit_code == 0, r.output
    assert "docqa-tiny-qwen35" in r.output and "n_rs_seq 16" in r.output and "MTP on" in r.output
    for row in ("weights", "kv", "rs", "mtp_kv", "compute", "mtp_compute"):
        assert f"| {row} " in r.output
    r = CliRunner().invoke(main, ["plan", "--no-mtp", "--n-rs-seq", "0", str(tiny_qwen35_path)])
    assert r.exit_code == 0 and "MTP off" in r.output and "mtp_kv" not in r.output and "Budget" not in r.output


def test_plan_refuses_bad_input(tiny_qwen35_path):
    r = CliRunner().invoke(main, ["plan", "--vram", "24GiB"])
    assert r.exit_code == 2 and "either MODEL.gguf or --preset" in r.output
    r = CliRunner().invoke(main, ["plan", "--vram", "lots", "--preset", "qwen3.6-27b-q4_k_m"])
    assert r.exit_code == 1 and "cannot read a size" in r.output
    r = CliRunner().invoke(main, ["plan", "--preset", "nope"])
    assert r.exit_code == 1 and "unknown model preset" in r.output
    r = CliRunner().invoke(main, ["plan", "--type-v", "q8_0", "--no-flash-attn", str(tiny_qwen35_path)])
    assert r.exit_code == 1 and "flash attention" in r.output


def test_plan_refuses_a_file_that_is_no_gguf_and_a_zero_context(tmp_path):
    """Issue 27: /dev/zero printed a traceback and --n-ctx 0 was accepted."""
    from click.testing import CliRunner

    from server.tools.cli import main

    runner = CliRunner()
    zero = runner.invoke(main, ["plan", "/dev/zero"])
    assert zero.exit_code != 0 and "not a GGUF model file" in zero.output and "Traceback" not in zero.output
    noctx = runner.invoke(main, ["plan", "--preset", "qwen3.6-27b-q4_k_m", "--n-ctx", "0"])
    assert noctx.exit_code == 2 and "--n-ctx" in noctx.output
