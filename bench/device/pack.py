"""What bench/device/run.sh carries to a lent GPU machine: ``.device/`` (ignored by git), and its size.

The device tool copies the working tree (tracked and untracked files git does not ignore) plus the
ignored paths named in ``carry``, at most 64 MiB in all; nothing can be downloaded there. So ``.device``
holds:

* ``llama_cpp_python-0.3.36.tar.gz``: the hash-pinned sdist (runtime/llama-cpp-python.txt), patched by
  runtime/llama_build.py and trimmed to what a CUDA build of its libraries reads: llama.cpp's ``src``,
  ``include``, ``common``, ``vendor``, ``cmake`` and ``ggml`` without the other backends, plus the
  ``llama_cpp`` Python package (76.6 MB as published, most of it vocabularies under ``models/``, docs
  and tools);
* ``whl/``: the wheels of bench/device/wheels.txt, for the device's Python 3.12.

``python -m bench.device.pack``: make ``.device`` (again when the patches or pins changed) and print
the carried size; ``--size``: print it only.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from runtime import llama_build

ROOT = Path(__file__).resolve().parents[2]
DEVICE = ROOT / ".device"
SDIST_PINS = ROOT / "runtime" / "llama-cpp-python.txt"
WHEEL_PINS = Path(__file__).with_name("wheels.txt")
CACHE = ROOT / "bench" / ".build" / "device-src"  # the downloaded sdist (ignored by git, not carried)
LIMIT = 60 * 1024**2  # the bound; the device tool refuses more than 64 MiB
TARBALL = f"{llama_build.SDIST}.tar.gz"
LLAMA = "vendor/llama.cpp"
#: Paths of the sdist a build of its libraries reads (prefixes); everything else is dropped.
KEEP = (
    "CMakeLists.txt", "LICENSE.md", "pyproject.toml", "llama_cpp/",
    f"{LLAMA}/CMakeLists.txt", f"{LLAMA}/LICENSE", f"{LLAMA}/licenses/", f"{LLAMA}/cmake/", f"{LLAMA}/include/",
    f"{LLAMA}/src/", f"{LLAMA}/common/", f"{LLAMA}/vendor/", f"{LLAMA}/ggml/",
)  # fmt: skip
#: ggml backends the device build compiles; the other ggml/src/ggml-* directories are dropped.
BACKENDS = ("ggml-cpu", "ggml-cuda")
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]


def kept(rel: str) -> bool:
    if not any(rel == k or (k.endswith("/") and rel.startswith(k)) for k in KEEP):
        return False
    parts = rel.split("/")
    if rel.startswith(f"{LLAMA}/ggml/src/") and len(parts) > 5 and parts[4].startswith("ggml-"):
        return parts[4] in BACKENDS
    return "/__pycache__/" not in rel


def stamp() -> str:
    h = hashlib.sha256()
    for path in (Path(llama_build.__file__), SDIST_PINS, WHEEL_PINS, Path(__file__)):
        h.update(path.read_bytes())
    return h.hexdigest()


def sdist(pip: list[str]) -> Path:
    """The pinned sdist, downloaded once into :data:`CACHE` (pip checks its hash)."""
    path = CACHE / TARBALL
    if not path.is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        cmd = [*pip, "download", "--no-deps", "--no-binary", ":all:", "--require-hashes", "-r", str(SDIST_PINS)]
        subprocess.run([*cmd, "-d", str(CACHE)], check=True)
    return path


def trimmed(tarball: Path, out: Path) -> tuple[int, int]:
    """Unpack ``tarball``, patch it, write the kept files to ``out`` (tar.gz); returns (files, bytes in)."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = llama_build.unpack_to(tarball, Path(tmp))
        for line in llama_build.apply(tree):
            print(f"llama_build: {line}")
        n = size = 0
        with tarfile.open(out, "w:gz", compresslevel=9) as tar:
            for path in sorted(tree.rglob("*")):
                rel = path.relative_to(tree).as_posix()
                if path.is_file() and not path.is_symlink() and kept(rel):
                    tar.add(path, f"{llama_build.SDIST}/{rel}")
                    n, size = n + 1, size + path.stat().st_size
    return n, size


def wheels(pip: list[str], dest: Path) -> None:
    platforms = [a for p in PLATFORMS for a in ("--platform", p)]
    subprocess.run(
        [*pip, "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
         *platforms, "--require-hashes", "-r", str(WHEEL_PINS), "-d", str(dest)],
        check=True,
    )  # fmt: skip


def pack(pip: list[str]) -> None:
    """Make :data:`DEVICE` unless it is up to date."""
    mark = DEVICE / ".stamp"
    if mark.is_file() and mark.read_text() == stamp():
        return
    shutil.rmtree(DEVICE, ignore_errors=True)
    DEVICE.mkdir()
    n, size = trimmed(sdist(pip), DEVICE / TARBALL)
    print(f"pack: {n} files of the sdist ({size / 2**20:.1f} MiB) -> {TARBALL} ({_mib(DEVICE / TARBALL)})")
    wheels(pip, DEVICE / "whl")
    mark.write_text(stamp())


def _mib(path: Path) -> str:
    return f"{path.stat().st_size / 2**20:.1f} MiB"


def working_tree_bytes() -> int:
    """Bytes of what the device tool copies of the working tree: tracked files and untracked ones git
    does not ignore (git ls-files); where there is no git, every file under the root."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True
        )
    except FileNotFoundError:  # no git on the device machine
        listed = subprocess.CompletedProcess([], 1)
    if listed.returncode != 0:
        skip = {".device", ".git"}
        return sum(p.stat().st_size for p in ROOT.rglob("*") if p.is_file() and not skip & set(p.parts))
    files = {name for name in listed.stdout.decode().split("\0") if name}
    return sum((ROOT / f).stat().st_size for f in files if (ROOT / f).is_file())


def carried_bytes() -> tuple[int, int]:
    """(working tree, .device) bytes."""
    device = sum(p.stat().st_size for p in DEVICE.rglob("*") if p.is_file()) if DEVICE.is_dir() else 0
    return working_tree_bytes(), device


def report() -> int:
    tree, device = carried_bytes()
    total = tree + device
    verdict = "within" if total <= LIMIT else "OVER"
    print(
        f"carried size: {total / 2**20:.1f} MiB (working tree {tree / 2**20:.1f} MiB + .device "
        f"{device / 2**20:.1f} MiB), {verdict} the {LIMIT // 2**20} MiB bound"
    )
    return total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", action="store_true", help="print the carried size only")
    args = p.parse_args()
    if not args.size:
        pack([sys.executable, "-m", "pip"])
    if report() > LIMIT:
        sys.exit(1)


if __name__ == "__main__":
    main()
