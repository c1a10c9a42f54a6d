"""Superscripts read as superscripts: a footnote mark as ``8,935,112[3]`` and an exponent as ``R^2``,
not ``8,935,1123`` and ``R2``.

A PDF draws a footnote mark as a smaller glyph on a raised baseline right after the word or number it
marks. pypdf's text layer joins it to that word (``8,935,1123``, in running text too), and pdfplumber's
table cells do the same; a reader, and the model, then take the mark for digits of the number. So a
superscript is written apart:

* a **footnote mark**, a superscript whose text also labels a footnote on its page (a line that starts
  with it, drawn small before larger text: ``³ 2020 estimate``), in square brackets, as Wikipedia's
  references read when copied as text: ``8,935,112[3]``, ``the treaty[12] was``;
* any other superscript (an exponent, ``R²``, ``km²``) after a caret, as plain text writes powers:
  ``R^2``, ``km^2``. On the 117 pages of GeoTopo (../shared/cases) all 660 superscripts are such
  exponents; read as marks they were ``R[2]``.

The footnote's own label, at the start of its line, follows nothing on that line and stays as pypdf
gives it (``3`` then ``2020 estimate``).

A superscript, the same for pypdf's text chunks and for pdfplumber's characters (PDF 32000-1 §9.3: a
font size and a text position are all a text layer tells of a glyph's look):

* is at most :data:`MAX_MARK` characters: digits, or the symbols ``* † ‡ § ¶``;
* is drawn at most :data:`SIZE_RATIO` of the size of the text before it on its line;
* has its baseline raised above that text's by :data:`RISE` (a share of that text's size): a
  superscript sits about a third of an em up, a subscript below, the next line a whole line below.

Superscripts placed with the text-rise operator (``Ts``) are not seen: pypdf's text layer ignores
``Ts``; word processors and LaTeX place them by moving the text position instead. A footnote whose
label is on another page than its mark has its mark written as an exponent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["MAX_MARK", "RISE", "SIZE_RATIO", "Chunk", "is_mark", "mark_chars", "marked", "page_text", "raised"]

MAX_MARK = 3  # characters: footnote numbers past 999 are rare, and longer runs are text
SIZE_RATIO = 0.85  # a mark's font size is at most this share of the text's before it
RISE = (0.15, 0.75)  # a mark's baseline rises this share of the text's size (low, high)
_MARK = re.compile(rf"[0-9]{{1,{MAX_MARK}}}|[*†‡§¶]{{1,{MAX_MARK}}}")


def is_mark(text: str, size: float, rise: float, size_before: float) -> bool:
    """Whether ``text`` (stripped), drawn at font ``size`` with its baseline ``rise`` above the text
    before it on its line (drawn at ``size_before``; all in the same units, y up), is a superscript."""
    return _MARK.fullmatch(text) is not None and raised(size, rise, size_before)


def raised(size: float, rise: float, size_before: float) -> bool:
    """Whether a glyph of font ``size``, its baseline ``rise`` above text of ``size_before``, is drawn
    as a superscript: smaller, and raised by :data:`RISE`."""
    return 0 < size <= SIZE_RATIO * size_before and RISE[0] * size_before <= rise <= RISE[1] * size_before


def written(mark: str, labels: frozenset[str]) -> str:
    """How a superscript is written in the text: ``[3]`` when it is a footnote mark (its text labels
    a footnote on its page: ``labels``), else ``^2``."""
    return f"[{mark}]" if mark in labels else f"^{mark}"


@dataclass(frozen=True, slots=True)
class Chunk:
    """A run of text pypdf drew in one font: ``text`` (a superscript already written apart), where its
    first glyph's baseline starts (``x``, ``y``: points in the page's user space, y up) and its font
    size in that space."""

    text: str
    x: float
    y: float
    size: float


@dataclass(frozen=True, slots=True)
class PageText:
    """A page's text with its superscripts written apart, the chunks it is made of (None when pypdf's
    chunks do not make up its text: then the text is pypdf's own) and the footnote labels on it."""

    text: str
    chunks: list[Chunk] | None
    labels: frozenset[str] = frozenset()


def page_text(page) -> PageText:
    """The text of the pypdf ``page`` (``extract_text()``) with its superscripts written apart."""
    raw: list[Chunk] = []

    def visit(text, cm, tm, font, size) -> None:
        a, b, c, d, e, f = _times(tm, cm)
        scale = abs(a * d - b * c) ** 0.5
        raw.append(Chunk(text, e, f, float(size or 0) * scale))

    plain = page.extract_text(visitor_text=visit) or ""
    if "".join(chunk.text for chunk in raw) != plain:  # not pypdf's usual chunking: keep its text
        return PageText(plain, None)
    found = labels(raw)
    chunks = marked(raw, found)
    return PageText("".join(chunk.text for chunk in chunks), chunks, found)


def labels(chunks: list[Chunk]) -> frozenset[str]:
    """The footnote labels among ``chunks`` (:func:`label_at`)."""
    return frozenset(chunks[i].text.strip() for i in range(len(chunks)) if label_at(chunks, i))


def label_at(chunks: list[Chunk], i: int) -> bool:
    """Whether ``chunks[i]`` labels a footnote: a mark's text (digits, a symbol) drawn first on its
    line (the text before it, if any, is on another line) and smaller than the text after it, on its
    line."""
    if not _MARK.fullmatch(chunks[i].text.strip()):
        return False
    after = next((chunks[k] for k in range(i + 1, len(chunks)) if chunks[k].text.strip()), None)
    before = next((chunks[k] for k in range(i - 1, -1, -1) if chunks[k].text.strip()), None)
    chunk = chunks[i]
    if after is None or (before is not None and abs(before.y - chunk.y) <= after.size):
        return False
    return chunk.size <= SIZE_RATIO * after.size and abs(after.y - chunk.y) <= RISE[1] * after.size


def marked(chunks: list[Chunk], footnotes: frozenset[str] = frozenset()) -> list[Chunk]:
    """``chunks`` with each superscript written apart (:func:`written`; ``footnotes``: the labels on
    the page), the line break or space pypdf put before it (for its raised baseline) dropped, and a
    space after a footnote's label that pypdf joined to the footnote's text (``3Census`` -> ``3 Census``)."""
    out: list[Chunk] = []
    before: Chunk | None = None  # the last chunk with text that is not a superscript
    for i, chunk in enumerate(chunks):
        core = chunk.text.strip()
        if not core:
            out.append(chunk)
            continue
        if before is not None and is_mark(core, chunk.size, chunk.y - before.y, before.size):
            while out and not out[-1].text.strip():  # whitespace pypdf put between the text and its mark
                out.pop()
            if out:
                last = out[-1]
                out[-1] = Chunk(last.text.rstrip(), last.x, last.y, last.size)
            tail = chunk.text[len(chunk.text.rstrip()) :]
            out.append(Chunk(written(core, footnotes) + tail, chunk.x, chunk.y, chunk.size))
            continue
        joined = next((chunks[k].text[:1] for k in range(i + 1, len(chunks)) if chunks[k].text), " ").strip()
        if joined and not chunk.text[-1].isspace() and label_at(chunks, i):
            chunk = Chunk(chunk.text + " ", chunk.x, chunk.y, chunk.size)
        out.append(chunk)
        before = chunk
    return out


def mark_chars(chars: list[dict], footnotes: frozenset[str] = frozenset()) -> None:
    """pdfplumber's ``chars`` of a page (dicts with ``text``, ``size``, ``x0``, ``x1``, ``bottom``: top-down
    coordinates), in drawing order, with each superscript written apart (:func:`written`; ``footnotes``:
    the labels on the page) in place: its first character's text gets the ``[`` or ``^``, its last the
    ``]``, so a table cell's text reads ``8,935,112[3]``."""
    i = 0
    while i < len(chars):
        j = i
        while j < len(chars) and j - i < MAX_MARK + 1 and _raised(chars, i, j):
            j += 1
        mark = "".join(c["text"] for c in chars[i:j])
        if j > i and _MARK.fullmatch(mark):
            opening, closing = written(mark, footnotes).split(mark)
            chars[i]["text"] = opening + chars[i]["text"]
            chars[j - 1]["text"] = chars[j - 1]["text"] + closing
            i = j
        else:
            i += 1


def _raised(chars: list[dict], first: int, k: int) -> bool:
    """Whether ``chars[k]`` belongs to a mark that starts at ``chars[first]``: it follows the character
    before the run on its line, closely, smaller and raised."""
    if first == 0 or k >= len(chars):
        return False
    before, c = chars[first - 1], chars[k]
    size = float(before.get("size") or 0)
    gap = float(c["x0"]) - float((chars[k - 1] if k > first else before)["x1"])
    if not -0.5 * size <= gap <= 0.5 * size:
        return False
    rise = float(before["bottom"]) - float(c["bottom"])
    return raised(float(c.get("size") or 0), rise, size)


def _times(m: list[float], n: list[float]) -> tuple[float, ...]:
    """The affine matrix ``m`` then ``n`` (PDF's row-vector order: ``m × n``)."""
    a, b, c, d, e, f = (float(v) for v in m)
    p, q, r, s, t, u = (float(v) for v in n)
    return (a * p + b * r, a * q + b * s, c * p + d * r, c * q + d * s, e * p + f * r + t, e * q + f * s + u)
