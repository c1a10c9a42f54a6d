"""Where in a spreadsheet or a slide deck a span of its text is, for citations: ``Sheet2!B7``,
``Sheet2!A7:C9``, ``B7`` (a CSV file), ``slide 3``, ``slide 3 notes``.

Read back from the text itself, as ingest/sheets.py and ingest/slides.py lay it out (a page per sheet
whose first line is ``## Sheet: <name>``, a table whose first column is the sheet row's number and
whose header cells end with their column's letter; a page per slide, its notes after ``### Notes``),
so nothing beyond the text and its page map is stored, and a part of an upload (``chars=``) or a
segment of a long one is located the same way. Sheet names that are not one word are quoted as
Excel writes them (``'Q1 sales'!B7``).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

from ingest.formats import SHEET_KINDS, SLIDE_KINDS
from ingest.sheets import HEADING as SHEET_HEADING
from ingest.sheets import column_letter
from ingest.slides import NOTES

_PIPE = re.compile(r"(?<!\\)\|")
_LETTER = re.compile(r"\(([A-Z]{1,3})\)$")
_WORD = re.compile(r"\w+")


def column_index(letters: str) -> int:
    """0-based index of a column's letters (A -> 0, AA -> 26): the inverse of sheets.column_letter."""
    n = 0
    for ch in letters:
        n = n * 26 + ord(ch) - 64
    return n - 1


def quoted(sheet: str) -> str:
    """A sheet's name as a reference writes it: quoted (quotes doubled) unless it is one word."""
    return sheet if _WORD.fullmatch(sheet) else "'" + sheet.replace("'", "''") + "'"


def sheet_ref(sheet: str | None, ref: str) -> str:
    """``Sheet2!B7``; ``B7`` for a CSV file (no sheet)."""
    return ref if sheet is None else f"{quoted(sheet)}!{ref}"


def printed_label(labels: Sequence[str] | None, page: int) -> str | None:
    """PDF page ``page``'s printed label (``labels[page - 1]``, ingest/pdf.py) where it differs from the
    page's number ("ii" for page 2 of GeoTopo); None where they agree or the PDF has none."""
    if not labels or not 0 < page <= len(labels) or labels[page - 1] == str(page):
        return None
    return labels[page - 1]


class Locator:
    """Cell and slide labels of one document's text (``page_starts``: where page ``first_page + i``
    begins), and a PDF's printed page labels (``labels[n - 1]``: page n's, ingest/pdf.py)."""

    def __init__(
        self,
        text: str,
        kind: str,
        page_starts: Sequence[int],
        first_page: int = 1,
        labels: Sequence[str] | None = None,
    ) -> None:
        self.text, self.kind, self.first_page = text, kind, first_page
        self.page_starts = list(page_starts) or [0]
        self.labels = list(labels) if labels else None

    def where(self, start: int, end: int) -> str | None:
        """The label of characters ``[start, end)``; None when it names nothing more than its page."""
        if end <= start:
            return None
        if self.kind in SLIDE_KINDS:
            return self._slides(start, end)
        if self.kind in SHEET_KINDS:
            return self._cells(start, end)
        if self.labels is not None:
            return self._printed(start, end)
        return None

    def _printed(self, start: int, end: int) -> str | None:
        """ "p. ii (PDF p. 2)", "pp. iii–1 (PDF pp. 3–4)": the printed labels, and the PDF's page
        numbers where a label differs from its number (issue 39 item 5: GeoTopo's page printed "ii"
        was cited as "p. 2"); None where they agree."""
        first, last = self._page(start) + self.first_page, self._page(end - 1) + self.first_page
        if printed_label(self.labels, first) is None and printed_label(self.labels, last) is None:
            return None

        def label(n: int) -> str:
            return printed_label(self.labels, n) or str(n)

        if first == last:
            return f"p. {label(first)} (PDF p. {first})"
        return f"pp. {label(first)}–{label(last)} (PDF pp. {first}–{last})"

    # -- slides ---------------------------------------------------------------------------------------
    def _page(self, offset: int) -> int:
        """0-based index into page_starts of the page holding ``offset``."""
        return max(0, bisect.bisect_right(self.page_starts, offset) - 1)

    def _page_end(self, i: int) -> int:
        return self.page_starts[i + 1] if i + 1 < len(self.page_starts) else len(self.text)

    def _slides(self, start: int, end: int) -> str:
        first, last = self._page(start), self._page(end - 1)
        if first != last:
            return f"slides {first + self.first_page}-{last + self.first_page}"
        page_start = self.page_starts[first]
        notes = self.text.find(f"\n{NOTES}\n", page_start, self._page_end(first))
        label = f"slide {first + self.first_page}"
        return f"{label} notes" if notes >= 0 and start > notes else label

    # -- cells ----------------------------------------------------------------------------------------
    def _sheet(self, i: int) -> str | None:
        """The name of the sheet on page ``i`` (None: a CSV file, which has one table and no name)."""
        start, stop = self.page_starts[i], self._page_end(i)
        newline = self.text.find("\n", start, stop)
        line = self.text[start : stop if newline < 0 else newline]
        return line[len(SHEET_HEADING) :].strip() if line.startswith(SHEET_HEADING) else None

    def _cells(self, start: int, end: int) -> str | None:
        found: dict[str | None, list[tuple[int, int]]] = {}
        pos = self.text.rfind("\n", 0, start) + 1
        header: list[str | None] | None = None
        while pos < end and pos < len(self.text):
            stop = self.text.find("\n", pos)
            stop = len(self.text) if stop < 0 else stop
            line = self.text[pos:stop]
            if not line.startswith("|"):
                header = None
            elif header is None:
                header = self._header(pos)
            if header is not None and line.startswith("| ") and not line.startswith("| ---"):
                sheet = self._sheet(self._page(pos))
                for row, col in _hits(line, pos, start, end, header):
                    found.setdefault(sheet, []).append((row, col))
            pos = stop + 1
        if not found:
            i = self._page(start)
            sheet = self._sheet(i) if self._page(end - 1) == i else None
            return quoted(sheet) if sheet else None
        return ", ".join(_range(sheet, cells) for sheet, cells in found.items())

    def _header(self, pos: int) -> list[str | None]:
        """The column letters of the table whose line starts at ``pos`` (from its header line, the
        first of the run of table lines it is in); index 0 is the row-number column."""
        while pos > 0:
            before = self.text.rfind("\n", 0, pos - 1) + 1
            if not self.text.startswith("|", before) or before == pos:
                break
            pos = before
        stop = self.text.find("\n", pos)
        line = self.text[pos : len(self.text) if stop < 0 else stop]
        letters: list[str | None] = []
        for cell in _split(line):
            m = _LETTER.search(line[cell[0] : cell[1]])
            letters.append(m.group(1) if m else None)
        return letters


def _split(line: str) -> list[tuple[int, int]]:
    """``[start, end)`` in ``line`` of each cell of a pipe row, spaces trimmed."""
    pipes = [m.start() for m in _PIPE.finditer(line)]
    cells = []
    for a, b in zip(pipes, pipes[1:], strict=False):
        a += 1
        while a < b and line[a] == " ":
            a += 1
        while b > a and line[b - 1] == " ":
            b -= 1
        cells.append((a, b))
    return cells


def _hits(line: str, pos: int, start: int, end: int, header: list[str | None]) -> list[tuple[int, int]]:
    """(row, 0-based column) of each non-empty cell of a table line (at text offset ``pos``) that
    overlaps ``[start, end)``."""
    cells = _split(line)
    if not cells or not line[cells[0][0] : cells[0][1]].isdigit():
        return []
    row = int(line[cells[0][0] : cells[0][1]])
    out = []
    for i, (a, b) in enumerate(cells[1:], 1):
        letter = header[i] if i < len(header) else None
        if b > a and letter and pos + a < end and pos + b > start:
            out.append((row, column_index(letter)))
    return out


def _range(sheet: str | None, cells: list[tuple[int, int]]) -> str:
    rows, cols = [r for r, _ in cells], [c for _, c in cells]
    top_left = f"{column_letter(min(cols))}{min(rows)}"
    if len(set(cells)) == 1:
        return sheet_ref(sheet, top_left)
    return sheet_ref(sheet, f"{top_left}:{column_letter(max(cols))}{max(rows)}")
