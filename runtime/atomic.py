"""Crash-safe file writes: temp file, fsync, rename (POSIX rename is atomic within a directory).

Every file docqa writes and later trusts goes through here: snapshots and their manifests, the
document store's files, the calibration table, the self-test table and the embedded model copy. A
reader sees the old file or the new one, never a mix; a failed write (ENOSPC, a crash) leaves at
most a ``.*.tmp`` file, which the writer removes when it can.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TMP_SUFFIX = ".tmp"
_writes = itertools.count()  # next() on a count is atomic in CPython: one number per write


def temp_path(path: Path) -> Path:
    """The temp file a write of ``path`` goes through: hidden, next to it (same filesystem), and
    unique per write: ``.<name>.<pid>-<n>.tmp``, the writing process's id and a number no other
    write of that process gets. Two processes, or two threads of one (issue 27: two reingests of
    one document both wrote ``.text.json.<pid>.tmp``, and one renamed the other's half-written file
    away), never share one; the last rename wins, whole."""
    return path.with_name(f".{path.name}.{os.getpid()}-{next(_writes)}{TMP_SUFFIX}")


def temp_owner(tmp: Path) -> int | None:
    """The id of the process that made the temp file ``tmp`` (a :func:`temp_path`, or the
    ``.<name>.<pid>.tmp`` of earlier versions), or None when its name is no temp name."""
    if not tmp.name.endswith(TMP_SUFFIX):
        return None
    writer = tmp.name[: -len(TMP_SUFFIX)].rsplit(".", 1)[-1].split("-", 1)[0]
    return int(writer) if writer.isdigit() and tmp.name.startswith(".") else None


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """Yield a temp path to write ``path``'s new content to; on a normal exit fsync it and rename it
    over ``path``, on an exception remove it and re-raise."""
    tmp = temp_path(path)
    try:
        yield tmp
        with tmp.open("rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``."""
    with replacing(path) as tmp:
        tmp.write_bytes(data)


def fsync_dir(directory: Path) -> None:
    """Make the renames in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
