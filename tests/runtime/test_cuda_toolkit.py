"""make cuda-check's pieces that run without NVIDIA's wheels: the toolkit prefix assembled from trees laid
out as the wheels lay them (runtime/cuda_toolkit.py), the stub driver library, and the verdict on what a
CUDA build registers (runtime/cuda_check.py). The build itself is `make cuda-check` (bench/results/cuda-build.md)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from runtime.cuda_check import verdict
from runtime.cuda_toolkit import assemble, driver_symbols, stub_runtime_dir

CUDA_H = """typedef int CUresult;
typedef int CUdevice;
#define cuMemAlloc cuMemAlloc_v2
CUresult cuInit(unsigned int Flags);
CUresult cuDeviceGet(CUdevice *device, int ordinal);
CUresult cuMemAlloc(void **p, unsigned long n);
CUresult cuMemCreate(void *h, unsigned long size, const void *prop, unsigned long long flags);
CUresult cuGetErrorString(CUresult error, const char **pStr);
const char *notADriverFunction(void);
"""


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if name.startswith("bin/"):
            path.chmod(0o755)
    return root


@pytest.fixture
def sources(tmp_path):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler for the stub driver")
    compiler = tree(tmp_path / "cu13", {
        "bin/nvcc": "#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n",
        "bin/nvcc.profile": "TOP = $(_HERE_)/..\n",
        "nvvm/bin/cicc": "", "include/cuda.h": CUDA_H, "include/cuda_runtime.h": "// first\n",
        "lib/libcudart.so.13": "", "lib/libnvvm.so.4": "",
    })  # fmt: skip
    libraries = tree(tmp_path / "torch-cu13", {
        "include/cublas_v2.h": "", "include/cuda_runtime.h": "// second\n", "lib/libcublas.so.13": "",
        "lib/libcublasLt.so.13": "",
    })  # fmt: skip
    return [compiler, libraries]


def test_a_prefix_findcudatoolkit_accepts(sources, tmp_path):
    kit = assemble(sources, tmp_path / "kit")
    assert kit.nvcc.is_file() and not kit.nvcc.is_symlink()  # nvcc finds its profile beside itself
    assert (kit.root / "bin" / "nvcc.profile").is_file() and (kit.root / "nvvm" / "bin" / "cicc").exists()
    assert kit.version() == "Cuda compilation tools, release 13.0, V13.0.88"
    assert (kit.root / "include" / "cuda_runtime.h").read_text() == "// first\n"  # the first tree wins
    assert (kit.root / "include" / "cublas_v2.h").exists()
    for name, target in (("libcudart.so", "libcudart.so.13"), ("libcublas.so", "libcublas.so.13"),
                         ("libcublasLt.so", "libcublasLt.so.13")):  # fmt: skip
        assert (kit.lib / name).is_symlink() and (kit.lib / name).readlink().name == target
    assert (kit.root / "targets/x86_64-linux/include/cuda.h").exists()  # where nvcc.profile looks
    assert "-DCUDAToolkit_ROOT=" + str(kit.root) in kit.cmake_args("86-real")
    assert assemble(sources, tmp_path / "kit").root == kit.root  # again: replaced, not merged


def test_the_stub_driver_exports_the_driver_api_and_fails_every_call(sources, tmp_path):
    assert driver_symbols(sources[0] / "include") == ["cuDeviceGet", "cuGetErrorString", "cuInit", "cuMemAlloc_v2",
                                                      "cuMemCreate"]  # fmt: skip
    kit = assemble(sources, tmp_path / "kit")
    stub = kit.lib / "stubs" / "libcuda.so"
    assert [p.name for p in stub.parent.iterdir() if p.suffix != ".c"] == ["libcuda.so"]  # no libcuda.so.1 there
    dynamic = subprocess.run(["readelf", "-d", "--dyn-syms", str(stub)], capture_output=True, text=True).stdout
    assert "Library soname: [libcuda.so.1]" in dynamic and "cuMemAlloc_v2" in dynamic
    import ctypes

    lib = ctypes.CDLL(str(stub))
    assert lib.cuInit(0) == 34  # CUDA_ERROR_STUB_LIBRARY, as NVIDIA's stub answers
    assert (stub_runtime_dir(kit, tmp_path / "rt") / "libcuda.so.1").resolve() == stub.resolve()


def test_no_compiler_no_toolkit(tmp_path):
    with pytest.raises(SystemExit, match="no bin/nvcc"):
        assemble([tree(tmp_path / "libs", {"include/cublas_v2.h": ""})], tmp_path / "kit")


def found(registry: dict[str, int], archs: str | None, offload: bool) -> dict:
    return {"registry": registry, "cuda_archs": archs, "gpu_offload": offload}


STUB = "ggml_cuda_init: failed to initialize CUDA: CUDA driver is a stub library\n"


def test_verdict_on_what_a_cuda_build_registers():
    ok, lines = verdict(found({"CPU": 1, "CUDA": 0}, "860", False), "86", STUB)
    assert ok and "CUDA driver is a stub library" in lines[-1]
    assert verdict(found({"CPU": 1, "CUDA": 1}, "900", True), "90", "")[0]  # a GPU: it must offload
    assert not verdict(found({"CPU": 1, "CUDA": 1}, "900", False), "90", "")[0]
    assert not verdict(found({"CPU": 1}, None, False), "86", STUB)[0]  # no CUDA backend at all
    assert not verdict(found({"CPU": 1, "CUDA": 0}, "890", False), "86", STUB)[0]  # another architecture
    assert not verdict(found({"CPU": 1, "CUDA": 0}, "860", False), "86", "")[0]  # the runtime never reached a driver


def test_the_record_names_the_slowest_steps_and_the_load(tmp_path):
    from runtime import cuda_check

    build = tmp_path / "build"
    build.mkdir()
    (build / ".ninja_log").write_text(
        "# ninja log v7\n0\t9000\t1\tggml-cuda.dir/mmq.cu.o\tx\n0\t2000\t1\tggml-cuda.dir/acc.cu.o\tx\n"
        "100\t400100\t1\tggml-cuda.dir/fattn-mma.cu.o\tx\n"
    )
    assert cuda_check.slowest(build, 2) == [("fattn-mma.cu.o", 400.0), ("mmq.cu.o", 9.0)]
    result = {
        "ok": True, "nvcc": "Cuda compilation tools, release 13.0, V13.0.88", "arch": "sm_86", "jobs": 2,
        "total_s": 5000, "build": {"wall_s": 4000, "cpu_s": 7000, "load_mean": 3.5, "load_max": 9.1,
                                    "slowest": cuda_check.slowest(build, 2)},
    }  # fmt: skip
    cuda_check.record(
        tmp_path / "cuda-build.md", result, ["ggml's backend registry: CPU (1 devices), CUDA (0 devices)"]
    )
    text = (tmp_path / "cuda-build.md").read_text()
    assert ": passed" in text and "V13.0.88" in text and "`CMAKE_CUDA_ARCHITECTURES=86-real`" in text
    assert "4000 s wall, 7000 s CPU" in text and "3.5 on average, 9.1 at most" in text
    assert "fattn-mma.cu.o 400 s" in text and "CUDA (0 devices)" in text
