"""The files of a watched folder (ingest/folder.py): which count, symlinks out of the folder, hidden and
temp files, a safe read, the order."""

from __future__ import annotations

import os

import pytest

from ingest.folder import TooLarge, counts, ordered, read, scan, state


def test_what_counts_and_links_out_of_the_folder(tmp_path):
    root, outside = tmp_path / "docs", tmp_path / "private"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("not yours")
    (root / "a.txt").write_text("a")
    (root / "sub" / "b.PDF").write_bytes(b"%PDF-")
    (root / "picture.png").write_bytes(b"\x89PNG")
    (root / ".hidden.md").write_text("h")
    (root / "~$draft.docx").write_text("lock")
    (root / ".git").mkdir()
    (root / ".git" / "c.md").write_text("c")
    os.symlink(outside / "secret.txt", root / "leak.txt")  # out of the folder: never read
    os.symlink(outside, root / "linked-dir")  # a linked directory: not entered
    os.symlink(root / "a.txt", root / "alias.txt")  # inside the folder: read (it is a.txt's bytes)
    found = sorted(str(f.path.relative_to(root)) for f in scan(root))
    assert found == ["a.txt", "alias.txt", "sub/b.PDF"]
    assert state(root, root / "leak.txt") is None and not counts(root, outside / "secret.txt")
    with pytest.raises(FileNotFoundError):
        read(root, root / "leak.txt", 1000)
    data, st = read(root, root / "a.txt", 1000)
    assert data == b"a" and st.size == 1 and st.key == f"1:{(root / 'a.txt').stat().st_mtime_ns}"


def test_too_large_is_refused_before_reading_and_the_order(tmp_path):
    (tmp_path / "big.txt").write_bytes(b"x" * 5000)
    with pytest.raises(TooLarge) as caught:
        read(tmp_path, tmp_path / "big.txt", 4096)
    assert caught.value.size == 5000
    for name, size, mtime in (("old-small.txt", 10, 1), ("new-big.txt", 900, 3), ("mid.txt", 100, 2)):
        (tmp_path / name).write_bytes(b"x" * size)
        os.utime(tmp_path / name, ns=(mtime * 10**9, mtime * 10**9))
    files = [f for f in scan(tmp_path) if f.path.name != "big.txt"]
    assert [f.path.name for f in ordered(files, "small")] == ["old-small.txt", "mid.txt", "new-big.txt"]
    assert [f.path.name for f in ordered(files, "recent")] == ["new-big.txt", "mid.txt", "old-small.txt"]
