"""``make cuda-check``: build docqa's patched llama.cpp with CUDA on a machine without a GPU, and check
that the result carries the CUDA backend.

Everything lives under one directory of its own (``.cuda/``, ignored by git), never in the serving
virtualenv:

1. ``venv/``: a virtualenv that only builds and holds the CUDA llama-cpp-python;
2. ``site/`` and ``toolkit/``: the hash-pinned CUDA 13.0 wheels (runtime/cuda-toolkit.txt) and the
   toolkit prefix made of them (runtime/cuda_toolkit.py, with a stub ``libcuda.so``);
3. ``src/``: the hash-pinned llama-cpp-python sdist, unpacked and patched by runtime/llama_build.py,
   as ``make setup`` does;
4. ``build-sm<ARCH>/``: the build, kept so that a second run only redoes what changed. pip builds the
   wheel as ``make setup`` does (scikit-build-core, ``CMAKE_ARGS``), for one architecture
   (``86-real`` for an RTX 3090 by default), with ggml's default flash-attention types
   (``GGML_CUDA_FA_QUANTS``: q4_0, q8_0, f16, bf16 pairs) and everything else as upstream sets it;
5. the check, in the new virtualenv with the stub as ``libcuda.so.1``: ggml's backend registry
   lists CUDA, ``llama_print_system_info`` names the architecture, and the CUDA runtime, loaded
   through the stub, reports that the driver is a stub library. So the whole chain loads and calls
   into the driver; with no driver and no GPU the backend has no device, and
   ``llama_supports_gpu_offload`` (true only when some backend has a GPU device, src/llama.cpp) is
   false here. The same :func:`inspect` on a machine with a GPU (bench/device/run.sh) must find a
   device and offload.

``python -m runtime.cuda_check [--arch 86] [--dir .cuda] [--jobs 2] [--record FILE]``; ``--record``
appends the result to a markdown file (bench/results/cuda-build.md).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from runtime import cuda_toolkit, llama_build

ROOT = Path(__file__).resolve().parent.parent
SDIST_PINS = ROOT / "runtime" / "llama-cpp-python.txt"
PY_DEPS = ("numpy", "typing-extensions", "diskcache", "jinja2")  # llama-cpp-python's own requirements


def run(cmd: list, **kw) -> subprocess.CompletedProcess:
    print("+", " ".join(map(str, cmd)), flush=True)  # noqa: T201
    return subprocess.run([str(c) for c in cmd], check=True, **kw)


def pins_stamp(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def toolkit(base: Path, pip: Path) -> cuda_toolkit.Toolkit:
    """Install the pinned wheels (once per version of the pins) and assemble the toolkit prefix."""
    site, stamp = base / "site", base / "site" / ".docqa-pins"
    if not stamp.is_file() or stamp.read_text(encoding="utf-8") != pins_stamp(cuda_toolkit.PINS):
        shutil.rmtree(site, ignore_errors=True)
        run([pip, "install", "--no-deps", "--require-hashes", "--target", site, "-r", cuda_toolkit.PINS])
        stamp.write_text(pins_stamp(cuda_toolkit.PINS), encoding="utf-8")
    return cuda_toolkit.assemble([site / cuda_toolkit.WHEEL_TREE], base / "toolkit")


def source(base: Path, pip: Path) -> Path:
    """The pinned sdist, unpacked afresh and patched (runtime/llama_build.py)."""
    src = base / "src"
    if not (src / f"{llama_build.SDIST}.tar.gz").is_file():
        src.mkdir(parents=True, exist_ok=True)
        run([pip, "download", "--no-deps", "--no-binary", ":all:", "--require-hashes", "-r", SDIST_PINS, "-d", src])
    shutil.rmtree(src / llama_build.SDIST, ignore_errors=True)
    tree = llama_build.unpack(src)
    for line in llama_build.apply(tree):
        print(f"llama_build: {line}")  # noqa: T201
    return tree


class LoadSampler(threading.Thread):
    """The 1-minute load average every ``every`` seconds while the build runs: on a shared machine the
    wall time says little without it."""

    def __init__(self, every: float = 30.0) -> None:
        super().__init__(daemon=True)
        self.every, self.samples, self.stop = every, [os.getloadavg()[0]], threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.every):
            self.samples.append(os.getloadavg()[0])


def slowest(build_dir: Path, n: int = 3) -> list[tuple[str, float]]:
    """The ``n`` longest compile steps of the build (ninja's log: wall seconds each)."""
    steps = {}
    log = build_dir / ".ninja_log"
    for line in log.read_text().splitlines()[1:] if log.is_file() else []:
        start, end, _, target, *_ = line.split("\t")
        steps[target] = (int(end) - int(start)) / 1000
    return sorted(((Path(t).name, s) for t, s in steps.items()), key=lambda ts: -ts[1])[:n]


def build(base: Path, pip: Path, tree: Path, kit: cuda_toolkit.Toolkit, arch: str, jobs: int) -> tuple[Path, dict]:
    """``pip wheel`` the patched tree with CUDA for ``arch``; returns the wheel and what the build took:
    wall and CPU seconds (every process it ran), the load average while it ran, its slowest steps."""
    dist = base / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    cmake_args = " ".join(kit.cmake_args(f"{arch}-real"))
    env = {
        **os.environ,
        "CMAKE_ARGS": cmake_args,
        "CMAKE_BUILD_PARALLEL_LEVEL": str(jobs),
        "PATH": f"{kit.root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    print(f"building llama-cpp-python with CUDA for sm_{arch} on {jobs} jobs: CMAKE_ARGS='{cmake_args}'")  # noqa: T201
    build_dir = base / f"build-sm{arch}"
    sampler = LoadSampler()
    sampler.start()
    t0, r0 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        run([pip, "wheel", "--no-deps", "--no-cache-dir", "-w", dist, f"--config-settings=build-dir={build_dir}", tree],
            env=env)  # fmt: skip
    finally:
        sampler.stop.set()
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    took = {
        "wall_s": round(time.monotonic() - t0),
        "cpu_s": round(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime),
        "load_mean": round(statistics.mean(sampler.samples), 2),
        "load_max": round(max(sampler.samples), 2),
        "slowest": slowest(build_dir),
    }
    [wheel] = dist.glob("llama_cpp_python-*.whl")
    return wheel, took


def library_dir() -> Path:
    """The directory the loaded llama_cpp took its libraries from (LLAMA_CPP_LIB_PATH or its own lib/)."""
    import llama_cpp.llama_cpp as C

    return Path(C._lib._name).resolve().parent


def inspect() -> dict:
    """What the llama.cpp build this process loaded offers: ggml's registered backends with their
    device counts, the system info, and ``llama_supports_gpu_offload``. Imports llama_cpp."""
    import llama_cpp.llama_cpp as C

    ggml = ctypes.CDLL(str(library_dir() / "libggml.so"))
    ggml.ggml_backend_reg_count.restype = ctypes.c_size_t
    ggml.ggml_backend_reg_get.restype = ctypes.c_void_p
    ggml.ggml_backend_reg_get.argtypes = [ctypes.c_size_t]
    ggml.ggml_backend_reg_name.restype = ctypes.c_char_p
    ggml.ggml_backend_reg_name.argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_reg_dev_count.restype = ctypes.c_size_t
    ggml.ggml_backend_reg_dev_count.argtypes = [ctypes.c_void_p]
    registry = {}
    for i in range(ggml.ggml_backend_reg_count()):
        reg = ggml.ggml_backend_reg_get(i)
        registry[ggml.ggml_backend_reg_name(reg).decode()] = int(ggml.ggml_backend_reg_dev_count(reg))
    info = C.llama_print_system_info().decode("utf-8", errors="replace").strip()
    archs = re.search(r"CUDA : ARCHS = ([0-9,]+)", info)
    return {
        "registry": registry,
        "cuda_archs": archs.group(1) if archs else None,
        "gpu_offload": bool(C.llama_supports_gpu_offload()),
        "system_info": info,
        "library_dir": str(library_dir()),
    }


def verdict(found: dict, arch: str, stderr: str) -> tuple[bool, list[str]]:
    """Whether ``found`` (:func:`inspect` of a CUDA build for ``arch``) is right; lines that say why."""
    lines, ok = [], True
    devices = found["registry"].get("CUDA")
    if devices is None:
        return False, [f"ggml's backend registry has no CUDA backend: {sorted(found['registry'])}"]
    lines.append(f"ggml's backend registry: {', '.join(f'{k} ({v} devices)' for k, v in found['registry'].items())}")
    if found["cuda_archs"] != f"{arch}0":
        ok = False
    lines.append(f"llama_print_system_info: CUDA ARCHS = {found['cuda_archs']} (built for sm_{arch})")
    why = re.search(r"failed to initialize CUDA: (.+)", stderr)
    lines.append(f"llama_supports_gpu_offload: {found['gpu_offload']}")
    if devices:
        ok = ok and found["gpu_offload"]
    else:
        # No GPU: the CUDA runtime must have loaded and reached the (stub) driver, and said so.
        ok = ok and not found["gpu_offload"] and why is not None
        lines.append(f"no CUDA device: the CUDA runtime says '{why.group(1) if why else '?'}'")
    return ok, lines


def main() -> None:
    p = argparse.ArgumentParser(description="Build docqa's patched llama.cpp with CUDA and check the result.")
    p.add_argument("--arch", default="86", help="one CUDA architecture: 86 (RTX 30xx), 89, 90...")
    p.add_argument("--dir", type=Path, default=ROOT / ".cuda")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--record", type=Path, help="append the result to this markdown file")
    p.add_argument("--inspect", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.inspect:  # the child: run in the CUDA virtualenv
        print(json.dumps(inspect()))  # noqa: T201
        return
    base = args.dir.resolve()
    t_start = time.monotonic()
    venv = base / "venv"
    if not (venv / "bin" / "pip").is_file():
        run([sys.executable, "-m", "venv", venv])
    pip = venv / "bin" / "pip"
    kit = toolkit(base, pip)
    nvcc = kit.version()
    print(f"nvcc: {nvcc}")  # noqa: T201
    tree = source(base, pip)
    wheel, took = build(base, pip, tree, kit, args.arch, args.jobs)
    run([pip, "install", "--quiet", *PY_DEPS])
    run([pip, "install", "--quiet", "--no-deps", "--force-reinstall", wheel])
    stub_dir = cuda_toolkit.stub_runtime_dir(kit, base / "stub-driver")
    env = {**os.environ, "LD_LIBRARY_PATH": f"{kit.lib}{os.pathsep}{stub_dir}", "PYTHONPATH": str(ROOT)}
    env.pop("LLAMA_CPP_LIB_PATH", None)
    child = subprocess.run(
        [venv / "bin" / "python", "-m", "runtime.cuda_check", "--inspect"], cwd=base, env=env, capture_output=True,
        text=True,
    )  # fmt: skip
    if child.returncode != 0:
        sys.exit(f"cuda-check: loading the CUDA build failed (exit {child.returncode}):\n{child.stderr[-3000:]}")
    found = json.loads(child.stdout.strip().splitlines()[-1])
    ok, lines = verdict(found, args.arch, child.stderr)
    result = {
        "nvcc": nvcc,
        "arch": f"sm_{args.arch}",
        "build": took,
        "total_s": round(time.monotonic() - t_start),
        "jobs": args.jobs,
        "wheel": wheel.name,
        "ok": ok,
        **found,
    }
    (base / f"result-sm{args.arch}.json").write_text(json.dumps(result, indent=1))
    print("\n".join(["cuda-check:", *(f"  {line}" for line in lines)]))  # noqa: T201
    print(f"  built in {took['wall_s']} s wall, {took['cpu_s']} s CPU on {args.jobs} jobs ({nvcc})")  # noqa: T201
    if args.record:
        record(args.record, result, lines)
    if not ok:
        sys.exit("cuda-check: the CUDA build is not what was asked for (see above)")


def record(path: Path, result: dict, lines: list[str]) -> None:
    """Append one result to ``path``: commit, nvcc, architecture, wall time, load, what the check saw."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    b = result["build"]
    slow = ", ".join(f"{name} {s:.0f} s" for name, s in b["slowest"])
    with path.open("a", encoding="utf-8") as f:
        f.write(
            f"\n## {time.strftime('%Y-%m-%d')}, commit {commit.stdout.strip() or '?'}: "
            f"{'passed' if result['ok'] else 'FAILED'}\n\n"
            f"* nvcc: {result['nvcc']} (runtime/cuda-toolkit.txt)\n"
            f"* architecture: {result['arch']} (`CMAKE_CUDA_ARCHITECTURES={result['arch'][3:]}-real`)\n"
            f"* build: {b['wall_s']} s wall, {b['cpu_s']} s CPU (every process it ran) on {result['jobs']} jobs, "
            f"{cpu}, {os.cpu_count()} cores, 1-minute load average during it {b['load_mean']} on average, "
            f"{b['load_max']} at most (the build runs at `nice 15` beside other work); slowest steps: {slow}\n"
            f"* whole check: {result['total_s']} s (downloads, toolkit, build, check)\n"
            + "".join(f"* {line}\n" for line in lines)
        )


if __name__ == "__main__":
    main()
