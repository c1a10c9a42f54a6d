"""The files of a watched folder (ingest/folder.py): which count, links (never followed), hard links
(refused), names that are not UTF-8 (skipped and listed), a read that cannot leave the folder while a
sub-folder is swapped for a link in a tight loop, a folder that is not there, and the order."""

from __future__ import annotations

import os
import threading
import time

import pytest

from ingest.folder import (
    Changed,
    HardLinked,
    TooLarge,
    counts,
    device,
    ordered,
    read,
    scan,
    state,
    unavailable,
    walk_paths,
)

SECRET = b"The vault code is 4242. "


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
    os.symlink(root / "a.txt", root / "alias.txt")  # inside the folder: not followed either (a.txt is read)
    found = scan(root)
    assert sorted(str(f.path.relative_to(root)) for f in found.files) == ["a.txt", "sub/b.PDF"]
    assert found.unreadable == [] and found.bad_names == []
    assert state(root, root / "leak.txt") is None and not counts(root, outside / "secret.txt")
    assert state(root, root / "alias.txt") is None and state(root, root / "linked-dir" / "secret.txt") is None
    for path in (root / "leak.txt", root / "alias.txt", root / "linked-dir" / "secret.txt", root / "sub/../a.txt"):
        with pytest.raises(FileNotFoundError):
            read(root, path, 1000)
    data, st = read(root, root / "a.txt", 1000)
    assert data == b"a" and st.size == 1 and st.key == f"1:{(root / 'a.txt').stat().st_mtime_ns}"
    assert [f.path.name for f in walk_paths(root, root / "sub")] == ["b.PDF"]
    assert list(walk_paths(root, root / "linked-dir")) == []


def test_a_hard_link_is_refused_and_a_replaced_file_is_not_the_one_listed(tmp_path):
    root, outside = tmp_path / "docs", tmp_path / "private"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_bytes(SECRET)
    os.link(outside / "secret.txt", root / "linked.txt")  # a second name of a file outside the folder
    with pytest.raises(HardLinked, match="2 names"):
        read(root, root / "linked.txt", 1000)
    (root / "a.txt").write_text("first")
    listed = state(root, root / "a.txt")
    (root / "b.txt").write_text("second")
    os.replace(root / "b.txt", root / "a.txt")  # another file under the listed name
    with pytest.raises(Changed):
        read(root, root / "a.txt", 1000, listed)
    assert read(root, root / "a.txt", 1000, state(root, root / "a.txt"))[0] == b"second"


def test_a_name_that_is_not_utf8_is_listed_once_and_skipped(tmp_path):
    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    (root / "good.txt").write_text("good")
    with open(os.path.join(os.fsencode(root), b"caf\xe9.txt"), "wb") as f:  # Latin-1 bytes: not UTF-8
        f.write(b"bad name")
    os.mkdir(os.path.join(os.fsencode(root / "sub"), b"d\xfcr"))
    found = scan(root)
    assert [f.path.name for f in found.files] == ["good.txt"]
    assert sorted(found.bad_names) == [str(root / "caf\\udce9.txt"), str(root / "sub" / "d\\udcfcr")]


def test_a_folder_that_is_not_there_or_suddenly_empty(tmp_path):
    root = tmp_path / "docs"
    assert "not there" in unavailable(root, had=1)
    root.mkdir()
    assert unavailable(root, had=0) is None  # a new, empty folder is a folder
    assert "empty" in unavailable(root, had=2)  # every file gone at once: an unmounted share's mount point
    assert unavailable(root, had=1) is None  # its last file deleted: there, and empty
    assert "empty" in unavailable(root, had=1, was_on=device(root) + 1)  # the files were on another device
    (root / "a.txt").write_text("a")
    assert unavailable(root, had=2) is None
    (tmp_path / "file").write_text("x")
    assert "no longer a folder" in unavailable(tmp_path / "file", had=1)
    assert scan(tmp_path / "gone").files == []


def _swap_loop(root, outside, stop: threading.Event, swaps: list[int]) -> None:
    """Swap ``root/sub`` between a real folder and a link to ``outside``, as fast as it goes."""
    real, link = root / "sub", root / "sub-link"
    parked = root / ".parked"
    while not stop.is_set():
        os.symlink(outside, link)
        os.rename(real, parked)
        os.rename(link, real)  # sub is now a link out of the folder
        os.rename(real, link)
        os.rename(parked, real)  # and a folder again
        os.unlink(link)
        swaps[0] += 1


@pytest.mark.parametrize("seconds", [3.0, pytest.param(60.0, marks=pytest.mark.slow)])
def test_no_outside_byte_is_read_while_a_folder_is_swapped_for_a_link(tmp_path, seconds):
    """Issue 49: a sub-folder swapped for a link to an outside folder between the check and the open
    made docqa read the outside file (captured twice in 150 s). Here it is swapped in a tight loop
    while the folder is scanned and read without pause: no read ever returns the outside bytes."""
    root, outside = tmp_path / "docs", tmp_path / "private"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (root / "sub" / "report.txt").write_bytes(b"The inside report. " * 20)
    (outside / "report.txt").write_bytes(SECRET * 20)  # the same name, outside
    (outside / "outside-only.txt").write_bytes(SECRET)
    stop, swaps = threading.Event(), [0]
    swapper = threading.Thread(target=_swap_loop, args=(root, outside, stop, swaps), daemon=True)
    swapper.start()
    reads = refused = scans = 0
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            listed = {str(f.path.relative_to(root)) for f in scan(root).files}
            assert listed <= {"sub/report.txt"}, listed  # never a name of the outside folder
            scans += 1
            for _ in range(50):
                try:
                    data, _ = read(root, root / "sub" / "report.txt", 10_000)
                except (FileNotFoundError, Changed):
                    refused += 1
                    continue
                reads += 1
                assert b"vault" not in data, "a byte from outside the folder was read"
    finally:
        stop.set()
        swapper.join(10)
    print(f"{swaps[0]} swaps, {scans} scans, {reads} reads inside, {refused} refused")
    assert swaps[0] > 100 and reads > 100 and refused > 0  # the race was run, both ways


def test_too_large_is_refused_before_reading_and_the_order(tmp_path):
    (tmp_path / "big.txt").write_bytes(b"x" * 5000)
    with pytest.raises(TooLarge) as caught:
        read(tmp_path, tmp_path / "big.txt", 4096)
    assert caught.value.size == 5000
    for name, size, mtime in (("old-small.txt", 10, 1), ("new-big.txt", 900, 3), ("mid.txt", 100, 2)):
        (tmp_path / name).write_bytes(b"x" * size)
        os.utime(tmp_path / name, ns=(mtime * 10**9, mtime * 10**9))
    files = [f for f in scan(tmp_path).files if f.path.name != "big.txt"]
    assert [f.path.name for f in ordered(files, "small")] == ["old-small.txt", "mid.txt", "new-big.txt"]
    assert [f.path.name for f in ordered(files, "recent")] == ["new-big.txt", "mid.txt", "old-small.txt"]
