import numpy as np
import pytest

from ingest.extract import ExtractedText
from store.docstore import FAILED, INGESTING, READY, DuplicateDocument
from store.sqlite_store import SqliteStore as DocStore


def _create(store, sha="a" * 64):
    return store.create(name="doc.pdf", sha256=sha, kind="pdf", pages=2, tokens=10, chars=20)


def test_create_get_list_status(tmp_path):
    store = DocStore(tmp_path)
    doc = _create(store)
    assert doc.status == INGESTING and doc.id.isalnum()
    store.set_status(doc.id, FAILED, "prefill failed: boom")
    assert store.get(doc.id).error == "prefill failed: boom"
    store.set_status(doc.id, READY)
    assert [d.id for d in store.list()] == [doc.id]


def test_duplicate_bytes_raise_with_the_existing_document(tmp_path):
    store = DocStore(tmp_path)
    doc = _create(store)
    with pytest.raises(DuplicateDocument) as err:
        _create(store)
    assert err.value.existing.id == doc.id


def test_rows_and_files_survive_a_reopen(tmp_path):
    store = DocStore(tmp_path)
    doc = _create(store)
    store.write_files(doc.id, b"bytes", ExtractedText("hello\n\nworld", [0, 7], "pdf"), np.arange(5, dtype=np.int32))
    reopened = DocStore(tmp_path)
    assert reopened.get(doc.id) == store.get(doc.id)
    assert reopened.read_text(doc.id).page_of(8) == 2
    assert reopened.read_prefix(doc.id).tolist() == [0, 1, 2, 3, 4]


def test_paths_are_never_built_from_user_input(tmp_path):
    with pytest.raises(ValueError):
        DocStore(tmp_path).dir("../etc")


def test_delete_removes_row_and_files(tmp_path):
    store = DocStore(tmp_path)
    doc = _create(store)
    store.write_prefix(doc.id, np.arange(3, dtype=np.int32)) if store.dir(doc.id).mkdir() is None else None
    store.delete(doc.id)
    assert store.get(doc.id) is None and not store.dir(doc.id).exists()


_OLD_SCHEMA = """
CREATE TABLE documents (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, sha256 TEXT NOT NULL UNIQUE, kind TEXT NOT NULL,
    pages INTEGER NOT NULL, tokens INTEGER NOT NULL, chars INTEGER NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ingesting', 'ready', 'failed')), error TEXT, created_at REAL NOT NULL
)
"""


def test_a_database_from_before_text_rules_is_migrated(tmp_path):
    """A database and text.json written before text rules were versioned open as rules version 1."""
    import json
    import sqlite3

    db = sqlite3.connect(tmp_path / "docqa.sqlite3")
    db.execute(_OLD_SCHEMA)
    row = ("abc123", "old.pdf", "b" * 64, "pdf", 1, 10, 5, "ready", None, 1.0)
    db.execute("INSERT INTO documents VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
    db.commit()
    db.close()
    (tmp_path / "documents" / "abc123").mkdir(parents=True)
    old_text = {"text": "hello", "page_starts": [0], "kind": "pdf"}
    (tmp_path / "documents" / "abc123" / "text.json").write_text(json.dumps(old_text))

    store = DocStore(tmp_path)
    old = store.get("abc123")
    assert old.text_rules == 1 and old.encoding is None and old.status == READY
    assert store.read_text("abc123").rules == 1
    new = store.create(
        name="new.txt", sha256="c" * 64, kind="text", pages=1, tokens=3, chars=4, text_rules=2, encoding="cp1252"
    )
    assert (new.text_rules, new.encoding) == (2, "cp1252")
    store.set_text(new.id, ExtractedText("new text", [0], "text", "utf-8", 2), tokens=7)
    assert (store.get(new.id).encoding, store.get(new.id).tokens, store.get(new.id).chars) == ("utf-8", 7, 8)
    assert DocStore(tmp_path).get("abc123") == old, "migrating twice changes nothing"


def test_writes_wait_for_a_lock_another_process_holds(tmp_path):
    """Another connection holds BEGIN EXCLUSIVE for 7 s (longer than sqlite3's own 5 s busy wait):
    the write waits it out instead of failing with "database is locked"."""
    import sqlite3
    import threading
    import time

    store = DocStore(tmp_path)
    doc = _create(store)
    other = sqlite3.connect(tmp_path / "docqa.sqlite3", isolation_level=None, check_same_thread=False)
    other.execute("BEGIN EXCLUSIVE")
    threading.Timer(7.0, lambda: other.execute("COMMIT")).start()
    t0 = time.monotonic()
    store.set_status(doc.id, READY)
    waited = time.monotonic() - t0
    assert store.get(doc.id).status == READY and 6.5 < waited < 9, waited
    other.close()


def test_a_lock_held_past_the_bound_is_a_typed_error(tmp_path, monkeypatch):
    import sqlite3

    from ingest.errors import StoreBusy
    from store import sqlite_store as store_module

    monkeypatch.setattr(store_module, "LOCK_WAIT_S", 1.0)
    store = DocStore(tmp_path)
    other = sqlite3.connect(tmp_path / "docqa.sqlite3", isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    with pytest.raises(StoreBusy, match="locked by another process"):
        _create(store)
    other.execute("COMMIT")
    assert _create(store).status == INGESTING


def test_delete_waits_for_a_snapshot_being_written_and_removes_it(tmp_path):
    """The engine writes a snapshot while holding the document's lock; a DELETE meanwhile waits, then
    removes the files before the row, so nothing of the document is left."""
    import threading
    import time

    store = DocStore(tmp_path)
    doc = _create(store)
    store.dir(doc.id).mkdir()
    deleted = threading.Event()
    with store.holding(doc.id) as directory:
        threading.Thread(target=lambda: (store.delete(doc.id), deleted.set())).start()
        time.sleep(0.3)
        assert not deleted.is_set(), "delete must wait for the snapshot write"
        (directory / "state.bin").write_bytes(b"state")  # the write in progress
    assert deleted.wait(5)
    assert store.get(doc.id) is None and not store.dir(doc.id).exists()


def test_startup_sweep_removes_what_no_row_owns(tmp_path):
    import os

    store = DocStore(tmp_path)
    kept = _create(store)
    store.dir(kept.id).mkdir()
    (store.dir(kept.id) / "text.json").write_text("{}")
    (store.dir(kept.id) / f".state.bin.{2**22 + 1}.tmp").write_bytes(b"x" * 10)  # writer gone
    (store.dir(kept.id) / f".prefix.npy.{os.getppid()}.tmp").write_bytes(b"y")  # a live other writer
    orphan = store.dir("0123abcd")
    orphan.mkdir()
    (orphan / "state.bin").write_bytes(b"z" * 100)
    report = store.sweep(d.id for d in store.list())
    assert report.dirs == ["0123abcd"] and not orphan.exists()
    assert [p.name for p in report.tmp_files] == [f".state.bin.{2**22 + 1}.tmp"]
    assert report.bytes_freed == 110
    live_tmp = store.dir(kept.id) / f".prefix.npy.{os.getppid()}.tmp"
    assert (store.dir(kept.id) / "text.json").exists() and live_tmp.exists()


def test_startup_sweep_reads_the_per_write_temp_names(tmp_path):
    # runtime/atomic.py names temp files .<name>.<pid>-<n>.tmp since issue 27: the pid still decides.
    import os

    store = DocStore(tmp_path)
    kept = _create(store)
    store.dir(kept.id).mkdir()
    gone = store.dir(kept.id) / f".text.json.{2**22 + 1}-7.tmp"
    live = store.dir(kept.id) / f".text.json.{os.getppid()}-3.tmp"
    gone.write_bytes(b"x")
    live.write_bytes(b"y")
    report = store.sweep(d.id for d in store.list())
    assert report.tmp_files == [gone] and live.exists() and not gone.exists()


def test_an_unusable_database_names_the_data_directory(tmp_path):
    from ingest.errors import DataDirUnusable

    (tmp_path / "docqa.sqlite3").write_bytes(b"not a database, but 100 bytes of it" * 3)
    with pytest.raises(DataDirUnusable) as err:
        DocStore(tmp_path)
    assert str(tmp_path.resolve()) in str(err.value) and "\n" not in str(err.value)


def test_a_damaged_database_gets_advice_for_a_damaged_database(tmp_path):
    """A database whose header was overwritten was told to "make it writable"; it needs a backup (or
    a fresh start that does not sweep away the documents its rows described)."""
    from ingest.errors import DataDirUnusable

    DocStore(tmp_path).close()
    path = tmp_path / "docqa.sqlite3"
    with path.open("r+b") as f:
        f.write(b"not the SQLite header")
    with pytest.raises(DataDirUnusable) as err:
        DocStore(tmp_path)
    message = str(err.value)
    assert str(path.resolve()) in message and "is damaged" in message and "backup" in message
    assert "writable" not in message and "documents" in message


def test_a_segmented_document_keeps_a_prefix_and_snapshot_per_segment(tmp_path):
    """Segments (issue 18): each has its own prefix and snapshot directory; the index and the list
    sit next to the text; eviction and removal see the segments' snapshots; a re-ingest as a whole
    document removes them."""
    from ingest import snapshot
    from ingest.segments import Segment, key
    from store import disk, index

    store = DocStore(tmp_path)
    doc = _create(store)
    text = "the parrot Marigold\n\nthe elephant of Bombay\n\nthe Reform Club"
    segments = [Segment(0, 0, 21, 1, 1, 3), Segment(1, 21, 45, 1, 2, 3), Segment(2, 45, len(text), 2, 2, 2)]
    store.write_files(doc.id, b"bytes", ExtractedText(text, [0, 30], "pdf"), None)
    prefixes = [np.arange(3, dtype=np.int32), np.arange(3, 6, dtype=np.int32), np.arange(6, 8, dtype=np.int32)]
    store.write_segments(doc.id, text, segments, prefixes)
    assert store.keys(doc.id) == [key(doc.id, i) for i in range(3)] == [f"{doc.id}/{i}" for i in range(3)]
    assert store.read_segments(doc.id) == segments
    assert store.read_prefix(f"{doc.id}/1").tolist() == [3, 4, 5]
    assert not (store.dir(doc.id) / "prefix.npy").exists()
    assert [i for i, _ in index.rank(store.dir(doc.id), "Where was the elephant?")] == [1]

    for i in (0, 2):  # two segment snapshots (stand-ins: the manifest and state file names)
        (store.state_dir(f"{doc.id}/{i}") / snapshot.META_FILE).write_text("{}")
        (store.state_dir(f"{doc.id}/{i}") / snapshot.STATE_FILE).write_bytes(bytes(1000))
    assert snapshot.least_recently_used(store.docs_dir) == [doc.id] and store.snapshot_bytes() == 2000
    assert disk.evict(store, budget=1) == [doc.id]
    assert store.snapshot_bytes() == 0 and store.read_segments(doc.id) == segments  # texts and prefixes kept

    store.remove_segments(doc.id)
    store.write_prefix(doc.id, np.arange(4, dtype=np.int32))
    assert store.read_segments(doc.id) is None and store.keys(doc.id) == [doc.id]
    assert not (store.dir(doc.id) / "segments").exists() and not (store.dir(doc.id) / index.INDEX_FILE).exists()
