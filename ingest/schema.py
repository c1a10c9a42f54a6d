"""The ``documents`` table, in one place: its columns, from which both stores' SQL is made
(ingest/sqlite_store.py, ingest/pg_store.py) and the row order ingest/store.py reads.

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
)
NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)


def create_table(dialect: Dialect) -> str:
    """``CREATE TABLE IF NOT EXISTS documents (...)`` in ``dialect``."""
    lines = ",\n".join(f"    {c.name} {c.definition(dialect)}" for c in COLUMNS)
    return f"CREATE TABLE IF NOT EXISTS {TABLE} (\n{lines}\n)"


def migrations(dialect: Dialect) -> tuple[tuple[str, str], ...]:
    """(name, definition) of the columns added after the first release, in table order."""
    return tuple((c.name, c.definition(dialect)) for c in COLUMNS if c.added)
