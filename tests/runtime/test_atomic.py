"""Crash-safe writes from many writers at once (issue 27 item 10): two threads of one process used
the same temp name (``.<name>.<pid>.tmp``), so one renamed the other's half-written file away and
the other failed with ENOENT (the "storing the re-extracted text failed" 500 of two reingests)."""

from __future__ import annotations

import threading
from pathlib import Path

from runtime.atomic import replacing, temp_owner, temp_path, write_atomic


def test_temp_names_are_unique_per_write_and_name_their_process():
    import os

    target = Path("/data/documents/abc/text.json")
    names = {temp_path(target) for _ in range(1000)}
    assert len(names) == 1000
    assert all(p.parent == target.parent and p.name.startswith(".text.json.") for p in names)
    assert {temp_owner(p) for p in names} == {os.getpid()}
    assert temp_owner(Path(".text.json.4242.tmp")) == 4242, "the names of earlier versions"
    assert temp_owner(Path("text.json")) is None


def test_threads_writing_one_file_never_clobber_each_other(tmp_path):
    target = tmp_path / "text.json"
    errors: list[BaseException] = []
    bodies = [bytes([65 + i]) * (200_000 + i) for i in range(8)]  # large enough to interleave
    start = threading.Barrier(len(bodies))

    def writer(body: bytes) -> None:
        start.wait()
        try:
            for _ in range(25):
                write_atomic(target, body)
        except BaseException as exc:  # noqa: BLE001 - any failure is the bug
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert target.read_bytes() in bodies, "one writer's whole content, never a mix"
    assert list(tmp_path.glob(".*.tmp")) == [], "no temp file left behind"


def test_a_failed_write_removes_only_its_own_temp_file(tmp_path):
    target = tmp_path / "prefix.npy"
    other_writer = threading.Event()
    done = threading.Event()

    def slow_writer() -> None:
        with replacing(target) as tmp:
            tmp.write_bytes(b"slow but fine")
            other_writer.set()
            done.wait(10)

    t = threading.Thread(target=slow_writer)
    t.start()
    other_writer.wait(10)
    try:
        with replacing(target) as tmp:
            tmp.write_bytes(b"half")
            raise OSError(28, "No space left on device")
    except OSError:
        pass
    done.set()
    t.join()
    assert target.read_bytes() == b"slow but fine"
