"""Splitting a document longer than the context budget into segments that each fit.

Each segment is a character span ``[start, end)`` of the document text, cut where a reader would cut:
at a page start if one is near the end of the span, else at a paragraph start (after a blank line),
else at a sentence or line start, else between two pieces of a long run of text (after whitespace,
ingest/budget.py ``pieces``, at most :data:`FINE_CHARS` long). The next segment starts about
``overlap`` tokens before the previous one ends, so a sentence at a cut is whole in one of them.
The pieces are small (~64 tokens) so that the overlap exists even in text without sentence
punctuation or blank lines; with pieces of the counting size (``PIECE_CHARS``, ~500 tokens) no cut
lay within the overlap and such text got none (issue 27). Every segment is laid out as a document of
its own (ingest/prompt.py), prefilled once and snapshotted (server/engine/ingestion.py); questions are
answered from the segment that ranks best (store/index.py).

:func:`plan` is the pure kernel: it takes a token counter for a character span, so it is tested with
words as tokens. :func:`split` runs it with the model's tokenizer and then checks each segment's
exact prefix length, planning again with less room if piecewise counting was short.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ingest.budget import pieces
from ingest.extract import ExtractedText
from ingest.prompt import PromptLayout, Tokenizer
from runtime.atomic import write_atomic

PAGE, PARAGRAPH, SENTENCE, PIECE = 3, 2, 1, 0  # strength of a cut: where a reader would rather see it
_SENTENCE_END = re.compile(r"[.!?][\"'”’)]*\s+(?=\S)")
_LINE_START = re.compile(r"(?<=\n)[ \t]*(?=[^\s])")
#: A segment is cut at the strongest boundary within its last (1 - FILL) of the room.
FILL = 0.75
#: Longest span between two candidate cuts (characters, ~64 tokens of prose): finer than any
#: overlap setting worth having, so consecutive segments can always share text.
FINE_CHARS = 256
SEGMENTS_FILE = "segments.json"


@dataclass(frozen=True, slots=True)
class Segment:
    """Segment ``index`` of a document: characters ``[start, end)`` of its text, on pages
    ``first_page``..``last_page`` (as printed), and ``n_tokens`` prefix tokens once laid out."""

    index: int
    start: int
    end: int
    first_page: int
    last_page: int
    n_tokens: int = 0

    @property
    def pages(self) -> list[int]:
        return [self.first_page, self.last_page]


def cuts(text: str, page_starts: Sequence[int]) -> list[tuple[int, int]]:
    """Candidate cut offsets with their strength, ascending, from 0 to ``len(text)``: page starts,
    paragraph starts, sentence and line starts, and piece cuts inside spans longer than
    :data:`FINE_CHARS`.

    >>> cuts("Ab. Cd\\n\\nef", [0])
    [(0, 3), (4, 1), (8, 2), (10, 3)]
    """
    strength = {p: PAGE for p in page_starts if 0 <= p < len(text)}
    strength[0] = PAGE
    i = text.find("\n\n")
    while i != -1:
        j = i + 2
        while j < len(text) and text[j] == "\n":
            j += 1
        if j < len(text):
            strength.setdefault(j, PARAGRAPH)
        i = text.find("\n\n", j)
    for m in _SENTENCE_END.finditer(text):  # sentence starts: fine enough for an overlap of a few sentences
        strength.setdefault(m.end(), SENTENCE)
    for m in _LINE_START.finditer(text):  # a line of verse, a list item, a log line: as good as a sentence
        strength.setdefault(m.start(), SENTENCE)
    strength[len(text)] = PAGE
    found = sorted(strength.items())
    out: list[tuple[int, int]] = []
    for (a, s), (b, _) in zip(found, found[1:], strict=False):
        out.append((a, s))
        if b - a > FINE_CHARS:
            out.extend((i, PIECE) for i, _ in list(pieces(text, a, b, FINE_CHARS))[1:])
    out.append(found[-1])
    return out


def plan(
    bounds: Sequence[tuple[int, int]], count: Callable[[int, int], int], room: int, overlap: int
) -> list[tuple[int, int]]:
    """Spans ``[start, end)`` over ``bounds`` (from :func:`cuts`) of at most ``room`` counted tokens
    each, consecutive ones sharing at most ``overlap`` tokens (whole units between cuts).

    A span ends at the strongest cut among those that fill at least :data:`FILL` of ``room`` (the
    latest of equal strength). Raises ValueError when one unit between two cuts exceeds ``room``.

    >>> words = "a b c d e f"  # one unit per word, a word a token
    >>> plan([(i, 0) for i in range(0, 12, 2)] + [(11, 2)], lambda a, b: len(words[a:b].split()), 3, 1)
    [(0, 6), (4, 10), (8, 11)]
    """
    offsets = [o for o, _ in bounds]
    strength = [s for _, s in bounds]
    cum = [0]
    for a, b in zip(offsets, offsets[1:], strict=False):
        cum.append(cum[-1] + count(a, b))
    n_units = len(offsets) - 1
    spans: list[tuple[int, int]] = []
    s = 0
    while s < n_units:
        e = bisect.bisect_right(cum, cum[s] + room) - 1  # the furthest cut within the room
        if e <= s:
            raise ValueError(f"a passage of {cum[s + 1] - cum[s]} tokens has no cut within {room} tokens")
        if e < n_units:
            floor = cum[s] + FILL * room
            candidates = [k for k in range(s + 1, e + 1) if cum[k] >= floor] or [e]
            e = max(candidates, key=lambda k: (strength[k], k))
        spans.append((offsets[s], offsets[e]))
        if e >= n_units:
            break
        nxt = bisect.bisect_left(cum, cum[e] - overlap, lo=s + 1, hi=e)  # first cut within overlap of the end
        s = max(nxt, s + 1)
    return spans


def split(
    extracted: ExtractedText, layout: PromptLayout, tok: Tokenizer, limit: int, overlap: int
) -> tuple[list[Segment], list[np.ndarray]]:
    """The segments of ``extracted`` whose prefixes each fit ``limit`` tokens, and those prefixes
    (int32 [n_tokens] each). Counting is piecewise (a cut can split what whole-text tokenization
    merges), so each prefix is tokenized exactly and, if one is over, the plan is made again with
    that much less room. Raises ValueError when no plan fits."""
    text = extracted.text
    room = limit - layout.n_head(tok) - layout.n_between(tok)
    bounds = cuts(text, extracted.page_starts)
    sizes: dict[tuple[int, int], int] = {}

    def count(a: int, b: int) -> int:
        if (a, b) not in sizes:
            sizes[a, b] = len(tok.tokenize(text[a:b], parse_special=False))
        return sizes[a, b]

    for _ in range(4):
        spans = plan(bounds, count, room, min(overlap, room // 4))
        prefixes = [layout.document_prefix(tok, text[a:b]) for a, b in spans]
        excess = max(len(p) for p in prefixes) - limit
        if excess <= 0:
            segments = [
                Segment(i, a, b, extracted.page_of(a), extracted.page_of(max(a, b - 1)), len(p))
                for i, ((a, b), p) in enumerate(zip(spans, prefixes, strict=True))
            ]
            return segments, prefixes
        room -= excess + 16
    raise ValueError("the document could not be split into segments that fit the budget")


def write(directory: Path, segments: Sequence[Segment]) -> None:
    """The segment list, ``segments.json`` in the document's directory (crash-safe)."""
    write_atomic(directory / SEGMENTS_FILE, json.dumps([asdict(s) for s in segments]).encode())


def read(directory: Path) -> list[Segment] | None:
    """The document's segments, or None for a document answered whole."""
    path = directory / SEGMENTS_FILE
    if not path.is_file():
        return None
    return [Segment(**raw) for raw in json.loads(path.read_text())]


def key(doc_id: str, index: int | None) -> str:
    """The engine's name for what a sequence holds: a document, or one of its segments."""
    return doc_id if index is None else f"{doc_id}/{index}"


def parse_key(name: str) -> tuple[str, int | None]:
    """``(doc_id, segment index or None)`` of a :func:`key`."""
    doc_id, _, index = name.partition("/")
    return doc_id, (int(index) if index else None)
