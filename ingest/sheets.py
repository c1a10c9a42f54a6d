"""Spreadsheets (XLSX/XLSM and ODS, python-calamine: https://github.com/dimastbk/python-calamine, the
Python binding of the Rust calamine reader) as text: one page per sheet, each a pipe table that keeps
the sheet's name, its header row and its cell references, so that a citation can name "Sheet2!B7"
(ingest/locate.py reads them back from the text).

A sheet's page, as :func:`render_table` writes it::

    ## Sheet: Sheet2

    | 1 | Name (A) | Amount (B) |
    | --- | --- | --- |
    | 2 | Alice | 30 |
    | 7 | Bob | 2.5 |

The first column is the row's number in the sheet; the first row with a value is the header, each of
its cells followed by its column's letter; empty rows are left out (their numbers say so), and the
columns run from the sheet's first used column to its last. A CSV or TSV file (ingest/delimited.py)
is the same table without the heading.

**Values only.** A cell is what the spreadsheet program last saved in it: a formula's cached result,
never the formula (an error value such as ``#DIV/0!`` reads as empty). A formula a script wrote
without a result is computed when it can be (ingest/formulas.py: arithmetic, references and the
common functions, never links to other files, macros or volatile functions), and named in the
warnings when it cannot. Numbers keep 15 significant digits (Excel's precision), dates and times ISO
8601, booleans TRUE/FALSE.

**Limits.** The ZIP has passed ingest/containers.py ``check_container`` (members, inflated size and
ratio, XML entities) before calamine opens it; calamine then holds one sheet at a time (a million
rows of three columns: ~330 MB and 3 s on one core, inside the worker's memory limit). At most
:data:`MAX_ROWS` rows of a sheet, :data:`MAX_COLUMNS` columns and :data:`MAX_CELLS` cells of a
workbook are read, and a cell keeps at most :data:`MAX_CELL_CHARS` characters; what is left out is
named in the document's warnings. Chart, dialog and macro sheets have no cells and are skipped.
"""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ingest.cells import column_letter
from ingest.errors import UnreadableDocument

MAX_ROWS = 100_000  # of one sheet: far more text than the longest document's budget holds
MAX_COLUMNS = 512
MAX_CELLS = 1_000_000  # non-empty cells of a workbook
MAX_CELL_CHARS = 4_000
HEADING = "## Sheet: "  # ingest/locate.py reads the sheet's name after it


def cell_text(value: object) -> str:
    """A cell's value as it goes into the table: one line, ``|`` escaped, at most MAX_CELL_CHARS."""
    if isinstance(value, bool):
        text = "TRUE" if value else "FALSE"
    elif isinstance(value, float):
        text = str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.15g}"
    elif isinstance(value, dt.datetime):
        text = value.isoformat(sep=" ", timespec="seconds").removesuffix(" 00:00:00")
    elif isinstance(value, dt.date | dt.time):
        text = value.isoformat()
    else:
        text = "" if value is None else str(value)
    text = " ".join(text.split())
    if len(text) > MAX_CELL_CHARS:
        text = text[:MAX_CELL_CHARS] + "…"
    return text.replace("|", "\\|")


@dataclass(slots=True)
class Budget:
    """Cells a workbook may still have read; the warnings about what was left out."""

    cells: int = MAX_CELLS
    warnings: list[dict] = field(default_factory=list)

    def warn(self, page: int, message: str) -> None:
        self.warnings.append({"page": page, "message": message})


def render_table(rows: Iterable[Sequence[object]], first_row: int, first_col: int, budget: Budget, page: int,
                 where: str, layout=None) -> str:  # fmt: skip
    """The pipe table of ``rows`` (the first is sheet row ``first_row``, 1-based; its first cell is in
    0-based column ``first_col``), as the module docstring shows; "" for no value at all. Counts its
    cells against ``budget`` and stops (with a warning on ``page`` naming ``where``) past a limit.
    ``layout``: a compacted sheet's ingest/xlsx_repair.py ``Layout`` (``first_row`` and ``first_col``
    are then places in it, and the table names the sheet's own rows and columns)."""

    def letter(i: int) -> str:  # the sheet column of the table's column i
        return column_letter(layout.columns[first_col + i] if layout is not None else first_col + i)

    kept: list[tuple[int, list[str]]] = []
    for offset, row in enumerate(rows):
        number = layout.rows[first_row - 1 + offset] if layout is not None else first_row + offset
        if offset >= MAX_ROWS:
            budget.warn(page, f"{where}: rows from {number} on are not read (at most {MAX_ROWS:,} rows a sheet)")
            break
        if len(row) > MAX_COLUMNS and not kept:
            budget.warn(page, f"{where}: columns past {letter(MAX_COLUMNS - 1)} are not read")
        cells = [cell_text(v) for v in row[:MAX_COLUMNS]]
        while cells and not cells[-1]:
            cells.pop()
        if not cells:
            continue
        filled = sum(1 for c in cells if c)
        if filled > budget.cells:
            budget.warn(page, f"{where}: rows from {number} on are not read (at most {MAX_CELLS:,} cells a file)")
            break
        budget.cells -= filled
        kept.append((number, cells))
    if not kept:
        return ""
    width = max(len(cells) for _, cells in kept)
    (number, first), body = kept[0], kept[1:]
    first = first + [""] * (width - len(first))
    header = [f"{c} ({letter(i)})" if c else f"({letter(i)})" for i, c in enumerate(first)]
    lines = [f"| {number} | " + " | ".join(header) + " |", "| --- |" + " --- |" * width]
    lines += [f"| {n} | " + " | ".join(cells) + " |" for n, cells in body]
    return "\n".join(lines)


def sheet_pages(data: bytes) -> tuple[list[str], list[dict]]:
    """The text of each worksheet of an XLSX/XLSM or ODS workbook (one page per sheet, in workbook
    order; a sheet without values says so), and warnings for what was not read. An XLSX's sheets that
    calamine cannot read as they are (far-apart cells, a row-0 dimension record, a shared-string index
    that does not exist) are rewritten first (ingest/xlsx_repair.py), so a fault costs its cells, not
    its sheet or the workbook. Raises UnreadableDocument for a workbook calamine cannot open, or one
    without a worksheet."""
    from python_calamine import CalamineError, SheetTypeEnum, SheetVisibleEnum

    from ingest.xlsx_repair import blank_bad_strings, repair

    repaired = repair(data)
    book = _open(repaired.data)
    budget, pages = Budget(), []
    try:
        computed = _formulas(data, lambda name: _start(*_rows(book, name)), budget)  # None: no unsaved formula
        for meta in book.sheets_metadata:
            if meta.typ != SheetTypeEnum.WorkSheet:
                continue
            page = len(pages) + 1
            for sheet, message in repaired.warnings:
                if sheet == meta.name:
                    budget.warn(page, message)
            hidden = "\n\n(a hidden sheet)" if meta.visible != SheetVisibleEnum.Visible else ""
            try:
                sheet, rows = _rows(book, meta.name)
            except (CalamineError, ValueError, OSError) as exc:
                blanked = blank_bad_strings(repaired, meta.name) if "shared string" in str(exc) else None
                sheet, rows = None, []
                if blanked is not None:  # the cells that name no string left empty, the rest read
                    book.close()
                    book = _open(repaired.data)
                    for message in blanked:
                        budget.warn(page, message)
                    try:
                        sheet, rows = _rows(book, meta.name)
                    except (CalamineError, ValueError, OSError) as again:
                        exc = again
                if sheet is None:
                    budget.warn(page, f"sheet {meta.name!r} could not be read ({exc}); it is left empty")
            start = sheet.start if sheet is not None and sheet.start is not None else (0, 0)
            if computed is not None and meta.name not in repaired.layouts:  # a compacted sheet: saved values only
                rows, start = _filled(computed, meta.name, rows, start, budget, page)
            table = render_table(rows, start[0] + 1, start[1], budget, page, f"sheet {meta.name!r}",
                                 repaired.layouts.get(meta.name))  # fmt: skip
            del sheet, rows
            pages.append(f"{HEADING}{meta.name}{hidden}\n\n{table or '(no values)'}")
    finally:
        book.close()
    if not pages:
        raise UnreadableDocument("the workbook has no worksheet (only charts or macros); there is no text to read")
    if computed is not None:
        for sheet, message in computed.warnings():
            budget.warn(computed.page_of(sheet), message)
    return pages, budget.warnings


def _filled(computed, name: str, rows: list, start: tuple[int, int], budget: Budget, page: int):
    """``rows`` with the sheet's computed formula cells (ingest/formulas.py); as they were, with a
    warning, should computing them fail in a way it did not foresee (the sheet is still read)."""
    try:
        return computed.fill(name, rows, start)
    except (MemoryError, RecursionError):
        raise
    except Exception as exc:
        budget.warn(page, f"sheet {name!r}: formula cells without a saved value are left empty ({type(exc).__name__})")
        return rows, start


def _formulas(data: bytes, read_sheet, budget: Budget):
    """The computer of the workbook's formula cells that have no saved value (ingest/formulas.py), or
    None when it has none (or is not an XLSX); a workbook whose formulas openpyxl cannot read is
    read with those cells empty, and a warning says so."""
    from ingest import formulas

    if not formulas.has_unsaved(data):
        return None

    try:
        return formulas.Formulas(data, read_sheet)
    except (MemoryError, RecursionError):
        raise
    except Exception as exc:  # openpyxl's many errors on a workbook calamine could read
        budget.warn(1, f"formula cells without a saved value are left empty: their formulas could not be read "
                       f"({type(exc).__name__})")  # fmt: skip
        return None


def _open(data: bytes):
    """calamine's workbook of ``data``; UnreadableDocument when it cannot open it."""
    from python_calamine import CalamineError, CalamineWorkbook

    try:
        return CalamineWorkbook.from_filelike(io.BytesIO(data))
    except (CalamineError, ValueError, OSError) as exc:
        raise UnreadableDocument(
            f"the spreadsheet could not be opened ({type(exc).__name__}: {exc}); open and re-save it"
        ) from exc


def _rows(book, name: str):
    """The sheet ``name`` of ``book`` and its rows (at most MAX_ROWS + 1)."""
    sheet = book.get_sheet_by_name(name)
    return sheet, sheet.to_python(skip_empty_area=True, nrows=MAX_ROWS + 1)


def _start(sheet, rows: list) -> tuple[list, tuple[int, int]]:
    """``rows`` and where ``sheet``'s first one is (row, column; 0-based)."""
    return rows, sheet.start or (0, 0)
