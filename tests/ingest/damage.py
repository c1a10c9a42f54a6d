"""Ways to damage a stored file, as disks, copies and interrupted rsyncs do (issue 27): for the
snapshot tests here and the server's live-process tests (truncate, flip or replace a state file of
a running server, then ask again)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def truncate(path: Path, keep: float = 0.5) -> None:
    """Cut the file to ``keep`` of its size (the issue's "truncate state.bin to half")."""
    with path.open("r+b") as f:
        f.truncate(int(path.stat().st_size * keep))


def overwrite(path: Path, n: int = 4096, at: float = 0.5, keep_mtime: bool = False) -> None:
    """Invert ``n`` bytes at ``at`` of the file (same size: "overwrite 4 KiB in the middle");
    ``keep_mtime``: then put its mtime back, as a copy that preserves times would."""
    before = path.stat()
    with path.open("r+b") as f:
        f.seek(int(before.st_size * at))
        chunk = f.read(n)
        f.seek(int(before.st_size * at))
        f.write(bytes(b ^ 0xFF for b in chunk))
    if keep_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def replace_with(path: Path, other: Path) -> None:
    """Put another file (another document's state.bin) in ``path``'s place."""
    shutil.copyfile(other, path)
