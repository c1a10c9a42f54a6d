"""The patched llama-cpp-python build (runtime/llama_build.py): the patches apply once, refuse a source
they were not written for, and on a CPU with AMX the patched kernels decode instead of crashing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runtime.llama_build import AMX_NEW, AMX_NEW_TAIL, AMX_OLD, AMX_OLD_TAIL, MMQ, PATCHES, SDIST, apply
from runtime.system import has_amx_kernels

ROOT = Path(__file__).resolve().parents[2]


def tree(tmp_path: Path, text: str) -> Path:
    path = tmp_path / MMQ
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return tmp_path


def test_patches_apply_once_and_then_are_no_ops(tmp_path):
    root = tree(tmp_path, f"// head\n{AMX_OLD}\n    tc.rows[1] = 8;\n{AMX_OLD_TAIL}\n// tail\n")
    assert apply(root) == [f"{MMQ}: patched"] * 2
    text = (root / MMQ).read_text()
    assert AMX_NEW in text and AMX_NEW_TAIL in text and "_tile_loadconfig(&tc)" not in text
    assert apply(root) == [f"{MMQ}: already patched"] * 2
    assert (root / MMQ).read_text() == text


def test_a_source_the_patches_were_not_written_for_stops_the_build(tmp_path):
    root = tree(tmp_path, "inline void ggml_tile_config_init(void) { /* another version */ }\n")
    with pytest.raises(SystemExit, match=r"does not hold the text this patch replaces; is it llama_cpp_python"):
        apply(root, PATCHES)


def test_the_installed_build_came_from_the_patched_tree():
    """``make setup`` left the unpacked sdist it built in .venv/src: its AMX source is the patched one."""
    built = ROOT / ".venv" / "src" / SDIST / MMQ
    if not built.is_file():
        pytest.skip("this llama-cpp-python was not built by make setup (no .venv/src)")
    text = built.read_text()
    assert AMX_NEW in text and AMX_NEW_TAIL in text


@pytest.mark.skipif(not has_amx_kernels(), reason="this llama.cpp build has no AMX kernels (the CPU has none)")
def test_amx_kernels_decode_without_crashing(gemma_path, qwen_path_if_any):
    """The crash of llama.cpp issue 20824 was a SIGSEGV at the first decode with the AMX buffer type: in
    a child process, a 64-token prefill and a verify-sized decode through it give finite logits."""
    code = (
        "import sys, numpy as np; from pathlib import Path\n"
        "from runtime.llama import Model, Context, ContextConfig\n"
        "m = Model(Path(sys.argv[1]), extra_bufts=True)\n"
        "c = Context(m, ContextConfig(n_ctx=512, n_batch=64, n_ubatch=64, n_threads=2, n_threads_batch=2))\n"
        "ids = m.tokenize('The quick brown fox jumps over the lazy dog. ' * 8, parse_special=False)[:64]\n"
        "c.decode(ids, 0, outputs='last'); c.decode(ids[:17], 64, outputs='all')\n"
        "assert np.isfinite(c.logits()).all(); print('ok')\n"
    )
    for path in filter(None, (gemma_path, qwen_path_if_any)):
        argv = [sys.executable, "-c", code, str(path)]
        r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0 and r.stdout.strip().endswith("ok"), (path.name, r.returncode, r.stderr[-2000:])


@pytest.fixture
def qwen_path_if_any(reader_model):
    """The default reader (all K-quants: the tensors AMX takes) when its parts are installed, else None."""
    try:
        return reader_model("qwen-coder-1.5b")
    except pytest.skip.Exception:
        return None
