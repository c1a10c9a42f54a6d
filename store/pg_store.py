"""Document metadata in PostgreSQL (psycopg 3), for servers that share one data directory.

Selected by ``DOCQA_DATABASE_URL=postgresql://...`` (``store/docstore.open_store``). The table is the
SQLite one; ``sha256`` is UNIQUE, so two servers inserting the same bytes at once make one row: the
insert is ``ON CONFLICT (sha256) DO NOTHING``, and the loser gets DuplicateDocument with the winner's
row. The schema is created under an advisory lock, since ``CREATE TABLE IF NOT EXISTS`` from two
servers starting together can still collide in PostgreSQL's catalog.

One connection per store, in autocommit, guarded by a lock (writes are rare and small). A dropped
connection (a database restart, a failover) is opened again once per call; a database that stays
unreachable raises StoreBusy (503 with Retry-After), one that refuses the credentials at start-up
DataDirUnusable naming the host.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import dict_row

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
_SCHEMA_LOCK = 0x646F6371  # advisory lock key ("docq") held while the schema is created
_CONNECT_TIMEOUT_S = 5

_SCHEMA = schema.create_tables("postgresql")


class PostgresStore(DocStore):
    def __init__(self, data_dir: Path, url: str) -> None:
        self._url = url
        self._lock = threading.Lock()
        try:
            DocFiles.__init__(self, data_dir)
        except OSError as exc:
            raise DataDirUnusable(
                f"cannot use the data directory {Path(data_dir).resolve()} ({exc}); make it writable, or set "
                "DOCQA_DATA_DIR to one that is"
            ) from exc
        try:
            self._db = self._connect()
            with self._db.transaction():
                self._db.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                for statement in _SCHEMA:
                    self._db.execute(statement)
                for name, definition in schema.migrations("postgresql"):  # columns added since a database was made
                    self._db.execute(f"ALTER TABLE documents ADD COLUMN IF NOT EXISTS {name} {definition}")
        except psycopg.Error as exc:
            raise DataDirUnusable(
                f"cannot use the database at {_where(url)} ({_first_line(exc)}); check DOCQA_DATABASE_URL"
            ) from exc

    def _connect(self) -> psycopg.Connection:
        return psycopg.connect(self._url, autocommit=True, row_factory=dict_row, connect_timeout=_CONNECT_TIMEOUT_S)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- rows -------------------------------------------------------------------------------------
    def _insert(self, row: dict[str, Any]) -> DocRecord:
        sql = (
            f"INSERT INTO documents ({', '.join(COLUMNS)}) VALUES ({', '.join(['%s'] * len(COLUMNS))})"
            " ON CONFLICT (sha256) DO NOTHING RETURNING *"
        )
        for _ in range(3):  # the existing row may be deleted between the conflict and the read
            created = self._fetch(sql, tuple(row[c] for c in COLUMNS))
            if created:
                return record(created[0])
            existing = self.by_sha256(row["sha256"])
            if existing is not None:
                raise DuplicateDocument(existing)
        raise StoreBusy("the document was being deleted and uploaded at once; upload it again")

    def get(self, doc_id: str) -> DocRecord | None:
        rows = self._fetch("SELECT * FROM documents WHERE id = %s", (doc_id,))
        return record(rows[0]) if rows else None

    def by_sha256(self, sha256: str) -> DocRecord | None:
        rows = self._fetch("SELECT * FROM documents WHERE sha256 = %s", (sha256,))
        return record(rows[0]) if rows else None

    def list(self) -> list[DocRecord]:
        return [record(r) for r in self._fetch("SELECT * FROM documents ORDER BY created_at DESC", ())]

    def _update(self, doc_id: str, columns: dict[str, Any]) -> None:
        names = ", ".join(f"{name} = %s" for name in columns)  # names are ours, never the user's
        self._run(lambda db: db.execute(f"UPDATE documents SET {names} WHERE id = %s", (*columns.values(), doc_id)))

    def _delete(self, doc_id: str) -> None:
        self._run(lambda db: db.execute("DELETE FROM documents WHERE id = %s", (doc_id,)))

    # -- collections ------------------------------------------------------------------------------
    def _insert_collection(self, row: dict[str, Any], document_ids: list[str]) -> CollectionRecord:
        def insert(db: psycopg.Connection) -> None:
            with db.transaction():
                db.execute(
                    "INSERT INTO collections (id, name, created_at) VALUES (%s, %s, %s)",
                    (row["id"], row["name"], row["created_at"]),
                )
                with db.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO collection_documents (collection_id, document_id, position) VALUES (%s, %s, %s)",
                        [(row["id"], doc_id, i) for i, doc_id in enumerate(document_ids)],
                    )

        try:
            self._run(insert)
        except pg_errors.UniqueViolation:
            existing = self._by_name(row["name"])
            if existing is None:  # deleted in between: the name is free again
                raise StoreBusy("the collection name was being deleted and taken at once; try again") from None
            raise DuplicateCollection(existing) from None
        except pg_errors.ForeignKeyViolation:
            have = {r["id"] for r in self._fetch("SELECT id FROM documents WHERE id = ANY(%s)", (document_ids,))}
            raise DocumentsMissing([d for d in document_ids if d not in have]) from None
        return CollectionRecord(row["id"], row["name"], row["created_at"], tuple(document_ids))

    def _by_name(self, name: str) -> CollectionRecord | None:
        rows = self._fetch("SELECT id FROM collections WHERE name = %s", (name,))
        return self.collection(rows[0]["id"]) if rows else None

    def _delete_collection(self, collection_id: str) -> None:
        self._run(lambda db: db.execute("DELETE FROM collections WHERE id = %s", (collection_id,)))

    def collection(self, collection_id: str) -> CollectionRecord | None:
        rows = self._fetch("SELECT * FROM collections WHERE id = %s", (collection_id,))
        if not rows:
            return None
        members = self._fetch(
            "SELECT document_id FROM collection_documents WHERE collection_id = %s ORDER BY position", (collection_id,)
        )
        return collection_record(rows[0], [m["document_id"] for m in members])

    def collections(self) -> list[CollectionRecord]:
        rows = self._fetch("SELECT * FROM collections ORDER BY created_at DESC", ())
        members = self._fetch(
            "SELECT collection_id, document_id FROM collection_documents ORDER BY collection_id, position", ()
        )
        by_collection: dict[str, list[str]] = {}
        for m in members:
            by_collection.setdefault(m["collection_id"], []).append(m["document_id"])
        return [collection_record(r, by_collection.get(r["id"], [])) for r in rows]

    def renew(self, owner: str, lease_s: float) -> int:
        sql = "UPDATE documents SET lease_until = %s WHERE owner = %s AND status = %s"
        return self._run(lambda db: db.execute(sql, (time.time() + lease_s, owner, INGESTING)).rowcount)

    def claim_stale(self, owner: str, lease_s: float) -> list[DocRecord]:
        # One UPDATE whose WHERE is re-checked on each row it locks (READ COMMITTED): a row another
        # server claimed first no longer matches, so no two servers resume the same document.
        now = time.time()
        rows = self._fetch(
            "UPDATE documents SET owner = %s, lease_until = %s WHERE status = %s AND owner IS NOT NULL"
            " AND lease_until < %s RETURNING *",
            (owner, now + lease_s, INGESTING, now),
        )
        return [record(r) for r in rows]

    def _fetch(self, sql: str, args: tuple) -> list[dict[str, Any]]:
        return self._run(lambda db: db.execute(sql, args).fetchall())

    def _run(self, call: Callable[[psycopg.Connection], T]) -> T:
        """``call(connection)`` under the lock; once more on a new connection if this one dropped."""
        with self._lock:
            for attempt in (1, 2):
                try:
                    if self._db.closed:
                        self._db = self._connect()
                    return call(self._db)
                except pg_errors.DiskFull as exc:
                    raise DiskFull(f"the database server's disk is full ({_first_line(exc)})") from exc
                except psycopg.OperationalError as exc:
                    if attempt == 1 and self._db.closed:
                        log.warning("the database connection dropped (%s); connecting again", _first_line(exc))
                        continue
                    raise StoreBusy(
                        f"the database at {_where(self._url)} is unreachable ({_first_line(exc)}); retry in a few "
                        "seconds"
                    ) from exc
        raise AssertionError("unreachable")


def _where(url: str) -> str:
    """The URL without its password, for messages."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    return f"{info.get('host', 'localhost')}:{info.get('port', 5432)}/{info.get('dbname', '')}"


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
