"""Checked readers of a document's files other than its snapshot: ``text.json``, ``prefix.npy``, a
segmented document's ``segments.json`` and its index ``segments.sqlite3``.

A damaged file used to give a run of 500s while the document stayed ``ready`` (a corrupt index:
"file is not a database" on every question; a truncated ``prefix.npy``; a truncated ``text.json``
on ``/text``). Here each is read through a check, and a failure is a :class:`DocumentFilesDamaged`
subclass naming the file, what is wrong, and the action that fixes it; the server maps it to 409.
Reads only read: nothing here (nor in store/files.py) writes or repairs. What can be rebuilt from
what is intact is rebuilt by the one repair path, server/engine/repairs.py, with the tokenizer and
the extractor passed to it, and the read is tried once more; the writes are store/repair.py's:

==================== ====================================== ==============================================
file                 check                                  repair (server/engine/repairs.py)
==================== ====================================== ==============================================
``text.json``        JSON, field types, ``page_starts``     re-extract ``upload.bin`` with the extractor,
                     ascending within the text, ``chars``   kept when it gives the row's characters and
                     and ``pages`` of the document's row    pages; else reingest
``prefix.npy``       a 1-D int32 ``.npy`` of token ids in   ``repair_prefix``: lay out and tokenize the
                     ``[0, n_vocab)``, the length the row   stored text again (the tokenizer, as an
                     records; the snapshot manifest's       upload does: ingest/pipeline.py)
                     ``tokens_sha256`` when there is one
``segments.json``    segments 0..n-1 covering the text in   split the stored text again with the tokenizer
                     order, each overlapping or touching    and the budget, kept when it gives every
                     the next                               stored prefix (``resplit``); else reingest
``segments.sqlite3`` present, readable, of                  ``ensure_index``: rebuilt from the stored text
                     :data:`store.index.INDEX_VERSION`      and ``segments.json`` (old versions too)
                     (:func:`rank_segments`; SQLite
                     ``quick_check`` and one row per
                     segment in store/repair.py)
==================== ====================================== ==============================================

Checksums: only snapshots have them (ingest/digest.py). These files are small, parsed in full on
every use, and their damage shows as a parse or shape error; the one silent kind, a changed
character in ``text.json`` or a changed token id in ``prefix.npy``, is covered for the prefix by the
snapshot manifest's ``tokens_sha256`` (a SHA-256 of the prefix, already there), and for the text
costs a citation offset, not a wrong answer (the model reads the prefix). A checksum of its own
would add a manifest to keep in step with every write for no failure the checks above miss.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ingest import segments as segs
from ingest.errors import DocumentFilesDamaged, IndexDamaged, PrefixDamaged, SegmentsDamaged, TextDamaged
from ingest.extract import ExtractedText
from ingest.formats import kinds
from ingest.normalize import KNOWN_RULES
from store import index

TEXT_FILE, PREFIX_FILE, MANIFEST_FILE = "text.json", "prefix.npy", "state.json"

__all__ = [
    "DocumentFilesDamaged",
    "IndexDamaged",
    "PrefixDamaged",
    "SegmentsDamaged",
    "TextDamaged",
    "rank_segments",
    "read_prefix",
    "read_segments",
    "read_text",
    "segments_problem",
]


def read_text(directory: Path, chars: int | None = None, pages: int | None = None) -> ExtractedText:
    """The stored text of the document in ``directory``, checked (module docstring); ``chars`` and
    ``pages``: the document row's counts, checked when given. Raises TextDamaged (FileNotFoundError
    when it was never stored: a failed upload)."""
    path = directory / TEXT_FILE
    try:
        raw = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise TextDamaged(TEXT_FILE, f"it is not readable JSON ({exc})") from exc
    try:
        text = _text_fields(raw)
    except (KeyError, TypeError, ValueError) as exc:
        raise TextDamaged(TEXT_FILE, str(exc)) from exc
    if chars is not None and len(text.text) != chars:
        raise TextDamaged(TEXT_FILE, f"it holds {len(text.text)} characters, the document {chars}")
    if pages is not None and text.pages != pages:
        raise TextDamaged(TEXT_FILE, f"it holds {text.pages} pages, the document {pages}")
    return text


def _text_fields(raw: object) -> ExtractedText:
    if not isinstance(raw, dict):
        raise TypeError(f"the top level is a {type(raw).__name__}, not an object")
    text, starts = raw["text"], raw["page_starts"]
    if not isinstance(text, str):
        raise TypeError("text is not a string")
    if not isinstance(starts, list) or not starts or not all(type(s) is int for s in starts):
        raise TypeError("page_starts is not a non-empty list of integers")
    if starts[0] != 0 or any(b < a for a, b in zip(starts, starts[1:], strict=False)) or starts[-1] > len(text):
        raise ValueError("page_starts is not ascending from 0 within the text")
    kind, rules = raw["kind"], raw.get("rules", 1)
    if kind not in kinds() or rules not in KNOWN_RULES:
        raise ValueError(f"kind {kind!r} or text rules {rules!r} is unknown")
    first_page, cut, warnings = raw.get("first_page", 1), raw.get("cut"), raw.get("warnings", [])
    if type(first_page) is not int or first_page < 1 or not (cut is None or isinstance(cut, str)):
        raise ValueError("first_page or cut is malformed")
    if not isinstance(warnings, list) or not all(isinstance(w, dict) for w in warnings):
        raise TypeError("warnings is not a list of objects")
    ocr_pages = raw.get("ocr_pages", [])  # absent before OCR (issue 30): no page was read by OCR
    if not isinstance(ocr_pages, list) or not all(type(n) is int for n in ocr_pages):
        raise TypeError("ocr_pages is not a list of page numbers")
    labels = raw.get("page_labels")  # absent before printed labels (issue 39 item 5): the numbers are the labels
    if labels is not None and (not isinstance(labels, list) or not all(isinstance(x, str) for x in labels)):
        raise TypeError("page_labels is not a list of strings")
    encoding = raw.get("encoding")
    return ExtractedText(
        text,
        starts,
        kind,
        encoding if isinstance(encoding, str) else None,
        rules,
        warnings,
        first_page,
        cut,
        ocr_pages=ocr_pages,
        page_labels=labels,
    )


def read_prefix(state_dir: Path, n_vocab: int | None = None, n_tokens: int | None = None) -> np.ndarray:
    """The prefix token ids in ``state_dir`` (a document's or segment's directory), int32 [n],
    checked: a 1-D int32 array, ids in ``[0, n_vocab)`` when given, ``n_tokens`` long when given, and
    equal to what the snapshot there was made from when it has a manifest. Raises PrefixDamaged
    (FileNotFoundError when there is none)."""
    path = state_dir / PREFIX_FILE
    try:
        ids = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise
    except (OSError, ValueError, EOFError) as exc:
        raise PrefixDamaged(PREFIX_FILE, f"it is not a readable .npy file ({exc})") from exc
    if ids.dtype != np.int32 or ids.ndim != 1 or len(ids) == 0:
        raise PrefixDamaged(PREFIX_FILE, f"it is {ids.dtype} of shape {ids.shape}, not int32 token ids")
    if ids.min() < 0 or (n_vocab is not None and ids.max() >= n_vocab):
        raise PrefixDamaged(PREFIX_FILE, f"it holds token ids outside [0, {n_vocab})")
    if n_tokens is not None and len(ids) != n_tokens:
        raise PrefixDamaged(PREFIX_FILE, f"it holds {len(ids)} tokens, the document {n_tokens}")
    manifest = _manifest(state_dir)
    if manifest is not None:
        from ingest.manifest import tokens_sha256

        if manifest.get("n_tokens") != len(ids) or manifest.get("tokens_sha256") != tokens_sha256(ids):
            raise PrefixDamaged(PREFIX_FILE, "it is not the prefix its snapshot was made from")
    return ids


def _manifest(state_dir: Path) -> dict | None:
    try:
        raw = json.loads((state_dir / MANIFEST_FILE).read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None  # no snapshot (or an unreadable manifest: ingest/snapshot.py's to report)
    return raw if isinstance(raw, dict) else None


def read_segments(directory: Path, n_chars: int | None = None) -> list[segs.Segment] | None:
    """A segmented document's segments, checked (0..n-1, in order, covering ``[0, n_chars)`` when
    given, each overlapping or touching the next); None for a document answered whole. Raises
    SegmentsDamaged."""
    path = directory / segs.SEGMENTS_FILE
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_bytes().decode("utf-8"))
        segments = [segs.Segment(**item) for item in raw]
    except (OSError, UnicodeDecodeError, ValueError, TypeError) as exc:
        raise SegmentsDamaged(segs.SEGMENTS_FILE, f"it is not a readable segment list ({exc})") from exc
    problem = segments_problem(segments, n_chars)
    if problem:
        raise SegmentsDamaged(segs.SEGMENTS_FILE, problem)
    return segments


def segments_problem(segments: Sequence[segs.Segment], n_chars: int | None) -> str | None:
    if not segments:
        return "it lists no segments"
    ints = all(type(getattr(s, f)) is int for s in segments for f in ("index", "start", "end", "n_tokens"))
    if not ints or [s.index for s in segments] != list(range(len(segments))):
        return "its segments are not numbered 0..n-1 with integer offsets"
    if segments[0].start != 0 or any(s.end <= s.start for s in segments):
        return "its segments do not start at 0 with non-empty spans"
    if any(not a.start < b.start <= a.end for a, b in zip(segments, segments[1:], strict=False)):
        return "its segments do not follow each other (each must overlap or touch the next)"
    if n_chars is not None and segments[-1].end != n_chars:
        return f"its segments end at character {segments[-1].end}, the text at {n_chars}"
    return None


def rank_segments(directory: Path, question: str, history: Sequence[tuple[str, str]] = ()) -> list[tuple[int, float]]:
    """:func:`store.index.rank_conversation` over the segmented document in ``directory``: ``(segment
    index, score)`` best first. Raises IndexDamaged when its index is missing, unreadable or of a
    version older than :data:`store.index.INDEX_VERSION` (it is rebuilt then: store/repair.py
    ``ensure_index``). Reads only; costs one ``user_version`` read more than ranking."""
    try:
        version = index.version(directory)
        if version < index.INDEX_VERSION:
            raise IndexDamaged(index.INDEX_FILE, f"it is of index version {version}, older than {index.INDEX_VERSION}")
        return index.rank_conversation(directory, question, history)
    except FileNotFoundError:
        raise IndexDamaged(index.INDEX_FILE, "it is missing") from None
    except sqlite3.Error as exc:
        raise IndexDamaged(index.INDEX_FILE, f"it is not a readable index ({exc})") from exc
