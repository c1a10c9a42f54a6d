"""Open the document store that the settings name: PostgreSQL or SQLite (``store/docstore.py``)."""

from __future__ import annotations

from pathlib import Path

from store.docstore import DocStore


def open_store(data_dir: Path, database_url: str | None = None) -> DocStore:
    """PostgreSQL when ``database_url`` is given (``postgresql://...``), else SQLite in ``data_dir``."""
    if database_url:
        from store.pg_store import PostgresStore  # psycopg: only in the `cluster` install

        return PostgresStore(data_dir, database_url)
    from store.sqlite_store import SqliteStore

    return SqliteStore(data_dir)
