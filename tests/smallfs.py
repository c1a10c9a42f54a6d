"""A small filesystem for the disk tests: a tmpfs mounted in a mount namespace of its own, so a test can
fill it up without touching the machine's disks, and it disappears with the process that made it.

Mounting needs root (CAP_SYS_ADMIN): CI runs as root; elsewhere the tests skip with the reason. The
test process stays outside the namespace and sees the small filesystem through the process that
mounted it: ``/proc/<pid>/root/<path>``.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

MOUNT = 'mount -t tmpfs -o {options} docqa-test "$0" && exec "$@"'


@functools.cache
def unavailable() -> str | None:
    """Why a small filesystem cannot be made here, or None when it can."""
    if os.geteuid() != 0:
        return "mounting a small tmpfs needs root (CI runs the disk tests as root)"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    with tempfile.TemporaryDirectory() as mnt:
        probe = subprocess.run(command(1024**2, Path(mnt), ["true"]), capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot mount a tmpfs in a new mount namespace: {probe.stderr.strip()[-200:]}"
    return None


def require() -> None:
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)


def command(size: int, mountpoint: Path, argv: list[str], read_only: bool = False) -> list[str]:
    """``argv`` run with a ``size``-byte tmpfs at ``mountpoint`` (read-only with ``read_only``) that only
    it sees (its pid is argv's: unshare and sh exec)."""
    options = f"size={size}" + (",ro" if read_only else "")
    mount = MOUNT.format(options=options)
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount, str(mountpoint), *argv]


def inside(pid: int, path: Path) -> Path:
    """``path`` as the process ``pid`` sees it (inside its mount namespace)."""
    return Path(f"/proc/{pid}/root{Path(path).resolve()}")


def fill(directory: Path, leave: int = 0) -> Path:
    """Fill the filesystem of ``directory`` until about ``leave`` bytes are free; returns the filler file."""
    filler = directory / "filler.bin"
    block = bytes(1024**2)
    with filler.open("ab", buffering=0) as f:
        try:
            while (free := shutil.disk_usage(directory).free) > leave:
                f.write(block[: max(4096, min(len(block), free - leave))])
        except OSError:  # ENOSPC: as full as it gets
            pass
    return filler
