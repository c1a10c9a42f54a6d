"""The writes that repair a document's files from what is intact (the checks are store/checked.py's;
each is called by the one repair path, server/engine/repairs.py, never by a reader):
``prefix.npy`` laid out and tokenized again from the stored text (:func:`repair_prefix`), a
segmented document's FTS5 index ``segments.sqlite3`` rebuilt from its stored text and
``segments.json`` when it is missing, damaged or of an older :data:`store.index.INDEX_VERSION`
(:func:`ensure_index`), and ``segments.json`` written again when a list made again reproduces every
stored segment prefix (:func:`resplit`). :func:`check_document` lists every problem of a
document's files, writing nothing.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path

import numpy as np

from ingest import segments as segs
from ingest.errors import DocumentFilesDamaged, IndexDamaged, PrefixDamaged, SegmentsDamaged, TextDamaged
from ingest.prompt import PromptLayout, Tokenizer
from runtime.atomic import replacing
from store import index
from store.checked import PREFIX_FILE, TEXT_FILE, read_prefix, read_segments, read_text, segments_problem


def repair_prefix(
    state_dir: Path, document: str, layout: PromptLayout, tokenizer: Tokenizer, n_tokens: int | None = None
) -> np.ndarray:
    """Write ``prefix.npy`` in ``state_dir`` again from ``document`` (the stored text, or a segment's
    span of it) laid out and tokenized as ingest/pipeline.py does, and return it. Raises
    PrefixDamaged when the result is not ``n_tokens`` long (the text, the layout or the tokenizer is
    not the one it was made with: reingest)."""
    ids = np.ascontiguousarray(layout.document_prefix(tokenizer, document), dtype=np.int32)
    if n_tokens is not None and len(ids) != n_tokens:
        raise PrefixDamaged(
            PREFIX_FILE, f"tokenizing the stored text again gives {len(ids)} tokens, not the document's {n_tokens}"
        )
    with replacing(state_dir / PREFIX_FILE) as tmp, tmp.open("wb") as f:
        np.save(f, ids)
    return ids


def resplit(directory: Path, segments: Sequence[segs.Segment], prefixes: Sequence[np.ndarray]) -> bool:
    """Write ``segments.json`` in ``directory`` again from ``segments`` (made again from the stored text,
    ingest/segments.py ``split``) when each one's ``prefixes[i]`` is the ``prefix.npy`` stored in
    ``segments/<i>/`` and no other segment directory is there: a list that reproduces every stored
    prefix is the one they were made with. Returns False (nothing written) when any differs, as it
    does after the tokenizer, the prompt or the budget changed (reingest then)."""
    stored = sorted(p.name for p in (directory / "segments").glob("*") if p.is_dir())
    if stored != sorted(str(s.index) for s in segments):
        return False
    for segment, prefix in zip(segments, prefixes, strict=True):
        try:
            ids = read_prefix(directory / "segments" / str(segment.index), n_tokens=segment.n_tokens)
        except (FileNotFoundError, DocumentFilesDamaged):
            return False
        if not np.array_equal(ids, np.asarray(prefix, dtype=np.int32)):
            return False
    segs.write(directory, list(segments))
    return True


def ensure_index(directory: Path, text: str | None = None) -> bool:
    """Make the segment index of the segmented document in ``directory`` usable: rebuilt from its
    stored text (``text``, or read from ``text.json``) and ``segments.json`` when it is missing,
    damaged (not a database, failing ``quick_check``, the wrong rows) or of an older
    :data:`store.index.INDEX_VERSION`. Returns True when it was rebuilt. Raises TextDamaged or
    SegmentsDamaged when what it is built from is damaged, IndexDamaged when it cannot be written."""
    segments = read_segments(directory)
    if segments is None:
        raise SegmentsDamaged(segs.SEGMENTS_FILE, "the document has a segment index but no segment list")
    if _index_problem(directory, len(segments)) is None:
        return False
    if text is None:
        text = read_text(directory).text
    problem = segments_problem(segments, len(text))
    if problem:
        raise SegmentsDamaged(segs.SEGMENTS_FILE, problem)
    try:
        index.build(directory, [text[s.start : s.end] for s in segments])
    except (OSError, sqlite3.Error) as exc:
        raise IndexDamaged(index.INDEX_FILE, f"rebuilding it failed ({exc})") from exc
    return True


def _index_problem(directory: Path, n_segments: int) -> str | None:
    path = directory / index.INDEX_FILE
    if not path.is_file():
        return "it is missing"
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            if db.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                return "it fails SQLite's quick_check"
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            rows = [r[0] for r in db.execute("SELECT rowid FROM segments ORDER BY rowid")]
    except sqlite3.Error as exc:
        return f"it is not a readable index ({exc})"
    if rows != list(range(n_segments)):
        return f"it has {len(rows)} rows for {n_segments} segments"
    if version < index.INDEX_VERSION:
        return f"it is of index version {version}, older than {index.INDEX_VERSION}"
    return None


def check_document(
    directory: Path, chars: int | None = None, pages: int | None = None, tokens: int | None = None
) -> list[DocumentFilesDamaged]:
    """Every problem of the document's files in ``directory`` (``chars``, ``pages``, ``tokens``: its
    row's counts, checked when given): [] when all is well. Reads only (a damaged segment index is
    named, not rebuilt: :func:`ensure_index` does). For a start-up scan or an admin check; the
    routes read each file through its own reader in store/checked.py."""
    found: list[DocumentFilesDamaged] = []
    text = None
    try:
        text = read_text(directory, chars, pages)
    except FileNotFoundError:
        found.append(TextDamaged(TEXT_FILE, "it is missing"))
    except DocumentFilesDamaged as exc:
        found.append(exc)
    try:
        segments = read_segments(directory, len(text.text) if text else None)
    except DocumentFilesDamaged as exc:
        found.append(exc)
        return found
    keys = [directory] if segments is None else [directory / "segments" / str(s.index) for s in segments]
    n_tokens = [tokens] if segments is None else [s.n_tokens for s in segments]
    for state_dir, n in zip(keys, n_tokens, strict=True):
        try:
            read_prefix(state_dir, n_tokens=n)
        except FileNotFoundError:
            found.append(PrefixDamaged(PREFIX_FILE, f"{state_dir.name}/{PREFIX_FILE} is missing"))
        except DocumentFilesDamaged as exc:
            found.append(exc)
    if segments is not None:
        problem = _index_problem(directory, len(segments))
        if problem is not None:
            found.append(IndexDamaged(index.INDEX_FILE, problem))
    return found
