"""A CUDA toolkit prefix that CMake's FindCUDAToolkit accepts, assembled from NVIDIA's PyPI wheels.

NVIDIA publishes the CUDA 13 compiler and libraries as wheels that unpack into one tree,
``site-packages/nvidia/cu13`` (``bin/nvcc``, ``nvvm/bin/cicc``, ``include``, ``lib``). The CUDA 12
wheels do not carry a compiler (``nvidia-cuda-nvcc-cu12`` 12.8 and 12.9 hold ``ptxas`` alone), so
``make cuda-check`` pins the CUDA 13.0 wheels (runtime/cuda-toolkit.txt), the release the lent H200
machine's image has. Three things a toolkit installer would make are missing from that tree:

* ``targets/x86_64-linux/{include,lib}``: ``nvcc.profile`` looks for headers there;
* the unversioned library names (``libcudart.so``, ``libcublas.so``, ``libcublasLt.so``) the linker
  and FindCUDAToolkit look for;
* ``lib/stubs/libcuda.so``, the driver library to link against on a machine without a driver: ggml's
  CUDA backend calls the driver API for its virtual-memory pool (``cuMemCreate``...).

:func:`assemble` builds a prefix of its own (the wheels' tree is left as it is) from one or more
trees, the first holding a file winning: on the device machine the image's ``/usr/local/cuda`` and
the ``nvidia/cu13`` tree of its PyTorch. The compiler's programs are copied (``nvcc`` finds its
profile and ``cicc`` from its own location), everything else is linked. :func:`driver_stub` writes
the stub: every ``CUresult`` function ``cuda.h`` declares, each returning CUDA_ERROR_STUB_LIBRARY
(34), with the real library's soname ``libcuda.so.1``. Like NVIDIA's own stub it is named
``libcuda.so`` only, so a binary whose run path holds the stub directory still loads the real
``libcuda.so.1`` where a driver is installed; :func:`stub_runtime_dir` gives a directory with a
``libcuda.so.1`` for loading the build here (then the CUDA runtime reports "CUDA driver is a stub
library" and ggml registers its CUDA backend with no device).

Standard library only: it runs before anything else is installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

#: The hash-pinned CUDA 13.0 wheels (pip install --no-deps --require-hashes --target SITE -r this).
PINS = Path(__file__).with_name("cuda-toolkit.txt")
#: Where pip --target puts them, under SITE.
WHEEL_TREE = Path("nvidia/cu13")
#: Unversioned names the linker and FindCUDAToolkit look for: name -> the versioned file's prefix.
UNVERSIONED = ("libcudart.so", "libcublas.so", "libcublasLt.so", "libnvvm.so", "libcuda.so")
TARGET_DIR = Path("targets/x86_64-linux")
STUB_RC = 34  # CUDA_ERROR_STUB_LIBRARY
_DECL = re.compile(r"\bCUresult\s+(cu[A-Za-z0-9_]+)\s*\(")


@dataclass(frozen=True, slots=True)
class Toolkit:
    root: Path  # CUDAToolkit_ROOT

    @property
    def nvcc(self) -> Path:
        return self.root / "bin" / "nvcc"

    @property
    def lib(self) -> Path:
        return self.root / "lib"

    def version(self) -> str:
        """``nvcc --version``'s release line, e.g. ``Cuda compilation tools, release 13.0, V13.0.88``."""
        out = subprocess.run([self.nvcc, "--version"], capture_output=True, text=True, check=True).stdout
        return next((line.strip() for line in out.splitlines() if "release" in line), out.strip())

    def cmake_args(self, archs: str) -> list[str]:
        """What CMake needs to build ggml's CUDA backend with this toolkit for ``archs`` ("86-real")."""
        return [
            "-DGGML_CUDA=on",
            f"-DCMAKE_CUDA_ARCHITECTURES={archs}",
            f"-DCUDAToolkit_ROOT={self.root}",
            f"-DCMAKE_CUDA_COMPILER={self.nvcc}",
        ]


def _cc() -> str:
    """The C compiler: $CC, else ``cc``, else ``gcc`` (nvcc needs a host compiler anyway)."""
    return os.environ.get("CC") or shutil.which("cc") or "gcc"


def driver_symbols(include: Path) -> list[str]:
    """The driver API's exported names: each ``CUresult`` function ``cuda.h`` declares, after the
    preprocessor (``#define cuMemAlloc cuMemAlloc_v2`` makes the symbol ``cuMemAlloc_v2``)."""
    cc = _cc()
    out = subprocess.run(
        [cc, "-E", "-P", "-I", str(include), str(include / "cuda.h")], capture_output=True, text=True, check=True
    ).stdout
    return sorted(set(_DECL.findall(out)))


def driver_stub(include: Path, out_dir: Path) -> Path:
    """Compile ``out_dir/libcuda.so`` (soname ``libcuda.so.1``): every driver function returns
    CUDA_ERROR_STUB_LIBRARY. Returns its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    names = driver_symbols(include)
    if "cuMemCreate" not in names or "cuGetErrorString" not in names:
        raise SystemExit(f"cuda_toolkit: {include}/cuda.h declares no driver API ({len(names)} functions)")
    for stale in ("libcuda-stub.c", "libcuda.so"):  # a link to another toolkit's stub: replaced, not written through
        if (out_dir / stale).is_symlink():
            (out_dir / stale).unlink()
    source = out_dir / "libcuda-stub.c"
    body = "".join(f"int {name}(void) {{ return {STUB_RC}; }}\n" for name in names)
    source.write_text(f"/* docqa (runtime/cuda_toolkit.py): a link-time stand-in for libcuda.so.1 */\n{body}")
    lib = out_dir / "libcuda.so"
    cc = _cc()
    subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(lib), str(source)], check=True)
    return lib


def _link(src: Path, dst: Path) -> None:
    if dst.is_symlink() or dst.exists():
        return  # an earlier source won
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.symlink_to(src.resolve())


def assemble(sources: list[Path], dest: Path, stub: bool = True) -> Toolkit:
    """Build a toolkit prefix at ``dest`` (replaced) from ``sources`` (toolkit trees, first wins).
    ``stub``: add ``lib/stubs/libcuda.so`` (where no driver library is installed)."""
    sources = [s for s in sources if s.is_dir()]
    if not any((s / "bin" / "nvcc").is_file() for s in sources):
        raise SystemExit(f"cuda_toolkit: no bin/nvcc under {', '.join(map(str, sources)) or 'any source'}")
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "bin").mkdir(parents=True)
    compiler = next(s for s in sources if (s / "bin" / "nvcc").is_file())
    # nvcc reads nvcc.profile beside itself and runs cicc from ../nvvm/bin: copy the compiler's programs.
    for item in (compiler / "bin").iterdir():
        target = dest / "bin" / item.name
        if item.is_dir():
            shutil.copytree(item, target, symlinks=False)
        else:
            shutil.copy2(item, target)
    for source in sources:
        for sub in ("include", "lib", "lib64", "nvvm"):
            root = source / sub
            if not root.is_dir():
                continue
            for path in root.rglob("*"):
                if path.is_file():
                    rel = path.relative_to(root)
                    _link(path, dest / ("lib" if sub == "lib64" else sub) / rel)
    lib = dest / "lib"
    for name in UNVERSIONED:
        versioned = sorted(p for p in lib.glob(name + ".*") if p.name[len(name) + 1 :].split(".")[0].isdigit())
        if versioned and not (lib / name).exists():
            (lib / name).symlink_to(versioned[0].name)
    target = dest / TARGET_DIR
    target.mkdir(parents=True)
    (target / "include").symlink_to(Path("../../include"))
    (target / "lib").symlink_to(Path("../../lib"))
    if stub:
        driver_stub(dest / "include", lib / "stubs")
    return Toolkit(dest)


def installed_sources() -> list[Path]:
    """Toolkit trees installed on this machine: the one holding the ``nvcc`` on PATH (or CUDA_HOME, or
    /usr/local/cuda), then each ``nvidia/cu13`` tree of this Python's packages (PyTorch's CUDA wheels:
    cuBLAS and the runtime with their headers)."""
    out: list[Path] = []
    nvcc = shutil.which("nvcc")
    for root in (Path(nvcc).resolve().parent.parent if nvcc else None, os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root is not None and (Path(root) / "bin" / "nvcc").is_file() and Path(root).resolve() not in out:
            out.append(Path(root).resolve())
    try:
        import nvidia  # a namespace package of NVIDIA's wheels

        out += [Path(p) / "cu13" for p in nvidia.__path__ if (Path(p) / "cu13").is_dir()]
    except ImportError:
        pass
    return out


def stub_runtime_dir(toolkit: Toolkit, dest: Path) -> Path:
    """A directory holding ``libcuda.so.1`` -> the stub, for LD_LIBRARY_PATH on a machine without a
    driver (the stub directory itself holds only ``libcuda.so``, as NVIDIA's does)."""
    dest.mkdir(parents=True, exist_ok=True)
    link = dest / "libcuda.so.1"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to((toolkit.lib / "stubs" / "libcuda.so").resolve())
    return dest


if __name__ == "__main__":  # python -m runtime.cuda_toolkit DEST [SOURCE...]: assemble, print nvcc's version
    sources = [Path(p) for p in sys.argv[2:]] or installed_sources()
    kit = assemble(sources, Path(sys.argv[1]))
    print(f"cuda_toolkit: {kit.root} from {', '.join(map(str, sources))}: {kit.version()}")  # noqa: T201
