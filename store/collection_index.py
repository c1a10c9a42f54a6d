"""Ranking a collection's documents for a question: one FTS5 BM25 index across all of them.

A collection (store/docstore.py) is answered like a long document whose segments are its documents: a
document answered whole is one *unit*, a segmented one (ingest/segments.py) gives one unit per
segment. One index over every unit, so BM25's document frequencies are the collection's: a word
found in every document hardly ranks, one found in a single document ranks it first. The index is
store/index.py's (the FTS5 table ``segments``, ``porter unicode61``, bigrams for unspaced scripts,
:data:`store.index.INDEX_VERSION`), so :func:`store.index.rank_conversation` ranks it and
:func:`store.index.chosen` picks the best unit, or the best two when they score close. It is
``data_dir/collections/<id>/segments.sqlite3``, with two tables of its own in the same file:
``units`` (row id -> document id, segment index or NULL) and ``made_from`` (its fingerprint).

It is a cache of the members' files, made again whenever they differ from what it was made from.
The fingerprint (:func:`fingerprint`) is a SHA-256 over the members in order, each by its id, the
sha256 of its upload, its text rules version, its character and token counts, and the inode, size
and modification time (ns) of its ``text.json`` and ``segments.json``: a member added or removed (a
deleted document leaves its collections) changes the list; a re-ingest writes ``text.json`` again
(and the segment list, when it is split) through a temp file and a rename (runtime/atomic.py), so
the file is a new inode even when the text comes out the same and the clock has not ticked (file
times are as coarse as the kernel's tick); a text repaired from the upload (server/api/routes/documents.py) is
too. Checking costs a row read and two ``stat`` calls per member, no text is read; a rebuild reads
every member's text (an index of ~2 MiB of text builds in 0.1-0.5 s on a loaded 2-core EPYC,
store/index.py). The check, a rebuild and the ranking run under the collection's lock
(``DocFiles.holding_collection``), so two questions in one server never build it at once nor read
one half-replaced; the file itself is replaced atomically (servers sharing a data directory may
each build it: the same content, the last rename wins).
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from ingest import segments as segs
from ingest.errors import DocumentFilesDamaged, IndexDamaged, TextDamaged
from runtime.atomic import replacing
from store import index
from store.docstore import DocRecord
from store.files import TEXT_FILE, DocFiles


@dataclass(frozen=True, slots=True)
class Unit:
    """What a question can be answered from: document ``doc_id`` whole (``segment`` None), or one
    of its segments."""

    doc_id: str
    segment: int | None = None


class MemberDamaged(Exception):
    """A member's stored text or segment list is damaged beyond repair (``error``), so the
    collection's index cannot be made: the server names ``doc_id`` and the action that repairs it."""

    def __init__(self, doc_id: str, error: DocumentFilesDamaged) -> None:
        self.doc_id, self.error = doc_id, error
        super().__init__(f"document {doc_id}: {error}")


def fingerprint(files: DocFiles, docs: Sequence[DocRecord]) -> str:
    """What the index of ``docs`` (a collection's members, in order) is made from, as a hex SHA-256
    (module docstring). Changes when a member is added, removed, re-ingested or its text rewritten."""
    h = hashlib.sha256(f"collection index {index.INDEX_VERSION}\0".encode())
    for doc in docs:
        directory = files.dir(doc.id)
        stats = [_stat(directory / name) for name in (TEXT_FILE, segs.SEGMENTS_FILE)]
        h.update(repr((doc.id, doc.sha256, doc.text_rules, doc.chars, doc.tokens, stats)).encode() + b"\0")
    return h.hexdigest()


def _stat(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def build(directory: Path, files: DocFiles, docs: Sequence[DocRecord], made_from: str) -> list[Unit]:
    """Write the index of ``docs``' units into ``directory`` (crash-safe: a temp database, then a
    rename), recording ``made_from`` (their :func:`fingerprint`, taken before their files were
    read). Returns the units in row order. Raises MemberDamaged."""
    units: list[Unit] = []
    texts: list[str] = []
    for doc in docs:
        try:
            text = files.read_text(doc.id).text
            segments = files.read_segments(doc.id)
        except FileNotFoundError:
            raise MemberDamaged(doc.id, TextDamaged(TEXT_FILE, "it is missing")) from None
        except DocumentFilesDamaged as exc:
            raise MemberDamaged(doc.id, exc) from exc
        if segments is None:
            units.append(Unit(doc.id))
            texts.append(text)
        else:
            units += [Unit(doc.id, s.index) for s in segments]
            texts += [text[s.start : s.end] for s in segments]
    with replacing(directory / index.INDEX_FILE) as tmp, closing(sqlite3.connect(tmp)) as db:
        index.fill(db, texts)
        db.execute("CREATE TABLE units (id INTEGER PRIMARY KEY, document_id TEXT NOT NULL, segment INTEGER)")
        db.executemany("INSERT INTO units VALUES (?, ?, ?)", [(i, u.doc_id, u.segment) for i, u in enumerate(units)])
        db.execute("CREATE TABLE made_from (fingerprint TEXT NOT NULL)")
        db.execute("INSERT INTO made_from VALUES (?)", (made_from,))
        db.commit()
    return units


def read_units(directory: Path) -> tuple[str, list[Unit]]:
    """(fingerprint, units in row order) of the index in ``directory``. Raises FileNotFoundError
    without one, sqlite3.Error for a damaged one."""
    path = directory / index.INDEX_FILE
    if not path.is_file():
        raise FileNotFoundError(path)
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        version = int(db.execute("PRAGMA user_version").fetchone()[0])
        (made_from,) = db.execute("SELECT fingerprint FROM made_from").fetchone()
        rows = db.execute("SELECT id, document_id, segment FROM units ORDER BY id").fetchall()
    if version != index.INDEX_VERSION or [r[0] for r in rows] != list(range(len(rows))):
        return "", []  # another version, or not our rows: made again
    return made_from, [Unit(doc_id, segment) for _, doc_id, segment in rows]


def ensure(directory: Path, files: DocFiles, docs: Sequence[DocRecord]) -> tuple[list[Unit], bool]:
    """The units of the index in ``directory`` for ``docs``, made again first unless it exists,
    is readable and was made from exactly these members' current files. Returns (units, whether it
    was rebuilt). Raises MemberDamaged. Call under the collection's lock."""
    made_from = fingerprint(files, docs)
    try:
        have, units = read_units(directory)
        if have == made_from:
            return units, False
    except (FileNotFoundError, sqlite3.Error, TypeError):
        pass  # missing or damaged: made again
    return build(directory, files, docs, made_from), True


def rank(
    files: DocFiles,
    collection_id: str,
    docs: Sequence[DocRecord],
    question: str,
    history: Sequence[tuple[str, str]] = (),
) -> list[tuple[Unit, float]]:
    """The units of collection ``collection_id`` (whose members are ``docs``, in order) that match
    ``question``, best first, with their scores (-BM25, higher is better; a conversation's earlier
    turns ranked with it, weighted lower: :func:`store.index.rank_conversation`); [] when none
    matches. Makes the index first when it is missing, damaged or stale (module docstring). Raises
    MemberDamaged, or IndexDamaged when a freshly made index cannot be read."""
    if not docs:
        return []
    with files.holding_collection(collection_id) as directory:
        units, rebuilt = ensure(directory, files, docs)
        try:
            ranked = index.rank_conversation(directory, question, history)
        except (FileNotFoundError, sqlite3.Error) as exc:
            if rebuilt:
                raise IndexDamaged(index.INDEX_FILE, f"it is unreadable right after it was made ({exc})") from exc
            units = build(directory, files, docs, fingerprint(files, docs))
            ranked = index.rank_conversation(directory, question, history)
    return [(units[i], score) for i, score in ranked if i < len(units)]
