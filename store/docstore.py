"""Document metadata behind one interface; the files are ``store/files.py``'s.

Two implementations: :class:`store.sqlite_store.SqliteStore` (``data_dir/docqa.sqlite3``, the
default on one machine) and :class:`store.pg_store.PostgresStore` (``DOCQA_DATABASE_URL=
postgresql://...``, psycopg 3, for several servers sharing one data directory).
``store/stores.open_store`` picks one. Both keep one row per document with the sha256 of its
bytes unique, so two servers ingesting the same bytes at once make one document: the second insert
raises DuplicateDocument with the first one's row.

A document is ``ready`` only after its snapshot manifest is on disk (see ``ingest/snapshot.py``), so
a crash during ingestion can never leave a half-written document marked ready. A row ``ingesting``
may name its ``owner`` (the server process prefilling it) and hold a lease (``lease_until``, unix
seconds) that the owner renews; a lease that runs out means the owner died, and another server may
claim the document (:meth:`DocStore.claim_stale`) to resume it.

A collection (:class:`CollectionRecord`) names documents already stored, in order, under a name
unique in the store; deleting a document removes it from its collections (store/schema.py). Its
files (the ranking index of its documents, store/collection_index.py) are ``files.DocFiles``'.

Reads only read: a damaged file raises its typed error (store/checked.py) and nothing is written on
the way; the server repairs it (server/engine/repairs.py) and reads again. Nothing is assigned onto
a store from outside: what a repair needs (the extractor, the tokenizer) is passed to the repair.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ingest.extract import ExtractedText
from store import schema
from store.files import DocFiles

log = logging.getLogger("docqa.store")

INGESTING, READY, FAILED = "ingesting", "ready", "failed"

#: Columns of a row, in table order (both implementations share them: store/schema.py).
COLUMNS = schema.NAMES


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
    owner: str | None = None  # the server prefilling it (cluster replicas), None on one machine
    lease_until: float | None = None  # unix seconds; the owner renews it while it prefills
    source_path: str | None = None  # the watched file it was read from (server/service/watch.py); None: uploaded
    source_stat: str | None = None  # that file's "<size>:<mtime ns>" when it was read
    read_at: float | None = None  # unix seconds: when that file was last read


class DuplicateDocument(Exception):
    def __init__(self, existing: DocRecord) -> None:
        self.existing = existing
        super().__init__(f"document {existing.id} has the same bytes")


@dataclass(frozen=True, slots=True)
class CollectionRecord:
    """Documents asked together: ``document_ids`` in the order they were given."""

    id: str
    name: str
    created_at: float  # unix seconds
    document_ids: tuple[str, ...] = ()


class DuplicateCollection(Exception):
    """A collection with this name exists already (``existing``)."""

    def __init__(self, existing: CollectionRecord) -> None:
        self.existing = existing
        super().__init__(f"collection {existing.id} is named {existing.name!r} already")


class DocumentsMissing(Exception):
    """A new collection names documents that are not (or no longer) stored: ``ids``, in the order given."""

    def __init__(self, ids: Sequence[str]) -> None:
        self.ids = tuple(ids)
        super().__init__(f"no document with id {', '.join(self.ids)}")


def printable(name: str, limit: int = 200) -> str:
    """``name`` as a document or collection name is kept: characters that are not printable dropped
    (NUL, which PostgreSQL text cannot hold; bidirectional overrides such as U+202E, which make
    "deed" + U+202E + "fdp.exe" show as "deedexe.pdf"; zero-width spaces; controls), each run of whitespace one
    space, at most ``limit`` characters; "" when nothing printable is left."""
    kept = "".join(ch if ch.isprintable() else " " if ch.isspace() else "" for ch in name)
    return " ".join(kept.split())[:limit]


class DocStore(DocFiles, ABC):
    """Rows and files. Thread-safe. Subclasses implement the row operations below ``# -- rows``."""

    #: Servers sharing the database (:meth:`share`): this one's name, written as the ``owner`` of what
    #: it ingests, and the seconds its lease lasts unless renewed. None: the only server.
    owner: str | None = None
    lease_s: float = 0.0

    def share(self, owner: str, lease_s: float) -> None:
        """Ingest as ``owner`` with leases of ``lease_s`` seconds (servers sharing the database)."""
        self.owner, self.lease_s = owner, lease_s

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
        source: tuple[str, str | None, float] | None = None,
    ) -> DocRecord:
        """Insert a new ``ingesting`` document; raise DuplicateDocument if the bytes are known. ``source``:
        the watched file it is read from, as :meth:`set_source` records it (``(path, stat, read_at)``),
        written with the row itself, so that no crash leaves a folder's document looking uploaded."""
        owner, lease_until = self.owner, (time.time() + self.lease_s if self.owner else None)
        name = printable(name) or "document"
        row = {
            "id": uuid.uuid4().hex[:16], "name": name, "sha256": sha256, "kind": kind, "pages": pages,
            "tokens": tokens, "chars": chars, "status": INGESTING, "error": None, "created_at": time.time(),
            "text_rules": text_rules, "encoding": encoding, "warnings": json.dumps(list(warnings)), "owner": owner,
            "lease_until": lease_until, "source_path": None, "source_stat": None, "read_at": None,
        }  # fmt: skip
        if source is not None:
            row["source_path"], row["source_stat"], row["read_at"] = source
        return self._insert(row)

    def set_source(self, doc_id: str, path: str | None, stat: str | None, read_at: float | None = None) -> None:
        """Record the watched file a document was read from (``stat``: its "<size>:<mtime ns>"), and
        when it was read (None: keep the time: the file was touched, not changed, or it moved)."""
        columns: dict[str, Any] = {"source_path": path, "source_stat": stat}
        if read_at is not None:
            columns["read_at"] = read_at
        self._update(doc_id, columns)

    def set_upload(self, doc_id: str, name: str, sha256: str) -> None:
        """A watched file changed: the document's new name and bytes (``upload.bin`` is rewritten by
        the caller before its text is stored again)."""
        self._update(doc_id, {"name": printable(name) or "document", "sha256": sha256})

    def set_status(self, doc_id: str, status: str, error: str | None = None) -> None:
        """``ingesting`` again (a reingest, a missing snapshot) makes this server its owner."""
        columns: dict[str, Any] = {"status": status, "error": error}
        if status == INGESTING and self.owner:
            columns |= {"owner": self.owner, "lease_until": time.time() + self.lease_s}
        self._update(doc_id, columns)

    def set_text(self, doc_id: str, extracted: ExtractedText, tokens: int) -> None:
        """Record a new extraction of the document (reingest): its text columns and prefix length."""
        self._update(
            doc_id,
            {
                "kind": extracted.kind,
                "pages": extracted.pages,
                "chars": len(extracted.text),
                "tokens": tokens,
                "text_rules": extracted.rules,
                "encoding": extracted.encoding,
                "warnings": json.dumps(extracted.warnings),
            },
        )

    def delete(self, doc_id: str) -> None:
        """Remove the files first, then the row: on a full disk, removing the files is what makes room
        for the database to write. A snapshot being written waits for the removal (the engine writes
        none for a document without a row). The document leaves its collections with its row."""
        self.remove_files(doc_id)
        self._delete(doc_id)

    # -- collections ------------------------------------------------------------------------------
    def create_collection(self, name: str, document_ids: Sequence[str]) -> CollectionRecord:
        """A new collection of ``document_ids`` (in that order, each once) named ``name`` (made
        :func:`printable`), in one transaction. Raises DuplicateCollection when the name is taken,
        DocumentsMissing naming the ids that have no document (a document deleted meanwhile included:
        nothing is written)."""
        ids = list(dict.fromkeys(document_ids))
        row = {"id": uuid.uuid4().hex[:16], "name": printable(name) or "collection", "created_at": time.time()}
        return self._insert_collection(row, ids)

    def delete_collection(self, collection_id: str) -> None:
        """Remove the collection's files (its index), then its row and its member rows. Its
        documents stay."""
        self.remove_collection_files(collection_id)
        self._delete_collection(collection_id)

    @abstractmethod
    def _insert_collection(self, row: dict[str, Any], document_ids: list[str]) -> CollectionRecord: ...

    @abstractmethod
    def _delete_collection(self, collection_id: str) -> None: ...

    @abstractmethod
    def collection(self, collection_id: str) -> CollectionRecord | None: ...

    @abstractmethod
    def collections(self) -> list[CollectionRecord]:
        """Every collection, newest first."""

    # -- rows -------------------------------------------------------------------------------------
    @abstractmethod
    def _insert(self, row: dict[str, Any]) -> DocRecord:
        """Insert ``row``; DuplicateDocument(existing) when its sha256 has a row already."""

    @abstractmethod
    def _update(self, doc_id: str, columns: dict[str, Any]) -> None: ...

    @abstractmethod
    def _delete(self, doc_id: str) -> None: ...

    @abstractmethod
    def get(self, doc_id: str) -> DocRecord | None: ...

    @abstractmethod
    def by_sha256(self, sha256: str) -> DocRecord | None: ...

    @abstractmethod
    def list(self) -> list[DocRecord]:
        """Every document, newest first."""

    @abstractmethod
    def renew(self, owner: str, lease_s: float) -> int:
        """Extend the lease of every ``ingesting`` row ``owner`` holds; the number of rows."""

    @abstractmethod
    def claim_stale(self, owner: str, lease_s: float) -> list[DocRecord]:
        """Take over the ``ingesting`` rows whose owner's lease ran out (a dead server), atomically:
        two servers claiming at once each get different rows."""

    @abstractmethod
    def close(self) -> None: ...


def collection_record(values: dict[str, Any], document_ids: Sequence[str]) -> CollectionRecord:
    """A collections row and its member ids (in position order) as a CollectionRecord."""
    return CollectionRecord(values["id"], values["name"], float(values["created_at"]), tuple(document_ids))


def record(values: dict[str, Any]) -> DocRecord:
    """A row (column name -> value) as a DocRecord."""
    values = dict(values)
    values["warnings"] = tuple(json.loads(values.get("warnings") or "[]"))
    return DocRecord(**values)
