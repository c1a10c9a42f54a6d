"""Tables in a PDF page as Markdown-like pipe rows, as the DOCX and HTML readers give them
(``| a | b |``, a ``| --- |`` line under the first row), instead of one cell per line.

pypdf's plain text layer (ingest/pdf.py) emits a table cell by cell, each on its own line, and its
layout mode breaks two-column pages and merged cells (measured in bench/results/pdf-tables.md). So
tables are found by pdfplumber's table finder (its default "lines" strategy: cells bounded by ruling
lines, as tables drawn by word processors are) and spliced into pypdf's text: pypdf's text is built
from its text-show chunks (``visitor_text``, whose concatenation is the page text on every PDF of
../shared/cases; ingest/marks.py ``page_text``), the chunks whose baseline point lies inside a table's
box are dropped, and the table's rows go where its first chunk was. Text outside tables stays exactly as pypdf gives it.

Cost: pdfplumber (pdfminer) parses a page an order of magnitude slower than pypdf, so it only runs
on pages whose content stream draws enough horizontal and vertical edges to bound cells
(:func:`may_have_table`); other pages pay one scan of their content stream's tokens. What it finds is
kept only when it looks like a table of text (:func:`is_table`): figures and boxes draw grids too. Not covered:
tables without ruling lines, tables drawn inside form XObjects, rotated pages (their pypdf and
pdfplumber coordinates differ): those keep pypdf's text.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass

from ingest.marks import Chunk, mark_chars
from ingest.normalize import drop_unmapped

__all__ = ["PageTables", "Table", "is_table", "may_have_table", "rows_text", "splice_tables", "spread_spans"]

# The grid a page must draw before the table finder runs: MIN_HORIZONTAL horizontal lines, each met
# by MIN_VERTICAL vertical ones: 3 rows by 2 columns, the smallest table kept (``is_table``).
MIN_HORIZONTAL, MIN_VERTICAL = 4, 3
MIN_EDGE = 10.0  # points: a shorter line or rectangle side bounds no cell (a fraction bar, a dot)
THIN = 2.0  # points: a rectangle this thin is a ruling line; lines this close meet
# A page that draws more straight segments than this, or a curve (c, v, y) for every
# CURVES_PER_SEGMENT of them, is a plot or a drawing: the finder would take ~1 s there and find no table.
MAX_SEGMENTS, CURVES_PER_SEGMENT = 2000, 4
MAX_PAIRS = 250_000  # horizontal x vertical edges past which the grid is not checked (~50 ms)
_TOLERANCE = 1.0  # points: a baseline on a table's edge still belongs to it


@dataclass(frozen=True, slots=True)
class Table:
    """One table: ``bbox`` (x0, top, x1, bottom) in points from the page's top-left corner, as
    pdfplumber gives it; ``rows``: cell texts, row by row (a merged cell's text in each slot it covers)."""

    bbox: tuple[float, float, float, float]
    rows: list[list[str]]


def may_have_table(page) -> bool:
    """True when the pypdf ``page`` is unrotated and its content stream draws a grid: ruling (``re``
    rectangles, ``m``/``l`` path segments, in the stream's own coordinates) that crosses or meets at
    MIN_VERTICAL points or more on each of MIN_HORIZONTAL horizontal lines: what a table of 3 rows
    and 2 columns needs; and no more than MAX_SEGMENTS segments, few of them curves (a plot, a
    drawing). Figures draw lines too, but rarely such a grid without curves. Reads the stream pypdf
    already decoded (under its decompression limits); False if it cannot. A rule of thumb, measured
    in bench/results/pdf-tables.md."""
    try:
        if (page.get("/Rotate") or 0) % 360:
            return False
        contents = page.get_contents()
        data = contents.get_data() if contents is not None else b""
    except Exception:  # a stream pypdf cannot decode: its text extraction says so, not this check
        return False
    tokens = data.split()
    curves, straight = sum(tokens.count(op) for op in (b"c", b"v", b"y")), tokens.count(b"l") + tokens.count(b"re")
    if straight > MAX_SEGMENTS or CURVES_PER_SEGMENT * curves > straight:
        return False  # a plot or a drawing: thousands of segments, or curves among them
    across, down = _edges(tokens)
    if len({round(y) for y, _, _ in across}) < MIN_HORIZONTAL or len({round(x) for x, _, _ in down}) < MIN_VERTICAL:
        return False
    if len(across) * len(down) > MAX_PAIRS:  # too much ruling to check cheaply: let the finder decide
        return True
    crossings: dict[int, set[int]] = {}  # y of a horizontal line -> x where vertical lines meet it
    for y, x0, x1 in across:
        for x, y0, y1 in down:
            if x0 - THIN <= x <= x1 + THIN and y0 - THIN <= y <= y1 + THIN:
                crossings.setdefault(round(y), set()).add(round(x))
    return sum(1 for xs in crossings.values() if len(xs) >= MIN_VERTICAL) >= MIN_HORIZONTAL


Edge = tuple[float, float, float]  # (y, x0, x1) of a horizontal edge, (x, y0, y1) of a vertical one


def _edges(tokens: list[bytes]) -> tuple[list[Edge], list[Edge]]:
    """The horizontal and vertical edges drawn by ``x y w h re`` and by the segments of ``x y m`` /
    ``x y l`` paths, from the stream's whitespace-split ``tokens`` (a path's operands are plain
    numbers; a token that is not one skips that operator)."""
    across: list[Edge] = []
    down: list[Edge] = []
    at: tuple[float, float] | None = None  # the current point of the path being built
    for i, token in enumerate(tokens):
        if token not in (b"re", b"l", b"m") or i < 2:
            continue
        try:
            if token == b"re":
                if i < 4:
                    continue
                x, y, w, h = (float(t) for t in tokens[i - 4 : i])
                _rect(x, y, w, h, across, down)
                continue
            point = (float(tokens[i - 2]), float(tokens[i - 1]))
        except ValueError:
            at = None
            continue
        if token == b"l" and at is not None:
            _segment(at, point, across, down)
        at = point
    return across, down


def _rect(x: float, y: float, w: float, h: float, across: list[Edge], down: list[Edge]) -> None:
    x, w = (x + w, -w) if w < 0 else (x, w)
    y, h = (y + h, -h) if h < 0 else (y, h)
    if w < MIN_EDGE and h < MIN_EDGE:
        return
    if h <= THIN:
        across.append((y + h / 2, x, x + w))
    elif w <= THIN:
        down.append((x + w / 2, y, y + h))
    elif w >= MIN_EDGE and h >= MIN_EDGE:
        across += [(y, x, x + w), (y + h, x, x + w)]
        down += [(x, y, y + h), (x + w, y, y + h)]


def _segment(a: tuple[float, float], b: tuple[float, float], across: list[Edge], down: list[Edge]) -> None:
    if abs(a[1] - b[1]) <= THIN and abs(a[0] - b[0]) >= MIN_EDGE:
        across.append((a[1], min(a[0], b[0]), max(a[0], b[0])))
    elif abs(a[0] - b[0]) <= THIN and abs(a[1] - b[1]) >= MIN_EDGE:
        down.append((a[0], min(a[1], b[1]), max(a[1], b[1])))


def is_table(rows: list[list[str]]) -> bool:
    """What pdfplumber found is kept as a table when it has at least 3 rows and 2 columns, at least
    half its cells hold text, 2 rows hold text in 2 cells or more, at least half the filled cells
    hold a letter or digit, and no cell holds pdfminer's ``(cid:N)`` (a glyph without a text
    mapping: a formula or a plot's axis). A 2 x 2 grid of boxes, a row of check boxes, a plot's
    grid or a figure of stars is a layout, not a table (each seen in ../shared/cases)."""
    cells = [cell for row in rows for cell in row]
    filled = [cell for cell in cells if cell]
    if len(rows) < 3 or max(len(row) for row in rows) < 2 or 2 * len(filled) < len(cells):
        return False
    if sum(1 for row in rows if sum(1 for cell in row if cell) >= 2) < 2:
        return False
    if any("(cid:" in cell for cell in filled):
        return False
    return 2 * sum(1 for cell in filled if any(ch.isalnum() for ch in cell)) >= len(filled)


class PageTables:
    """pdfplumber on one PDF, opened on first use: ``tables(i, footnotes)`` are the tables of page
    index ``i`` that pass :func:`is_table`, their superscripts written apart (``footnotes``: the
    page's footnote labels, ingest/marks.py). A page pdfplumber cannot read has no tables (pypdf's text stands).
    Close it (or use ``with``)."""

    def __init__(self, data: bytes, password: str | None) -> None:
        self._data, self._password = data, password
        self._pdf = None

    def tables(self, index: int, footnotes: frozenset[str] = frozenset()) -> list[Table]:
        try:
            if self._pdf is None:
                import pdfplumber

                logging.getLogger("pdfminer").setLevel(logging.ERROR)
                self._pdf = pdfplumber.open(io.BytesIO(self._data), password=self._password or "")
            page = self._pdf.pages[index]
            mark_chars(page.chars, footnotes)  # superscripts apart: "8,935,112[3]" (ingest/marks.py)
            found = []
            for t in page.find_tables():
                raw = t.extract()
                if is_table(_cells(raw)):  # judged as drawn: a merged cell's other slots empty
                    found.append(Table(t.bbox, _cells(spread_spans(t, raw))))
            page.close()  # pdfplumber caches a page's objects until then
        except (MemoryError, RecursionError):
            raise
        except Exception:  # pdfminer's many errors on a page pypdf could read: keep pypdf's text
            return []
        return found

    def close(self) -> None:
        if self._pdf is not None:
            self._pdf.close()
            self._pdf = None

    def __enter__(self) -> PageTables:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def spread_spans(table, rows: list[list[str | None]]) -> list[list[str | None]]:
    """``rows`` (pdfplumber's ``table.extract()``) with the text of each merged cell in every slot it
    covers: a slot with no cell of its own (None) takes the text of the cell whose box holds the
    middle of the slot's row and column, one spanning columns ("Europe" over Germany to France, in
    google-doc-document.pdf) or rows alike (issue 51; bench/results/spans.md measured it against
    marking the span)."""
    boxes = [row.cells for row in table.rows]
    out = [list(row) for row in rows]
    columns = table.columns
    for i, row in enumerate(boxes):
        for j, box in enumerate(row):
            if box is not None or i >= len(out) or j >= len(out[i]) or j >= len(columns):
                continue
            try:
                x0, _, x1, _ = columns[j].bbox
                _, y0, _, y1 = table.rows[i].bbox
            except (TypeError, ValueError):  # a column or row with no cell of its own: no box
                continue
            x, y = (x0 + x1) / 2, (y0 + y1) / 2
            owner = next(
                ((a, b) for a, cells in enumerate(boxes) for b, c in enumerate(cells)
                 if c is not None and c[0] <= x <= c[2] and c[1] <= y <= c[3]),
                None,
            )  # fmt: skip
            if owner is not None and owner[0] < len(rows) and owner[1] < len(rows[owner[0]]):
                out[i][j] = rows[owner[0]][owner[1]]
    return out


def _cells(rows: list[list[str | None]]) -> list[list[str]]:
    return [[" ".join(drop_unmapped(cell or "").split()) for cell in row] for row in rows]


def rows_text(rows: list[list[str]]) -> str:
    """Pipe rows, ``| --- |`` under the first (the header row, as ingest/markup.py writes tables);
    a ``|`` inside a cell becomes ``\\|``."""
    lines = ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    lines.insert(1, "| " + " | ".join("---" for _ in rows[0]) + " |")
    return "\n".join(lines)


def splice_tables(page, tables: list[Table], chunks: list[Chunk]) -> str:
    """The text of the pypdf ``page`` as its ``chunks`` make it (ingest/marks.py ``page_text``) with
    each table of ``tables`` as pipe rows, on lines of their own, where its first chunk was."""
    box = page.mediabox
    left, top = float(box.left), float(box.top)
    out: list[str] = []
    placed: set[int] = set()
    for chunk in chunks:
        x, y = chunk.x - left, top - chunk.y
        inside = next((k for k, t in enumerate(tables) if _contains(t.bbox, x, y)), None)
        if inside is None:
            out.append(chunk.text)
        elif inside not in placed:
            placed.add(inside)
            out.append("\n\n" + rows_text(tables[inside].rows) + "\n\n")
    return "".join(out)


def _contains(bbox: tuple[float, float, float, float], x: float, y: float) -> bool:
    x0, y0, x1, y1 = bbox
    return x0 - _TOLERANCE <= x <= x1 + _TOLERANCE and y0 - _TOLERANCE <= y <= y1 + _TOLERANCE
