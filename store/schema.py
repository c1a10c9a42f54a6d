"""The tables, in one place: their columns, from which both stores' SQL is made
(store/sqlite_store.py, store/pg_store.py) and the row order store/docstore.py reads.

``documents`` holds one row per document. ``collections`` names a set of documents asked together
(server/service/collection.py), and ``collection_documents`` lists each collection's documents in order
(``position``): a members table rather than a list column, so that deleting a document removes it
from its collections in the same statement (``ON DELETE CASCADE``; SQLite enforces foreign keys only
with ``PRAGMA foreign_keys = ON``, which the SQLite store sets on its connection), and a collection
can never name a document that is gone (a racing delete makes the insert fail).

A column is (name, type, constraint, since): ``type`` is ours (``text``, ``int``, ``real``), spelled
per dialect by :data:`TYPES` (a unix time is SQLite's REAL and PostgreSQL's DOUBLE PRECISION);
``since`` marks a column added after the first release, which an older SQLite database gains by
``ALTER TABLE ADD COLUMN`` (its constraint must then have a default, or allow NULL: rows that predate
``text_rules`` were made by text rules version 1, hence its default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Dialect = Literal["sqlite", "postgresql"]
#: Our column types -> each dialect's.
TYPES: dict[str, dict[Dialect, str]] = {
    "text": {"sqlite": "TEXT", "postgresql": "TEXT"},
    "int": {"sqlite": "INTEGER", "postgresql": "INTEGER"},
    "real": {"sqlite": "REAL", "postgresql": "DOUBLE PRECISION"},
}


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: str  # a key of TYPES
    constraint: str = ""  # SQL after the type, the same in both dialects
    added: bool = False  # added after the first release (migrated into older SQLite databases)

    def definition(self, dialect: Dialect) -> str:
        return f"{TYPES[self.type][dialect]} {self.constraint}".strip()


TABLE = "documents"
COLUMNS: tuple[Column, ...] = (
    Column("id", "text", "PRIMARY KEY"),
    Column("name", "text", "NOT NULL"),
    Column("sha256", "text", "NOT NULL UNIQUE"),
    Column("kind", "text", "NOT NULL"),
    Column("pages", "int", "NOT NULL"),
    Column("tokens", "int", "NOT NULL"),
    Column("chars", "int", "NOT NULL"),
    Column("status", "text", "NOT NULL CHECK (status IN ('ingesting', 'ready', 'failed'))"),
    Column("error", "text"),
    Column("created_at", "real", "NOT NULL"),
    Column("text_rules", "int", "NOT NULL DEFAULT 1", added=True),
    Column("encoding", "text", added=True),
    Column("warnings", "text", "NOT NULL DEFAULT '[]'", added=True),
    Column("owner", "text", added=True),
    Column("lease_until", "real", added=True),
    # A document read from a watched folder (server/service/watch.py): the file, its size and mtime when it
    # was read ("<bytes>:<mtime ns>", so a restart re-reads only what changed) and when (unix seconds).
    Column("source_path", "text", added=True),
    Column("source_stat", "text", added=True),
    Column("read_at", "real", added=True),
)
NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)


@dataclass(frozen=True, slots=True)
class Table:
    """A table: its columns, its table constraints and its indexes (SQL the same in both dialects)."""

    name: str
    columns: tuple[Column, ...]
    constraints: tuple[str, ...] = ()
    indexes: tuple[tuple[str, str], ...] = ()  # (index name, its column list)

    def create(self, dialect: Dialect) -> tuple[str, ...]:
        """``CREATE TABLE IF NOT EXISTS`` and its ``CREATE INDEX IF NOT EXISTS`` statements."""
        lines = [f"    {c.name} {c.definition(dialect)}" for c in self.columns]
        lines += [f"    {c}" for c in self.constraints]
        body = ",\n".join(lines)
        indexes = tuple(f"CREATE INDEX IF NOT EXISTS {n} ON {self.name} ({cols})" for n, cols in self.indexes)
        return (f"CREATE TABLE IF NOT EXISTS {self.name} (\n{body}\n)", *indexes)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


DOCUMENTS = Table(TABLE, COLUMNS)
COLLECTIONS = Table(
    "collections",
    (
        Column("id", "text", "PRIMARY KEY"),
        Column("name", "text", "NOT NULL UNIQUE"),  # unique: what a person picks a collection by
        Column("created_at", "real", "NOT NULL"),
    ),
)
MEMBERS = Table(
    "collection_documents",
    (
        Column("collection_id", "text", "NOT NULL REFERENCES collections (id) ON DELETE CASCADE"),
        Column("document_id", "text", "NOT NULL REFERENCES documents (id) ON DELETE CASCADE"),
        Column("position", "int", "NOT NULL"),  # 0-based order in the collection
    ),
    constraints=("PRIMARY KEY (collection_id, document_id)",),
    indexes=(("collection_documents_by_document", "document_id"),),  # the cascade of a document's delete
)
#: Every table, in the order they are made (a table before those that reference it).
TABLES: tuple[Table, ...] = (DOCUMENTS, COLLECTIONS, MEMBERS)


def create_tables(dialect: Dialect) -> tuple[str, ...]:
    """Every statement that makes the schema in ``dialect`` (:data:`TABLES`), idempotent: run at
    every start, so a database made before collections gains their tables."""
    return tuple(sql for table in TABLES for sql in table.create(dialect))


def migrations(dialect: Dialect) -> tuple[tuple[str, str], ...]:
    """(name, definition) of the columns added after the first release, in table order."""
    return tuple((c.name, c.definition(dialect)) for c in COLUMNS if c.added)
