"""A document's files under ``data_dir/documents/<id>/``, the lock that keeps a deletion from racing a
snapshot write, and the start-up sweep of what no row owns.

Files, all named by the server: ``upload.bin`` (the bytes as sent), ``text.json`` (normalised text,
page map, and the part of the upload it is: ``first_page``, ``cut``), ``prefix.npy`` (prefix token
ids), the snapshot (``state.bin`` + ``state.json``, see ``ingest/snapshot.py``) and the answer
history (``history.npy``: earlier answers about it, server/engine/history.py). A document
longer than the context (ingest/segments.py) has no ``prefix.npy`` of its own but ``segments.json``,
its FTS5 index ``segments.sqlite3`` (store/index.py), and ``segments/<i>/`` holding each segment's
``prefix.npy``, snapshot and history.

A collection (store/docstore.py) has ``data_dir/collections/<id>/``: its ranking index
(store/collection_index.py), made from its documents' files and made again when they change, so it
is never more than a cache of them.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ingest import segments as segs
from ingest.extract import ExtractedText
from runtime.atomic import TMP_SUFFIX, replacing, temp_owner, write_atomic
from store import checked
from store import index as segment_index

log = logging.getLogger("docqa.store")
UPLOAD_FILE, TEXT_FILE, PREFIX_FILE = "upload.bin", "text.json", "prefix.npy"
HISTORY_FILE = "history.npy"


def remove_histories(directory: Path) -> None:
    """Remove the answer history of a document and of its segments (a re-ingest: its questions were
    about the old text)."""
    for path in [directory / HISTORY_FILE, *directory.glob(f"segments/*/{HISTORY_FILE}")]:
        path.unlink(missing_ok=True)


@dataclass(slots=True)
class Sweep:
    """What the start-up sweep removed: document directories without a row, and temp files left by
    writes that never finished (a crash, a full disk)."""

    dirs: list[str] = field(default_factory=list)  # document ids (and collection ids)
    tmp_files: list[Path] = field(default_factory=list)
    bytes_freed: int = 0


class DocFiles:
    """The files of every document. Thread-safe: a document's files are written, removed and (as a
    snapshot) read under its own lock (:meth:`holding`). The ``read_*`` methods only read: a damaged
    file raises its DocumentFilesDamaged subclass (store/checked.py) and is repaired by the server
    (server/engine/repairs.py), never here."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.docs_dir = self.root / "documents"
        self.docs_dir.mkdir(parents=True, exist_ok=True)
        self.collections_dir = self.root / "collections"
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def dir(self, doc_id: str) -> Path:
        if not doc_id.isalnum():  # ids are server-generated hex; never build paths from anything else
            raise ValueError(f"bad document id {doc_id!r}")
        return self.docs_dir / doc_id

    def collection_dir(self, collection_id: str) -> Path:
        """Where collection ``collection_id``'s files are (made when first needed)."""
        if not collection_id.isalnum():  # ids are server-generated hex
            raise ValueError(f"bad collection id {collection_id!r}")
        return self.collections_dir / collection_id

    @contextmanager
    def holding_collection(self, collection_id: str) -> Iterator[Path]:
        """Hold collection ``collection_id``'s lock (its index is checked, rebuilt and read under it);
        yields its directory, made if missing."""
        directory = self.collection_dir(collection_id)
        with self._locks_guard:
            lock = self._locks.setdefault(f"collection/{collection_id}", threading.Lock())
        with lock:
            directory.mkdir(parents=True, exist_ok=True)
            yield directory

    def remove_collection_files(self, collection_id: str) -> None:
        """Remove a collection's directory (waiting for a question reading its index)."""
        directory = self.collection_dir(collection_id)
        with self._locks_guard:
            lock = self._locks.setdefault(f"collection/{collection_id}", threading.Lock())
        with lock:
            shutil.rmtree(directory, ignore_errors=True)
        with self._locks_guard:
            self._locks.pop(f"collection/{collection_id}", None)

    def state_dir(self, key: str) -> Path:
        """Where the prefix and snapshot of ``key`` (a document, or one of its segments: segments.key)
        are."""
        doc_id, index = segs.parse_key(key)
        return self.dir(doc_id) if index is None else self.dir(doc_id) / "segments" / str(index)

    def read_segments(self, doc_id: str) -> list[segs.Segment] | None:
        """A segmented document's segments; None for a document answered whole (or gone). Raises
        SegmentsDamaged (store/checked.py)."""
        try:
            return checked.read_segments(self.dir(doc_id))
        except FileNotFoundError:
            return None

    def rank_segments(
        self, doc_id: str, question: str, history: Sequence[tuple[str, str]] = ()
    ) -> list[tuple[int, float]]:
        """A segmented document's segments ranked for ``question`` (and a conversation's earlier
        turns), ``(segment index, score)`` best first. Raises IndexDamaged when its index is missing,
        damaged or old (store/checked.py ``rank_segments``)."""
        return checked.rank_segments(self.dir(doc_id), question, history)

    def keys(self, doc_id: str) -> list[str]:
        """What the engine prefills for ``doc_id``: the document, or each of its segments."""
        segments = self.read_segments(doc_id)
        return [doc_id] if segments is None else [segs.key(doc_id, s.index) for s in segments]

    @contextmanager
    def holding(self, doc_id: str) -> Iterator[Path]:
        """Hold ``doc_id``'s lock: no deletion or eviction of its files meanwhile. Yields its directory."""
        with self._locks_guard:
            lock = self._locks.setdefault(doc_id, threading.Lock())
        with lock:
            yield self.dir(doc_id)

    def write_files(self, doc_id: str, upload: bytes, extracted: ExtractedText, prefix: np.ndarray | None) -> None:
        """Create the document's directory and write its upload, text and prefix (each crash-safe;
        no prefix for a segmented document: :meth:`write_segments`)."""
        self.dir(doc_id).mkdir(exist_ok=True)
        write_atomic(self.dir(doc_id) / UPLOAD_FILE, upload)
        self.write_text(doc_id, extracted)
        if prefix is not None:
            self.write_prefix(doc_id, prefix)

    def write_segments(self, doc_id: str, text: str, segments: list[segs.Segment], prefixes: list[np.ndarray]) -> None:
        """A segmented document's files: each segment's prefix, then the FTS5 index, then the segment
        list (last: a directory with ``segments.json`` is complete). The old whole-document prefix,
        if any, is removed."""
        for segment, prefix in zip(segments, prefixes, strict=True):
            directory = self.state_dir(segs.key(doc_id, segment.index))
            directory.mkdir(parents=True, exist_ok=True)
            _write_npy(directory / PREFIX_FILE, prefix)
        segment_index.build(self.dir(doc_id), [text[s.start : s.end] for s in segments])
        segs.write(self.dir(doc_id), segments)
        (self.dir(doc_id) / PREFIX_FILE).unlink(missing_ok=True)

    def remove_segments(self, doc_id: str) -> None:
        """Forget a document's segments (re-ingested whole): list first, then index and directories."""
        directory = self.dir(doc_id)
        (directory / segs.SEGMENTS_FILE).unlink(missing_ok=True)
        (directory / segment_index.INDEX_FILE).unlink(missing_ok=True)
        shutil.rmtree(directory / "segments", ignore_errors=True)

    def write_text(self, doc_id: str, extracted: ExtractedText) -> None:
        text = {
            "text": extracted.text,
            "page_starts": extracted.page_starts,
            "first_page": extracted.first_page,
            "cut": extracted.cut,
            "kind": extracted.kind,
            "encoding": extracted.encoding,
            "rules": extracted.rules,
            "warnings": extracted.warnings,
            "ocr_pages": extracted.ocr_pages,
            "page_labels": extracted.page_labels,
        }
        write_atomic(self.dir(doc_id) / TEXT_FILE, json.dumps(text, ensure_ascii=False).encode())

    def write_prefix(self, doc_id: str, prefix: np.ndarray) -> None:
        _write_npy(self.dir(doc_id) / PREFIX_FILE, prefix)

    def read_upload(self, doc_id: str) -> bytes | None:
        """The bytes as uploaded, or None if they are gone."""
        path = self.dir(doc_id) / UPLOAD_FILE
        return path.read_bytes() if path.is_file() else None

    def open_upload(self, doc_id: str) -> BinaryIO | None:
        """The bytes as uploaded, opened for reading (the caller closes it), or None if they are gone."""
        try:
            return (self.dir(doc_id) / UPLOAD_FILE).open("rb")
        except (FileNotFoundError, NotADirectoryError):
            return None

    def read_text(self, doc_id: str) -> ExtractedText:
        """The stored text; FileNotFoundError when it was never stored (a failed upload), TextDamaged
        when it is damaged (store/checked.py). Files written before text rules were versioned
        carry no ``rules``: version 1."""
        return checked.read_text(self.dir(doc_id))

    def read_prefix(self, key: str) -> np.ndarray:
        """The prefix token ids of a document or segment (``key``: segments.key), int32 [n];
        PrefixDamaged when damaged (store/checked.py), FileNotFoundError when missing."""
        return checked.read_prefix(self.state_dir(key))

    def remove_files(self, doc_id: str) -> None:
        """Remove the document's directory (waiting for a snapshot being written to it)."""
        with self.holding(doc_id) as directory:
            shutil.rmtree(directory, ignore_errors=True)
            if directory.exists():  # rmtree skipped what it could not remove: say what is left
                log.error("could not remove all of %s: %s", directory, sorted(p.name for p in directory.iterdir()))
        with self._locks_guard:
            self._locks.pop(doc_id, None)

    def snapshot_bytes(self) -> int:
        """Bytes of all snapshot state files on disk."""
        whole = self.docs_dir.glob("*/state.bin")
        return sum(_size(p) for p in [*whole, *self.docs_dir.glob("*/segments/*/state.bin")])

    def usage(self) -> int:
        """Bytes of every file under the documents directory."""
        return sum(_size(p) for p in self.docs_dir.rglob("*") if p.is_file())

    def sweep(self, known_ids: Iterable[str], known_collections: Iterable[str] | None = None) -> Sweep:
        """Remove document directories that no row owns (collection directories too, when
        ``known_collections`` is given) and temp files of writes that never finished (those of a
        live process other than this one are left alone). Run at start-up."""
        known, report = set(known_ids), Sweep()
        owned = [(self.docs_dir, known)]
        if known_collections is not None and self.collections_dir.is_dir():
            owned.append((self.collections_dir, set(known_collections)))
        for parent, names in owned:
            for entry in sorted(parent.iterdir()):
                if entry.is_dir() and entry.name not in names:
                    freed = sum(_size(p) for p in entry.rglob("*") if p.is_file())
                    shutil.rmtree(entry, ignore_errors=True)
                    report.dirs.append(entry.name)
                    report.bytes_freed += freed
        for tmp in sorted(self.root.rglob(f"*{TMP_SUFFIX}")):
            if tmp.is_file() and _stale(tmp):
                size = _size(tmp)
                tmp.unlink(missing_ok=True)
                report.tmp_files.append(tmp)
                report.bytes_freed += size
        return report


def _write_npy(path: Path, ids: np.ndarray) -> None:
    with replacing(path) as tmp, tmp.open("wb") as f:
        np.save(f, np.ascontiguousarray(ids, dtype=np.int32))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _stale(tmp: Path) -> bool:
    """A temp file (``.<name>.<pid>-<n>.tmp``, runtime/atomic.py) whose writer is this process or gone."""
    pid = temp_owner(tmp)
    if pid is None:
        return True
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
