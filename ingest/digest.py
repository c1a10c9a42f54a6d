"""File checksums for the files docqa trusts across restarts, and a per-process record of the files
already checked.

The checksum is xxHash's XXH3 128-bit (https://github.com/Cyan4973/xxHash, the ``xxhash`` package):
it detects accidental damage (a truncated copy, a flipped sector, another file put in its place);
it is no defence against someone who can write the data directory, who could rewrite the manifest
too. Chosen by measured cost on a 1 GiB file read from disk in 8 MiB chunks
(bench/results/snapshot-integrity.md, a loaded 2-core EPYC): xxh3_128 took 0.22 s from the page
cache and 0.85 s from disk (a plain read: 0.18 s and 0.72 s), BLAKE2b-256 2.4 s and 4.0 s.

:func:`verified` hashes a file only when this process has not yet seen it with the same size,
mtime and digest: the first check after a start, and after any change, hash; later ones cost a
``stat``.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

ALGORITHM = "xxh3_128"
CHUNK = 8 * 1024**2


@dataclass(frozen=True, slots=True)
class FileRecord:
    """What a manifest records of a file: its size in bytes and its :data:`ALGORITHM` hex digest."""

    bytes: int
    digest: str

    def as_json(self) -> dict:
        return {"bytes": self.bytes, ALGORITHM: self.digest}

    @classmethod
    def from_json(cls, raw: object) -> FileRecord:
        """Raises ValueError for anything but ``{"bytes": int >= 0, "xxh3_128": 32 hex digits}``."""
        if not isinstance(raw, dict):
            raise ValueError(f"a file record must be an object, got {type(raw).__name__}")
        size, digest = raw.get("bytes"), raw.get(ALGORITHM)
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ValueError(f"bad size {size!r}")
        if not isinstance(digest, str) or len(digest) != 32 or any(c not in "0123456789abcdef" for c in digest):
            raise ValueError(f"bad {ALGORITHM} digest {digest!r}")
        return cls(size, digest)


_seen: dict[str, tuple[int, int, str]] = {}  # path -> (size, mtime_ns, digest) checked by this process
_lock = threading.Lock()


def file_digest(path: Path) -> str:
    """The :data:`ALGORITHM` hex digest of the file at ``path`` (read in :data:`CHUNK` pieces)."""
    import xxhash

    h = xxhash.xxh3_128()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def record(path: Path) -> FileRecord:
    """The :class:`FileRecord` of ``path`` as it is now; remembered as checked (a file this process
    just wrote needs no hashing before its first use)."""
    before = os.stat(path)
    digest = file_digest(path)
    after = os.stat(path)
    if (before.st_size, before.st_mtime_ns) == (after.st_size, after.st_mtime_ns):
        _remember(path, after, digest)
    return FileRecord(after.st_size, digest)


def problem(path: Path, expected: FileRecord) -> str | None:
    """Why the file at ``path`` is not the one ``expected`` describes (missing, another size, another
    digest), or None when it is. The size is checked always; the digest unless this process has
    checked the file with the same size and mtime before (module docstring)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return f"{path.name} is missing"
    if st.st_size != expected.bytes:
        return (
            f"{path.name} is {st.st_size} bytes, its manifest says {expected.bytes} "
            f"({'truncated' if st.st_size < expected.bytes else 'grown'}, or replaced)"
        )
    with _lock:
        seen = _seen.get(str(path))
    if seen == (st.st_size, st.st_mtime_ns, expected.digest):
        return None
    digest = file_digest(path)
    if digest != expected.digest:
        return (
            f"{path.name}'s {ALGORITHM} checksum is {digest}, its manifest says {expected.digest} (damaged or replaced)"
        )
    _remember(path, st, digest)
    return None


def forget(path: Path | None = None) -> None:
    """Forget that ``path`` (or every file) was checked: the next :func:`problem` hashes it."""
    with _lock:
        if path is None:
            _seen.clear()
        else:
            _seen.pop(str(path), None)


def _remember(path: Path, st: os.stat_result, digest: str) -> None:
    with _lock:
        _seen[str(path)] = (st.st_size, st.st_mtime_ns, digest)
