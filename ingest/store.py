"""Document metadata in SQLite (stdlib sqlite3); the files are ``ingest/files.py``'s.

``data_dir/docqa.sqlite3`` holds one row per document; ``data_dir/documents/<id>/`` its files.
A document is ``ready`` only after its snapshot manifest is on disk (see ``ingest/snapshot.py``), so
a crash during ingestion can never leave a half-written document marked ready.

Another process may hold the database locked (a backup, ``sqlite3`` in a shell): every write retries
``database is locked`` with a bounded backoff (:data:`LOCK_WAIT_S` in all), then raises StoreBusy.
On a full disk SQLite cannot even record that a write failed, so the store keeps a small reserve file
(:data:`RESERVE_BYTES`) and gives its space up to the database when a write finds the disk full; it
is made again once there is room. A full disk beyond that raises DiskFull; a database that cannot be
opened, DataDirUnusable naming the path.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ingest.errors import DataDirUnusable, DiskFull, StoreBusy
from ingest.extract import ExtractedText
from ingest.files import DocFiles

log = logging.getLogger("docqa.store")
T = TypeVar("T")
#: Longest a write waits for a lock another process holds, in seconds, over all its retries.
LOCK_WAIT_S = 30.0
_BACKOFF_S = (0.05, 1.0)  # first and longest pause between retries (doubling)
#: Space kept for SQLite in ``data_dir/.reserve``, released when a write finds the disk full.
RESERVE_FILE, RESERVE_BYTES = ".reserve", 1024**2

INGESTING, READY, FAILED = "ingesting", "ready", "failed"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    sha256     TEXT NOT NULL UNIQUE,
    kind       TEXT NOT NULL,
    pages      INTEGER NOT NULL,
    tokens     INTEGER NOT NULL,
    chars      INTEGER NOT NULL,
    status     TEXT NOT NULL CHECK (status IN ('ingesting', 'ready', 'failed')),
    error      TEXT,
    created_at REAL NOT NULL,
    text_rules INTEGER NOT NULL DEFAULT 1,
    encoding   TEXT,
    warnings   TEXT NOT NULL DEFAULT '[]'
)
"""
# Columns added after the first release, as (name, definition): added to an existing database when
# missing. Rows that predate text_rules were made by rules version 1, hence its default.
_MIGRATIONS = (
    ("text_rules", "INTEGER NOT NULL DEFAULT 1"),
    ("encoding", "TEXT"),
    ("warnings", "TEXT NOT NULL DEFAULT '[]'"),
)


@dataclass(frozen=True, slots=True)
class DocRecord:
    id: str
    name: str
    sha256: str
    kind: str
    pages: int
    tokens: int  # prefix tokens (instruction + document)
    chars: int
    status: str
    error: str | None
    created_at: float  # unix seconds
    text_rules: int = 1  # the text rules version that made the stored text (ingest/normalize.py)
    encoding: str | None = None  # text and HTML uploads: the codec their bytes were decoded with
    warnings: tuple[dict, ...] = ()  # [{"page", "message"}]: pages that could not be read well


class DuplicateDocument(Exception):
    def __init__(self, existing: DocRecord) -> None:
        self.existing = existing
        super().__init__(f"document {existing.id} has the same bytes")


class DocStore(DocFiles):
    """Rows and files. Thread-safe: one connection guarded by a lock (writes are rare and small)."""

    def __init__(self, data_dir: Path) -> None:
        path = Path(data_dir) / "docqa.sqlite3"
        try:
            super().__init__(data_dir)
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=0.5)
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute(_SCHEMA)
            self._migrate()
        except (OSError, sqlite3.Error) as exc:
            raise DataDirUnusable(
                f"cannot use the data directory {Path(data_dir).resolve()} ({exc}); make it writable "
                "by this user, or set DOCQA_DATA_DIR to one that is"
            ) from exc
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
    def create(
        self,
        *,
        name: str,
        sha256: str,
        kind: str,
        pages: int,
        tokens: int,
        chars: int,
        text_rules: int = 1,
        encoding: str | None = None,
        warnings: list[dict] | tuple[dict, ...] = (),
    ) -> DocRecord:
        """Insert a new ``ingesting`` document; raise DuplicateDocument if the bytes are known."""
        doc_id = uuid.uuid4().hex[:16]
        values = (
            doc_id, name, sha256, kind, pages, tokens, chars, INGESTING, time.time(), text_rules, encoding,
            json.dumps(list(warnings)),
        )  # fmt: skip
        return self._retrying(lambda: self._insert(values))

    def _insert(self, values: tuple) -> DocRecord:
        doc_id, sha256 = values[0], values[2]
        with self._lock:
            try:
                self._db.execute(
                    "INSERT INTO documents (id, name, sha256, kind, pages, tokens, chars, status, error, created_at,"
                    " text_rules, encoding, warnings) VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?)",
                    values,
                )
            except sqlite3.IntegrityError:
                existing = self._one("SELECT * FROM documents WHERE sha256 = ?", (sha256,))
                if existing is None:  # deleted in between; let the caller retry
                    raise
                raise DuplicateDocument(existing) from None
            record = self._one("SELECT * FROM documents WHERE id = ?", (doc_id,))
        assert record is not None
        return record

    def get(self, doc_id: str) -> DocRecord | None:
        with self._lock:
            return self._one("SELECT * FROM documents WHERE id = ?", (doc_id,))

    def by_sha256(self, sha256: str) -> DocRecord | None:
        with self._lock:
            return self._one("SELECT * FROM documents WHERE sha256 = ?", (sha256,))

    def list(self) -> list[DocRecord]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM documents ORDER BY created_at DESC").fetchall()
        return [_record(r) for r in rows]

    def set_status(self, doc_id: str, status: str, error: str | None = None) -> None:
        self._write("UPDATE documents SET status = ?, error = ? WHERE id = ?", (status, error, doc_id))

    def set_tokens(self, doc_id: str, tokens: int) -> None:
        self._write("UPDATE documents SET tokens = ? WHERE id = ?", (tokens, doc_id))

    def set_text(self, doc_id: str, extracted: ExtractedText, tokens: int) -> None:
        """Record a new extraction of the document (reingest): its text columns and prefix length."""
        self._write(
            "UPDATE documents SET kind = ?, pages = ?, chars = ?, tokens = ?, text_rules = ?, encoding = ?,"
            " warnings = ? WHERE id = ?",
            (
                extracted.kind,
                extracted.pages,
                len(extracted.text),
                tokens,
                extracted.rules,
                extracted.encoding,
                json.dumps(extracted.warnings),
                doc_id,
            ),
        )

    def delete(self, doc_id: str) -> None:
        """Remove the files first, then the row: on a full disk, removing the files is what makes room
        for SQLite to write. A snapshot being written waits for the removal (the engine writes none
        for a document without a row)."""
        self.remove_files(doc_id)
        self._write("DELETE FROM documents WHERE id = ?", (doc_id,))

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
        return _record(row) if row else None


def _record(row: sqlite3.Row) -> DocRecord:
    values = dict(row)
    values["warnings"] = tuple(json.loads(values.get("warnings") or "[]"))
    return DocRecord(**values)
