"""Document metadata in SQLite (stdlib sqlite3), the default store (interface: ``store/docstore.py``).

``data_dir/docqa.sqlite3`` holds one row per document; ``data_dir/documents/<id>/`` its files.
A document is ``ready`` only after its snapshot manifest is on disk (see ``ingest/snapshot.py``), so
a crash during ingestion can never leave a half-written document marked ready.

Another process may hold the database locked (a backup, ``sqlite3`` in a shell): every write retries
``database is locked`` with a bounded backoff (:data:`LOCK_WAIT_S` in all), then raises StoreBusy.
On a full disk SQLite cannot even record that a write failed, so the store keeps a small reserve file
(:data:`RESERVE_BYTES`) and gives its space up to the database when a write finds the disk full; it
is made again once there is room. A full disk beyond that raises DiskFull; a database that cannot be
opened, DataDirUnusable naming the path (and, for a damaged database file, the way back from it).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ingest.errors import DataDirUnusable, DiskFull, StoreBusy
from store import schema
from store.docstore import (
    COLUMNS,
    INGESTING,
    CollectionRecord,
    DocRecord,
    DocStore,
    DocumentsMissing,
    DuplicateCollection,
    DuplicateDocument,
    collection_record,
    record,
)
from store.files import DocFiles

log = logging.getLogger("docqa.store")
T = TypeVar("T")
#: Longest a write waits for a lock another process holds, in seconds, over all its retries.
LOCK_WAIT_S = 30.0
_BACKOFF_S = (0.05, 1.0)  # first and longest pause between retries (doubling)
#: Space kept for SQLite in ``data_dir/.reserve``, released when a write finds the disk full.
RESERVE_FILE, RESERVE_BYTES = ".reserve", 1024**2

_SCHEMA = schema.create_tables("sqlite")
#: Columns added after the first release: added to an existing database when missing.
_MIGRATIONS = schema.migrations("sqlite")


#: SQLite's result codes for a file that is not a database (an overwritten header) or a damaged one.
DAMAGED = frozenset({"SQLITE_NOTADB", "SQLITE_CORRUPT"})


def _unwritable(data_dir: Path, exc: Exception) -> str:
    return (
        f"cannot use the data directory {Path(data_dir).resolve()} ({exc}); make it writable by this user, or set "
        "DOCQA_DATA_DIR to one that is"
    )


class SqliteStore(DocStore):
    """One connection guarded by a lock (writes are rare and small)."""

    def __init__(self, data_dir: Path) -> None:
        path = Path(data_dir) / "docqa.sqlite3"
        try:
            DocFiles.__init__(self, data_dir)
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=0.5)
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")  # a deleted document leaves its collections
            self._db.execute(_SCHEMA[0])
            self._migrate()
            for statement in _SCHEMA[1:]:
                self._db.execute(statement)
        except sqlite3.DatabaseError as exc:
            if getattr(exc, "sqlite_errorname", None) not in DAMAGED:
                raise DataDirUnusable(_unwritable(data_dir, exc)) from exc
            raise DataDirUnusable(
                f"the database {path.resolve()} is damaged ({exc}); restore it from a backup (`sqlite3 "
                f"{path.name} .recover` may save its rows). To start over instead, move it and "
                f"{Path(data_dir).resolve()}/documents aside: a new database has no rows, and the start-up sweep "
                "removes the documents without one"
            ) from exc
        except OSError as exc:
            raise DataDirUnusable(_unwritable(data_dir, exc)) from exc
        self._lock = threading.Lock()
        self._keep_reserve()

    def _migrate(self) -> None:
        """Add the columns of _MIGRATIONS that an existing database lacks (ALTER TABLE ADD COLUMN)."""
        have = {row["name"] for row in self._db.execute("PRAGMA table_info(documents)")}
        for name, definition in _MIGRATIONS:
            if name not in have:
                self._db.execute(f"ALTER TABLE documents ADD COLUMN {name} {definition}")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- rows -------------------------------------------------------------------------------------
    def _insert(self, row: dict[str, Any]) -> DocRecord:
        return self._retrying(lambda: self._insert_once(row))

    def _insert_once(self, row: dict[str, Any]) -> DocRecord:
        with self._lock:
            try:
                self._db.execute(
                    f"INSERT INTO documents ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
                    tuple(row[c] for c in COLUMNS),
                )
            except sqlite3.IntegrityError:
                existing = self._one("SELECT * FROM documents WHERE sha256 = ?", (row["sha256"],))
                if existing is None:  # deleted in between; let the caller retry
                    raise
                raise DuplicateDocument(existing) from None
            created = self._one("SELECT * FROM documents WHERE id = ?", (row["id"],))
        assert created is not None
        return created

    def get(self, doc_id: str) -> DocRecord | None:
        with self._lock:
            return self._one("SELECT * FROM documents WHERE id = ?", (doc_id,))

    def by_sha256(self, sha256: str) -> DocRecord | None:
        with self._lock:
            return self._one("SELECT * FROM documents WHERE sha256 = ?", (sha256,))

    def list(self) -> list[DocRecord]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM documents ORDER BY created_at DESC").fetchall()
        return [record(dict(r)) for r in rows]

    def _update(self, doc_id: str, columns: dict[str, Any]) -> None:
        names = ", ".join(f"{name} = ?" for name in columns)  # names are ours, never the user's
        self._write(f"UPDATE documents SET {names} WHERE id = ?", (*columns.values(), doc_id))

    def _delete(self, doc_id: str) -> None:
        self._write("DELETE FROM documents WHERE id = ?", (doc_id,))

    # -- collections ------------------------------------------------------------------------------
    def _insert_collection(self, row: dict[str, Any], document_ids: list[str]) -> CollectionRecord:
        return self._retrying(lambda: self._insert_collection_once(row, document_ids))

    def _insert_collection_once(self, row: dict[str, Any], document_ids: list[str]) -> CollectionRecord:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    "INSERT INTO collections (id, name, created_at) VALUES (?, ?, ?)",
                    (row["id"], row["name"], row["created_at"]),
                )
                self._db.executemany(
                    "INSERT INTO collection_documents (collection_id, document_id, position) VALUES (?, ?, ?)",
                    [(row["id"], doc_id, i) for i, doc_id in enumerate(document_ids)],
                )
                self._db.execute("COMMIT")
            except sqlite3.IntegrityError:
                self._db.execute("ROLLBACK")
                named = self._db.execute("SELECT id FROM collections WHERE name = ?", (row["name"],)).fetchone()
                if named is not None:
                    raise DuplicateCollection(self._collection(named["id"])) from None
                have = {
                    r[0]
                    for r in self._db.execute(
                        f"SELECT id FROM documents WHERE id IN ({', '.join('?' * len(document_ids))})", document_ids
                    )
                }
                raise DocumentsMissing([d for d in document_ids if d not in have]) from None
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        return CollectionRecord(row["id"], row["name"], row["created_at"], tuple(document_ids))

    def _delete_collection(self, collection_id: str) -> None:
        self._write("DELETE FROM collections WHERE id = ?", (collection_id,))

    def collection(self, collection_id: str) -> CollectionRecord | None:
        with self._lock:
            return self._collection(collection_id)

    def _collection(self, collection_id: str) -> CollectionRecord | None:
        row = self._db.execute("SELECT * FROM collections WHERE id = ?", (collection_id,)).fetchone()
        if row is None:
            return None
        members = self._db.execute(
            "SELECT document_id FROM collection_documents WHERE collection_id = ? ORDER BY position", (collection_id,)
        ).fetchall()
        return collection_record(dict(row), [m[0] for m in members])

    def collections(self) -> list[CollectionRecord]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM collections ORDER BY created_at DESC").fetchall()
            members = self._db.execute(
                "SELECT collection_id, document_id FROM collection_documents ORDER BY collection_id, position"
            ).fetchall()
        by_collection: dict[str, list[str]] = {}
        for m in members:
            by_collection.setdefault(m[0], []).append(m[1])
        return [collection_record(dict(r), by_collection.get(r["id"], [])) for r in rows]

    def renew(self, owner: str, lease_s: float) -> int:
        def attempt() -> int:
            with self._lock:
                return self._db.execute(
                    "UPDATE documents SET lease_until = ? WHERE owner = ? AND status = ?",
                    (time.time() + lease_s, owner, INGESTING),
                ).rowcount

        return self._retrying(attempt)

    def claim_stale(self, owner: str, lease_s: float) -> list[DocRecord]:
        def attempt() -> list[DocRecord]:
            now = time.time()
            with self._lock:  # one statement: SQLite serialises writers, so no two claim the same row
                rows = self._db.execute(
                    "UPDATE documents SET owner = ?, lease_until = ? WHERE status = ? AND owner IS NOT NULL"
                    " AND lease_until < ? RETURNING *",
                    (owner, now + lease_s, INGESTING, now),
                ).fetchall()
            return [record(dict(r)) for r in rows]

        return self._retrying(attempt)

    def _write(self, sql: str, args: tuple) -> None:
        def attempt() -> None:
            with self._lock:
                self._db.execute(sql, args)

        self._retrying(attempt)

    def _retrying(self, attempt: Callable[[], T]) -> T:
        """``attempt()``, again after ``database is locked`` with a doubling pause, for at most
        :data:`LOCK_WAIT_S`; SQLITE_FULL becomes DiskFull."""
        deadline = time.monotonic() + LOCK_WAIT_S
        pause = _BACKOFF_S[0]
        while True:
            try:
                result = attempt()
                self._keep_reserve()
                return result
            except sqlite3.OperationalError as exc:
                message = str(exc)
                if "full" in message and self._release_reserve():
                    continue  # the reserve's space is the database's now: the same write again
                if "full" in message:
                    raise DiskFull(
                        f"the disk is full: the database cannot be written ({message}); free space in the data "
                        "directory and try again"
                    ) from exc
                if "locked" not in message and "busy" not in message:
                    raise
                if time.monotonic() + pause > deadline:
                    raise StoreBusy(
                        f"the database has been locked by another process for over {LOCK_WAIT_S:.0f} s; retry "
                        "in a few seconds"
                    ) from exc
                log.warning("database is locked; retrying in %.2f s", pause)
                time.sleep(pause)
                pause = min(pause * 2, _BACKOFF_S[1])

    def _keep_reserve(self) -> None:
        """Make the reserve file when it is missing and there is room (else leave it for later)."""
        path = self.root / RESERVE_FILE
        if path.is_file():
            return
        try:
            with path.open("wb") as f:
                f.write(bytes(RESERVE_BYTES))
                os.fsync(f.fileno())
        except OSError:
            path.unlink(missing_ok=True)

    def _release_reserve(self) -> bool:
        """Give the reserve's space to SQLite; False when there is none to give."""
        try:
            (self.root / RESERVE_FILE).unlink()
        except FileNotFoundError:
            return False
        log.warning("the disk is full: released the %d-byte reserve so that the database can be written", RESERVE_BYTES)
        return True

    def _one(self, sql: str, args: tuple) -> DocRecord | None:
        row = self._db.execute(sql, args).fetchone()
        return record(dict(row)) if row else None
