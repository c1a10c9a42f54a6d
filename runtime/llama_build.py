"""The llama-cpp-python source build: unpack the hash-pinned sdist and patch its vendored llama.cpp.

``make llama`` downloads the sdist (``pip download --require-hashes -r runtime/llama-cpp-python.txt``),
runs ``python -m runtime.llama_build DIR`` on the directory it downloaded to, then builds the unpacked
tree with pip. Standard library only: it runs before anything else is installed.

Each patch replaces one exact piece of source with another and says why; a source that holds neither
the old text nor the new one stops the build (the sdist is not the one the patches were written for).

* **AMX tile configuration** (``ggml/src/ggml-cpu/amx/mmq.cpp``). Built on a Xeon with AMX (Sapphire
  Rapids and later), ggml's AMX matmul kernels died with SIGSEGV at the first decode (llama.cpp issue
  20824). The cause, read off the binary GCC 12 made: ``ggml_tile_config_init`` builds the 64-byte
  tile configuration on the stack and hands it to ``_tile_loadconfig``; GCC kept only the stores of
  the first 32 bytes (a zeroed ymm register and the palette id) and dropped the ``rows`` and ``colsb``
  stores, so ``ldtilecfg`` read stack garbage in its reserved bytes and raised #GP. The patch puts the
  configuration in read-only data (a ``constexpr`` object), which no store elimination can touch, and
  asks Linux for tile-data permission on every thread that loads it (``arch_prctl(ARCH_REQ_XCOMP_PERM,
  XFEATURE_XTILEDATA)``: Linux grants it per process, so asking again is harmless, as llama.cpp pull
  request 26954 also does).
"""

from __future__ import annotations

import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

SDIST = "llama_cpp_python-0.3.36"


@dataclass(frozen=True)
class Patch:
    path: str  # relative to the unpacked sdist
    old: str
    new: str


AMX_OLD = """inline void ggml_tile_config_init(void) {
    static thread_local bool done = false;

    if (done) {
        return;
    }

    alignas(64) tile_config_t tc = {};
    tc.palette_id = 1;"""

AMX_OLD_TAIL = """    tc.rows[7] = 16;  tc.colsb[7] = 64;

    _tile_loadconfig(&tc);
    done = true;
}"""

AMX_NEW = """// docqa (runtime/llama_build.py): the tile configuration lives in read-only data. Built on the
// stack, GCC 12 dropped the rows/colsb stores before ldtilecfg, which then raised #GP on stack
// garbage (llama.cpp issue 20824).
static constexpr tile_config_t ggml_make_tile_config() {
    tile_config_t tc = {};
    tc.palette_id = 1;"""

AMX_NEW_TAIL = """    tc.rows[7] = 16;  tc.colsb[7] = 64;
    return tc;
}
alignas(64) static constexpr tile_config_t ggml_amx_tile_config = ggml_make_tile_config();

inline void ggml_tile_config_init(void) {
    static thread_local bool done = false;

    if (done) {
        return;
    }
#if defined(__gnu_linux__)
    // Tile data is granted per process on Linux (ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA =
    // 18); asking on every thread that runs tile instructions costs one system call.
    syscall(SYS_arch_prctl, 0x1023, 18);
#endif
    _tile_loadconfig(&ggml_amx_tile_config);
    done = true;
}"""

MMQ = "vendor/llama.cpp/ggml/src/ggml-cpu/amx/mmq.cpp"
PATCHES = [Patch(MMQ, AMX_OLD, AMX_NEW), Patch(MMQ, AMX_OLD_TAIL, AMX_NEW_TAIL)]


def apply(root: Path, patches: list[Patch] = PATCHES) -> list[str]:
    """Apply ``patches`` under ``root`` (the unpacked sdist); returns what was done, one line each.
    Raises SystemExit naming the file when a patch's old text is not there (and its new text is not
    either: a patch applied twice is a no-op)."""
    done = []
    for p in patches:
        path = root / p.path
        text = path.read_text(encoding="utf-8")
        if p.new in text:
            done.append(f"{p.path}: already patched")
            continue
        if text.count(p.old) != 1:
            raise SystemExit(f"llama_build: {p.path} does not hold the text this patch replaces; is it {SDIST}?")
        path.write_text(text.replace(p.old, p.new), encoding="utf-8")
        done.append(f"{p.path}: patched")
    return done


def unpack(directory: Path) -> Path:
    """Unpack ``directory``'s ``SDIST``.tar.gz there (replacing an earlier tree); returns the tree."""
    return unpack_to(directory / f"{SDIST}.tar.gz", directory)


def unpack_to(tarball: Path, directory: Path) -> Path:
    """Unpack ``tarball`` (the sdist, or bench/device/pack.py's trimmed copy) into ``directory``."""
    with tarfile.open(tarball) as tar:
        tar.extractall(directory, filter="data")
    return directory / SDIST


if __name__ == "__main__":  # python -m runtime.llama_build DIR: unpack DIR/<sdist>.tar.gz and patch it
    tree = unpack(Path(sys.argv[1]))
    for line in apply(tree):
        print(f"llama_build: {line}")  # noqa: T201
