"""What this llama.cpp build can do on this machine: ``llama_print_system_info()`` and what follows from it.

The string lists each registered backend with its features, e.g.
``CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | REPACK = 1 |`` and, in a CUDA build,
``CUDA : ARCHS = 860 | ...``. Features are compile-time flags of the build (ggml-cpu.cpp
``ggml_backend_cpu_get_features``), so they say which kernels exist, not only what the CPU has.

Why it matters: a build with AMX kernels (``AMX_INT8 = 1``: a native build on a Xeon Sapphire
Rapids or later) puts K-quant and Q8_0 weights in an AMX extra buffer. Unpatched, the first
``llama_decode`` there died with SIGSEGV in ``ggml_backend_amx_mul_mat`` (llama.cpp issue 20824):
GCC dropped the stores of the tile configuration. ``make setup`` builds a patched sdist
(runtime/llama_build.py), and the start-up self-test still falls back to ``use_extra_bufts = False``
if a build crashes anyway.
"""

from __future__ import annotations

import functools
import os
import re

import llama_cpp
from llama_cpp import llama_cpp as C


def busy() -> str | None:
    """Why this machine is busy, or None: its 1-minute load average is at least its number of cores
    ("load average 8.2 on 2 cores"), so every step runs slower than measured on it idle (every
    number in an answer's stats, and a calibration taken now). None where the load is unknown."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return None
    cores = os.cpu_count() or 1
    return f"load average {load:.1f} on {cores} cores" if load >= cores else None


def memory_available() -> int | None:
    """Bytes of memory available to a new process now (Linux ``MemAvailable``: free memory plus what
    the page cache can give back); None where /proc/meminfo does not say."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


@functools.cache
def system_info() -> str:
    """``llama_print_system_info()`` of the loaded libllama, one line."""
    return C.llama_print_system_info().decode("utf-8", errors="replace").strip()


def features(info: str | None = None) -> dict[str, dict[str, str]]:
    """Backend -> feature -> value, parsed from :func:`system_info` (or ``info``)."""
    out: dict[str, dict[str, str]] = {}
    backend = None
    for part in (info if info is not None else system_info()).split("|"):
        part = part.strip()
        match = re.match(r"(\S+) : (.*)", part)
        if match:  # "CPU : SSE3 = 1" starts a backend's features
            backend, part = match.group(1), match.group(2)
            out.setdefault(backend, {})
        key, sep, value = part.partition(" = ")
        if backend is not None and sep:
            out[backend][key.strip()] = value.strip()
    return out


def has_amx_kernels(info: str | None = None) -> bool:
    """The build carries ggml's AMX matmul kernels (the AMX_INT8 extra buffer type)."""
    return features(info).get("CPU", {}).get("AMX_INT8") == "1"


def backends(info: str | None = None) -> list[str]:
    """Compiled-in compute backends other than the CPU (``["CUDA"]`` for a CUDA build), in order."""
    return [name for name in features(info) if name != "CPU"]


def build_id() -> str:
    """llama-cpp-python version plus the system info: what a cached start-up check depends on."""
    return f"llama-cpp-python {llama_cpp.__version__}; {system_info()}"


def check_build(cmake_args: str) -> str | None:
    """What is wrong with the installed build given the ``CMAKE_ARGS`` it was built with, or None."""
    wants_cuda = re.search(r"-DGGML_CUDA=(ON|1|TRUE|YES)\b", cmake_args, re.IGNORECASE) is not None
    if wants_cuda and "CUDA" not in backends():
        return (
            "CMAKE_ARGS asked for CUDA (-DGGML_CUDA=on) but the built llama-cpp-python has no CUDA backend; "
            "is the CUDA toolkit (nvcc) installed and on PATH? The build log above says why."
        )
    return None


if __name__ == "__main__":  # `python -m runtime.system [--check-build]`: what make setup prints
    import os
    import sys

    print(f"llama.cpp backends: {', '.join(['CPU', *backends()])}")  # noqa: T201
    print(build_id())  # noqa: T201
    if "--check-build" in sys.argv and (problem := check_build(os.environ.get("CMAKE_ARGS", ""))):
        sys.exit(f"make setup: {problem}")
