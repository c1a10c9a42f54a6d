"""The files of a watched folder (server/service/watch.py keeps it in sync): which files count, their state
(size and mtime, the fingerprint that tells a restart what changed), reading one without ever leaving
the folder, whether the folder is there at all, and the order files are read in.

* **Which files**: regular files whose name ends in one of ingest/formats.py ``suffixes()`` (only here
  does a name count: what they are is still told from their bytes), in the folder and its
  sub-folders, except hidden ones (a name starting with ``.``, in the path too) and the lock and temp
  files office programs write (``~$report.docx``, ``.~lock.x.ods#``).
* **Nothing outside the folder, by construction**: a path is opened one component at a time, each
  relative to the directory descriptor of the one before, starting from the watched folder's own
  (``openat`` with ``O_NOFOLLOW``; directories with ``O_DIRECTORY``), so a symbolic link anywhere on
  the path is refused, never followed: a sub-folder swapped for a link to ``/etc`` between a scan and
  a read makes the read fail, not leave the folder. No path is ever resolved first and opened later.
  A read checks that the file it opened is the regular file the scan listed (device and inode: a
  file replaced meanwhile is :class:`Changed`, read at the next change or scan).
* **Symbolic links are never followed**, to a file inside the folder or out of it, and linked
  directories are not entered; the watched folder itself may be a link (DOCQA_WATCH names it).
* **Hard links are refused** (:class:`HardLinked`, a failed document that says so): a file with more
  than one name (``st_nlink > 1``) may have its other name outside the folder, and nothing tells
  where, so its bytes are not read; a copy is.
* **Names that are not UTF-8** (bytes a Latin-1 system wrote) cannot be stored or shown as a path:
  :func:`scan` skips them and lists them in :attr:`Scan.bad_names` (surrogate-escaped, as Python
  decodes them), and the caller reports each once.
* **Whether the folder is there** (:func:`unavailable`): gone (renamed, moved, deleted), not a
  folder, unreadable (permissions, a dead network share), or suddenly empty where its documents'
  files were (an unmounted share leaves its empty mount point). The caller then keeps its documents.
* **Order** (DOCQA_WATCH_ORDER): ``small`` (the smallest first: most documents ready soonest) or
  ``recent`` (the most recently changed first: what someone is working on).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ingest.formats import suffixes

TEMP_PREFIXES = ("~$", ".~lock")
MAX_DEPTH = 64  # sub-folders deeper than this are not entered (each level holds a descriptor open)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC  # NONBLOCK: a FIFO swapped in does not hang
#: What opening a component gives when the path names no file of the folder: gone, or a link refused.
_NOT_THERE = {errno.ENOENT, errno.ELOOP, errno.ENOTDIR, errno.ENXIO}


@dataclass(frozen=True, slots=True)
class FileState:
    """A watched file as ``stat`` saw it (without following links): its path as found in the folder
    (absolute), size in bytes, mtime in nanoseconds, and its device, inode and number of names."""

    path: Path
    size: int
    mtime_ns: int
    dev: int = 0
    ino: int = 0
    links: int = 1

    @property
    def key(self) -> str:
        """``"<size>:<mtime ns>"``: stored with the document (``source_stat``); a different key means the
        file may have changed and is hashed again."""
        return f"{self.size}:{self.mtime_ns}"


@dataclass(slots=True)
class Scan:
    """What :func:`scan` found: the files that count, the directories it could not list (their files
    are unknown, not gone), and the paths skipped for a name that is not UTF-8."""

    files: list[FileState] = field(default_factory=list)
    unreadable: list[Path] = field(default_factory=list)
    bad_names: list[str] = field(default_factory=list)


class TooLarge(Exception):
    """The file is larger than the limit given to :func:`read` (``size`` bytes)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"{size} bytes, over the limit of {limit}")
        self.size, self.limit = size, limit


class HardLinked(Exception):
    """The file has ``links`` names (hard links): not read (module docstring)."""

    def __init__(self, links: int) -> None:
        super().__init__(
            f"the file has {links} names (hard links); docqa reads only files with one name, since another name "
            "may lie outside the watched folder: copy it into the folder instead"
        )
        self.links = links


class Changed(Exception):
    """The file opened is not the one listed (another device or inode): it was replaced meanwhile."""


def printable_path(path: Path | str) -> str:
    """``path`` as it can be logged and stored: a name that is not UTF-8 surrogate-escaped (``\\udcff``)."""
    return str(path).encode("utf-8", "backslashreplace").decode("utf-8")


def utf8(name: str) -> bool:
    """Whether ``name`` (as ``os`` decodes it, with surrogate escapes) is valid UTF-8."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _parts(root: Path, path: Path) -> tuple[str, ...] | None:
    """The components of ``path`` below ``root``, or None when it is not below it (or names ``..``)."""
    try:
        parts = Path(path).relative_to(root).parts
    except ValueError:
        return None
    if not parts or any(p in ("", ".", "..") for p in parts):
        return None
    return parts


def _name_counts(name: str) -> bool:
    return not name.startswith(".") and not name.startswith(TEMP_PREFIXES) and Path(name).suffix.lower() in suffixes()


def counts(root: Path, path: Path) -> bool:
    """``path`` (under ``root``) is a file name a watched folder reads: a document's suffix, not hidden,
    not an office program's lock or temp file, UTF-8."""
    parts = _parts(root, path)
    if parts is None or any(p.startswith(".") or not utf8(p) for p in parts):
        return False
    return _name_counts(parts[-1])


def _open_root(root: Path) -> int:
    return os.open(root, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)


@contextmanager
def _directory(root: Path, parts: tuple[str, ...]) -> Iterator[int]:
    """A descriptor of the directory ``root/parts...``, each component opened relative to the one before
    without following a link (OSError when one is a link, gone or not a directory)."""
    fd = _open_root(root)
    try:
        for part in parts:
            sub = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = sub
        yield fd
    finally:
        os.close(fd)


def state(root: Path, path: Path) -> FileState | None:
    """The state of a watched file, or None when it does not count (:func:`counts`), is gone, is not a
    regular file, or a link lies on its path."""
    parts = _parts(root, path)
    if parts is None or not counts(root, path):
        return None
    try:
        with _directory(root, parts[:-1]) as parent:
            st = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return _state(Path(path), st)


def _state(path: Path, st: os.stat_result) -> FileState:
    return FileState(path, st.st_size, st.st_mtime_ns, st.st_dev, st.st_ino, st.st_nlink)


def read(root: Path, path: Path, limit: int, listed: FileState | None = None) -> tuple[bytes, FileState]:
    """The bytes of a watched file and its state as read (from the open file), opened as the module
    docstring says. Raises FileNotFoundError when it is gone, no longer counts or a link lies on its
    path; :class:`Changed` when it is not the file ``listed`` (device and inode); :class:`HardLinked`
    for a file with more than one name; :class:`TooLarge` over ``limit`` bytes (before reading
    them); OSError when it cannot be read."""
    parts = _parts(root, path)
    if parts is None or not counts(root, path):
        raise FileNotFoundError(str(path))
    try:
        with _directory(root, parts[:-1]) as parent:
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno in _NOT_THERE:
            raise FileNotFoundError(errno.ENOENT, f"no file of the folder at {printable_path(path)}") from None
        raise
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise FileNotFoundError(errno.ENOENT, f"{printable_path(path)} is not a regular file")
        if listed is not None and (st.st_dev, st.st_ino) != (listed.dev, listed.ino):
            raise Changed(printable_path(path))
        if st.st_nlink > 1:
            raise HardLinked(st.st_nlink)
        if st.st_size > limit:
            raise TooLarge(st.st_size, limit)
        data = f.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(len(data), limit)
    return data, _state(Path(path), st)


def scan(root: Path, start: Path | None = None) -> Scan:
    """Every file of ``root`` (or of its sub-folder ``start``) that counts, with its state; what could
    not be listed and the names skipped (:class:`Scan`). Sub-folders are entered through descriptors
    (a link is never entered, and a directory swapped meanwhile is left out); hidden ones are not."""
    root = Path(root).absolute()
    found = Scan()
    rel: tuple[str, ...] = ()
    if start is not None and Path(start) != root:
        parts = _parts(root, Path(start))
        if parts is None or any(p.startswith(".") for p in parts):
            return found
        rel = parts
    try:
        with _directory(root, rel) as fd:
            _walk(root, fd, rel, found)
    except OSError as exc:
        if exc.errno not in _NOT_THERE:
            found.unreadable.append(root.joinpath(*rel))
    return found


def _walk(root: Path, fd: int, rel: tuple[str, ...], found: Scan) -> None:
    try:
        with os.scandir(fd) as it:
            names = sorted(e.name for e in it)
    except OSError:
        found.unreadable.append(root.joinpath(*rel))
        return
    for name in names:
        if name.startswith("."):
            continue
        if not utf8(name):
            found.bad_names.append(printable_path(root.joinpath(*rel, name)))
            continue
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            continue  # gone meanwhile
        if stat.S_ISDIR(st.st_mode):
            if len(rel) >= MAX_DEPTH:
                continue
            try:
                sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in _NOT_THERE:  # a link or gone meanwhile: nothing to list
                    found.unreadable.append(root.joinpath(*rel, name))
                continue
            try:
                opened = os.fstat(sub)
                if (opened.st_dev, opened.st_ino) == (st.st_dev, st.st_ino):  # not swapped meanwhile
                    _walk(root, sub, (*rel, name), found)
            finally:
                os.close(sub)
        elif stat.S_ISREG(st.st_mode) and _name_counts(name):
            found.files.append(_state(root.joinpath(*rel, name), st))


def unavailable(root: Path, had: int, was_on: int | None = None) -> str | None:
    """Why the watched folder ``root`` is not there to sync with, or None when it is: gone, not a folder,
    unreadable, or *suddenly* empty (not one entry) where ``had`` documents' files were: more than one
    of them (one deletion empties no folder of several files; an unmount or a sync tool's wipe does),
    or any, on another device than ``was_on``, the one they were on (an unmounted share leaves its
    mount point, on the disk below it). A folder whose last file was deleted is there, and empty."""
    try:
        fd = _open_root(Path(root))
    except FileNotFoundError:
        return "the folder is not there (renamed, moved or deleted?)"
    except NotADirectoryError:
        return "the path is no longer a folder"
    except OSError as exc:
        return f"the folder cannot be opened ({exc.strerror})"
    try:
        with os.scandir(fd) as it:
            empty = next(it, None) is None
        moved = was_on is not None and os.fstat(fd).st_dev != was_on
    except OSError as exc:
        return f"the folder cannot be read ({exc.strerror})"
    finally:
        os.close(fd)
    if empty and (had > 1 or (had and moved)):
        return "the folder is empty, and its documents' files were there (an unmounted share?)"
    return None


def device(root: Path) -> int | None:
    """The device the folder ``root`` is on (None when it cannot be looked at)."""
    try:
        return os.stat(root).st_dev
    except OSError:
        return None


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
    parts = _parts(root, path) if Path(path) != root else ()
    if parts is None:
        return
    try:
        if parts:
            with _directory(root, parts[:-1]) as parent:
                st = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
            is_dir = stat.S_ISDIR(st.st_mode)
        else:
            is_dir = True
    except OSError:
        return
    if is_dir:
        yield from scan(root, path).files
        return
    found = state(root, path)
    if found is not None:
        yield found
