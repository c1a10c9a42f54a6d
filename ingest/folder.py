"""The files of a watched folder (server/api/watch.py keeps it in sync): which files count, their state
(size and mtime, the fingerprint that tells a restart what changed), reading one safely, and the order
they are read in.

* **Which files**: regular files whose name ends in one of ingest/formats.py ``SUFFIXES`` (only here
  does a name count: what they are is still told from their bytes), in the folder and its
  sub-folders, except hidden ones (a name starting with ``.``, in the path too) and the lock and temp
  files office programs write (``~$report.docx``, ``.~lock.x.ods#``).
* **Symbolic links**: a link is followed only when it resolves to a file inside the folder; a link out
  of the folder (to ``/etc/passwd``, to another user's home) is never read, and linked directories
  are not entered (``os.walk(followlinks=False)``). A file is opened by its resolved path with
  ``O_NOFOLLOW``, so a file replaced by a link after the check is not followed either.
* **Order** (DOCQA_WATCH_ORDER): ``small`` (the smallest first: most documents ready soonest) or
  ``recent`` (the most recently changed first: what someone is working on).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ingest.formats import SUFFIXES

TEMP_PREFIXES = ("~$", ".~lock")


@dataclass(frozen=True, slots=True)
class FileState:
    """A watched file as ``stat`` saw it: its path as found in the folder (absolute), size in bytes and
    mtime in nanoseconds."""

    path: Path
    size: int
    mtime_ns: int

    @property
    def key(self) -> str:
        """``"<size>:<mtime ns>"``: stored with the document (``source_stat``); a different key means the
        file may have changed and is hashed again."""
        return f"{self.size}:{self.mtime_ns}"


class TooLarge(Exception):
    """The file is larger than the limit given to :func:`read` (``size`` bytes)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"{size} bytes, over the limit of {limit}")
        self.size, self.limit = size, limit


def counts(root: Path, path: Path) -> bool:
    """``path`` (under ``root``) is a file name a watched folder reads: a document's suffix, not hidden,
    not an office program's lock or temp file."""
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        return False
    if not parts or any(p.startswith(".") for p in parts) or parts[-1].startswith(TEMP_PREFIXES):
        return False
    return path.suffix.lower() in SUFFIXES


def inside(root: Path, path: Path) -> Path | None:
    """The resolved path of ``path`` when it (after every link) is a regular file inside ``root``; else
    None (gone, a directory, a link out of the folder)."""
    try:
        real = path.resolve(strict=True)
        real.relative_to(root.resolve(strict=True))
    except (OSError, ValueError, RuntimeError):  # gone, outside, a link loop
        return None
    return real if real.is_file() else None


def state(root: Path, path: Path) -> FileState | None:
    """The state of a watched file, or None when it does not count (:func:`counts`, :func:`inside`)."""
    if not counts(root, path):
        return None
    real = inside(root, path)
    if real is None:
        return None
    try:
        st = real.stat()
    except OSError:
        return None
    return FileState(path, st.st_size, st.st_mtime_ns)


def scan(root: Path, start: Path | None = None) -> list[FileState]:
    """Every file of ``root`` (or of its sub-folder ``start``) that counts, with its state (an
    unreadable sub-folder is skipped)."""
    root = Path(root).absolute()
    out = []
    for directory, dirs, files in os.walk(start or root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            found = state(root, Path(directory) / name)
            if found is not None:
                out.append(found)
    return out


def read(root: Path, path: Path, limit: int) -> tuple[bytes, FileState]:
    """The bytes of a watched file and its state as read (from the open file). Raises TooLarge over
    ``limit`` bytes (before reading them), FileNotFoundError when it is gone or no longer counts,
    OSError when it cannot be read."""
    real = inside(root, path) if counts(root, path) else None
    if real is None:
        raise FileNotFoundError(str(path))
    fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if st.st_size > limit:
            raise TooLarge(st.st_size, limit)
        data = f.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(len(data), limit)
    return data, FileState(path, st.st_size, st.st_mtime_ns)


def ordered(files: Iterable[FileState], how: str) -> list[FileState]:
    """``files`` in the order they are read: ``small`` (by size) or ``recent`` (newest mtime first),
    then by path."""
    if how == "recent":
        return sorted(files, key=lambda f: (-f.mtime_ns, str(f.path)))
    return sorted(files, key=lambda f: (f.size, str(f.path)))


def under(roots: Iterable[Path], path: str) -> Path | None:
    """The watched folder that ``path`` (a stored ``source_path``) is in, or None."""
    p = Path(path)
    return next((r for r in roots if p == r or r in p.parents), None)


def walk_paths(root: Path, path: Path) -> Iterator[FileState]:
    """The states of ``path`` (a file) or of every file under it (a directory moved into the folder)."""
    if path.is_dir() and not path.is_symlink():
        if path == root or counts(root, path / "x.txt"):  # not a hidden directory
            yield from scan(root, path)
        return
    found = state(root, path)
    if found is not None:
        yield found
