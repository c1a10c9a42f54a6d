"""Document metadata in SQLite (stdlib sqlite3) and per-document files under the data directory.

``data_dir/docqa.sqlite3`` holds one row per document; ``data_dir/documents/<id>/`` holds the files,
all named by the server: ``upload.bin`` (the bytes as sent), ``text.json`` (normalised text and page
map), ``prefix.npy`` (prefix token ids) and the snapshot (``state.bin`` + ``state.json``).

A document is ``ready`` only after its snapshot manifest is on disk (see ``ingest/snapshot.py``), so
a crash during ingestion can never leave a half-written document marked ready.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ingest.extract import ExtractedText
from runtime.atomic import replacing, write_atomic

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


class DocStore:
    """Thread-safe: one connection guarded by a lock (writes are rare and small)."""

    def __init__(self, data_dir: Path) -> None:
        self.root = Path(data_dir)
        self.docs_dir = self.root / "documents"
        self.docs_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.root / "docqa.sqlite3", check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(_SCHEMA)
        self._migrate()

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
        with self._lock:
            try:
                self._db.execute(
                    "INSERT INTO documents (id, name, sha256, kind, pages, tokens, chars, status, error, created_at,"
                    " text_rules, encoding, warnings) VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?)",
                    (
                        doc_id,
                        name,
                        sha256,
                        kind,
                        pages,
                        tokens,
                        chars,
                        INGESTING,
                        time.time(),
                        text_rules,
                        encoding,
                        json.dumps(list(warnings)),
                    ),  # fmt: skip
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
        with self._lock:
            self._db.execute("UPDATE documents SET status = ?, error = ? WHERE id = ?", (status, error, doc_id))

    def set_tokens(self, doc_id: str, tokens: int) -> None:
        with self._lock:
            self._db.execute("UPDATE documents SET tokens = ? WHERE id = ?", (tokens, doc_id))

    def set_text(self, doc_id: str, extracted: ExtractedText, tokens: int) -> None:
        """Record a new extraction of the document (reingest): its text columns and prefix length."""
        with self._lock:
            self._db.execute(
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
        """Remove the row first (the document disappears at once), then its files."""
        with self._lock:
            self._db.execute("DELETE FROM documents WHERE id = ?", (doc_id,))
        shutil.rmtree(self.dir(doc_id), ignore_errors=True)

    def _one(self, sql: str, args: tuple) -> DocRecord | None:
        row = self._db.execute(sql, args).fetchone()
        return _record(row) if row else None

    # -- files ------------------------------------------------------------------------------------
    def dir(self, doc_id: str) -> Path:
        if not doc_id.isalnum():  # ids are server-generated hex; never build paths from anything else
            raise ValueError(f"bad document id {doc_id!r}")
        return self.docs_dir / doc_id

    def write_files(self, doc_id: str, upload: bytes, extracted: ExtractedText, prefix: np.ndarray) -> None:
        d = self.dir(doc_id)
        d.mkdir(parents=True, exist_ok=True)
        write_atomic(d / "upload.bin", upload)
        self.write_text(doc_id, extracted)
        self.write_prefix(doc_id, prefix)

    def write_text(self, doc_id: str, extracted: ExtractedText) -> None:
        text = {
            "text": extracted.text,
            "page_starts": extracted.page_starts,
            "kind": extracted.kind,
            "encoding": extracted.encoding,
            "rules": extracted.rules,
            "warnings": extracted.warnings,
        }
        write_atomic(self.dir(doc_id) / "text.json", json.dumps(text, ensure_ascii=False).encode())

    def read_upload(self, doc_id: str) -> bytes | None:
        """The bytes as uploaded, or None if they are gone."""
        path = self.dir(doc_id) / "upload.bin"
        return path.read_bytes() if path.is_file() else None

    def write_prefix(self, doc_id: str, prefix: np.ndarray) -> None:
        with replacing(self.dir(doc_id) / "prefix.npy") as tmp, tmp.open("wb") as f:
            np.save(f, np.ascontiguousarray(prefix, dtype=np.int32))

    def read_text(self, doc_id: str) -> ExtractedText:
        raw = json.loads((self.dir(doc_id) / "text.json").read_text(encoding="utf-8"))
        # Files written before text rules were versioned carry neither key: rules version 1.
        return ExtractedText(
            text=raw["text"],
            page_starts=raw["page_starts"],
            kind=raw["kind"],
            encoding=raw.get("encoding"),
            rules=raw.get("rules", 1),
            warnings=raw.get("warnings", []),
        )

    def read_prefix(self, doc_id: str) -> np.ndarray:
        return np.load(self.dir(doc_id) / "prefix.npy")

    def snapshot_bytes(self) -> int:
        """Bytes of all snapshot state files on disk."""
        return sum(p.stat().st_size for p in self.docs_dir.glob("*/state.bin"))


def _record(row: sqlite3.Row) -> DocRecord:
    values = dict(row)
    values["warnings"] = tuple(json.loads(values.get("warnings") or "[]"))
    return DocRecord(**values)
