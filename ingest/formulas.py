"""Spreadsheet formulas that have no saved value, computed (issue 51).

A spreadsheet program saves each formula's result next to it, and docqa reads that saved value
(ingest/sheets.py). openpyxl, pandas and most scripts write formulas without one, so ``=SUM(B2:B5)``
totals came out as empty cells. For an XLSX/XLSM workbook with such cells (found by
:func:`has_unsaved`, a scan of its sheets' XML), :class:`Formulas` reads their formulas with openpyxl
and computes them with the ``formulas`` package (https://github.com/vinci1it2000/formulas: a
maintained Excel formula parser and function library), from the values the workbook saved (read by
calamine) and the other cells it computes.

**What is computed, and what never is.** Each formula is parsed first, and computed only when every
function it calls is in :data:`FUNCTIONS` (arithmetic, comparison and text operators, and the common
functions: SUM, AVERAGE, MIN, MAX, COUNT, IF, ROUND, ...) and every reference is a cell or a range of
this workbook. Never: a link to another workbook (``[1]Sheet!A1``: nothing is read but the upload), a
macro or user-defined function, a volatile function (NOW, TODAY, RAND, OFFSET, INDIRECT, CELL, INFO:
their value changes with time or with where they are evaluated), a defined name or a 3-D reference,
a formula that refers to a date (its result's format is unknown), one that gives several values (an
array formula), a circular reference, or a result that is an error value (``#DIV/0!``). Those cells
stay empty, and the document's warnings name them ("3 formula cells have no saved value and could not
be computed: Budget!H9, ..."); the cells that were computed are counted in a warning too, since the
spreadsheet program never showed those values.

**Limits.** At most :data:`MAX_FORMULAS` cells are computed per workbook, for at most
:data:`MAX_SECONDS`, along chains of at most :data:`MAX_DEPTH` formulas (in sheet order a running
total is a chain of one), and a range is read only as far as the sheet's values go. A formula copied
down a column is compiled once (compiling costs 3-5 ms, a call about 1 ms on a 2-core Xeon). It all
runs in the extraction worker, under its memory and time limits (ingest/worker.py).
"""

from __future__ import annotations

import datetime as dt
import io
import re
import time
import zipfile
from collections.abc import Callable

from ingest.cells import column_letter
from ingest.cells import column_number as column_index

MAX_FORMULAS = 20_000  # value-less formula cells computed per workbook; the rest are named as not computed
MAX_DEPTH = 100  # formulas a value may wait on in a chain (a deeper chain is not computed)
MAX_SECONDS = 20.0  # of computing per workbook, within the worker's DOCQA_EXTRACT_TIMEOUT_S (60 s by default)
MAX_NAMED = 10  # cells a warning names before "…"

#: The functions a formula may call to be computed: pure functions of their arguments, no volatile
#: one (NOW, TODAY, RAND, RANDBETWEEN, OFFSET, INDIRECT, CELL, INFO) and nothing that reads outside
#: the workbook. ``ARRAY``/``ARRAYROW`` are the parser's names for constants such as {1,2;3,4}.
FUNCTIONS = frozenset(
    """ABS AND AVERAGE AVERAGEA AVERAGEIF AVERAGEIFS CEILING CHOOSE CONCAT CONCATENATE COUNT COUNTA
    COUNTBLANK COUNTIF COUNTIFS EXACT FLOOR IF IFERROR IFS INT ISBLANK ISERROR ISNUMBER ISTEXT LEFT LEN
    LOWER MAX MAXA MEDIAN MID MIN MINA MOD NOT OR POWER PRODUCT PROPER RIGHT ROUND ROUNDDOWN ROUNDUP SIGN
    SQRT STDEV SUBSTITUTE SUM SUMIF SUMIFS SUMPRODUCT SWITCH TRIM TRUNC UPPER VALUE XOR ARRAY ARRAYROW""".split()
)
VOLATILE = frozenset("NOW TODAY RAND RANDBETWEEN RANDARRAY OFFSET INDIRECT CELL INFO".split())

_NS = rb"(?:[A-Za-z_][\w.-]*:)?"  # an XML namespace prefix (x:c)
_EMPTY_V = rb"(?:<" + _NS + rb"v\s*/>|<" + _NS + rb"v>\s*</" + _NS + rb"v>)?"
#: A formula cell with no value: ``<c r="D2"><f>SUM(B2:C2)</f><v /></c>``, or a shared formula's
#: ``<f t="shared" si="0"/>`` with none.
_UNSAVED = re.compile(rb"(?:</" + _NS + rb"f>|<" + _NS + rb"f\b[^>]*/>)\s*" + _EMPTY_V + rb"\s*</" + _NS + rb"c>")


Rows = list[list[object]]  # a sheet's values, row by row


class Uncomputable(Exception):
    """A formula that is not computed; ``args[0]`` says why, for the warning."""


def has_unsaved(data: bytes) -> bool:
    """True when a worksheet of the XLSX/XLSM ``data`` (a ZIP that ingest/containers.py has
    checked) has a formula cell with no saved value. False for anything else (an ODS, a ZIP it cannot read)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            for name in z.namelist():
                if name.startswith("xl/worksheets/") and name.endswith(".xml"):
                    xml = z.read(name)
                    if b"<f" in xml and _UNSAVED.search(xml):
                        return True
    except (zipfile.BadZipFile, OSError, ValueError, KeyError):
        return False
    return False


def cell_name(sheet: str, row: int, col: int) -> str:
    """``Budget!H9`` (``'Budget 2025'!H9`` when the name needs quotes) for 0-based ``row``, ``col``."""
    quoted = sheet if re.fullmatch(r"[A-Za-z_][\w.]*", sheet) else "'" + sheet.replace("'", "''") + "'"
    return f"{quoted}!{column_letter(col)}{row + 1}"


class Grid:
    """A sheet's values as calamine read them: ``rows`` from 0-based (row, column) ``start``, and the
    cells computed here (:meth:`put`)."""

    def __init__(self, rows: Rows, start: tuple[int, int] = (0, 0)) -> None:
        self.rows, self.start = rows, start
        self.extra: dict[tuple[int, int], object] = {}  # computed cells, by (row, column)
        width = max((len(r) for r in rows), default=0)
        self._end = (start[0] + len(rows) - 1, start[1] + width - 1)

    def get(self, row: int, col: int) -> object:
        if (row, col) in self.extra:
            return self.extra[row, col]
        r, c = row - self.start[0], col - self.start[1]
        if 0 <= r < len(self.rows) and 0 <= c < len(self.rows[r]):
            return self.rows[r][c]
        return None

    def put(self, row: int, col: int, value: object) -> None:
        self.extra[row, col] = value
        self._end = (max(self._end[0], row), max(self._end[1], col))

    def end(self) -> tuple[int, int]:
        """The last (row, column) with a value, computed ones included (0-based)."""
        return self._end

    def filled(self) -> tuple[Rows, tuple[int, int]]:
        """The rows with the computed cells in place, and their start (moved up or left when a
        computed cell lies before the values)."""
        if not self.extra:
            return self.rows, self.start
        top = min([self.start[0], *(r for r, _ in self.extra)]) if self.rows else min(r for r, _ in self.extra)
        left = min([self.start[1], *(c for _, c in self.extra)]) if self.rows else min(c for _, c in self.extra)
        bottom, right = self.end()
        out = [[None] * (right - left + 1) for _ in range(bottom - top + 1)]
        for i, row in enumerate(self.rows):
            for j, value in enumerate(row):
                out[self.start[0] + i - top][self.start[1] + j - left] = value
        for (row, col), value in self.extra.items():
            out[row - top][col - left] = value
        return out, (top, left)


class Formulas:
    """The formula cells of one XLSX/XLSM workbook that have no saved value, computed on demand.
    ``data``: the workbook's bytes; ``read_sheet(name)``: that sheet's values as calamine reads them
    (rows, 0-based start), for the sheets a formula refers to. :meth:`fill` gives a sheet's rows
    with its computed cells in place; :meth:`warnings` says what was computed and what could not be."""

    def __init__(self, data: bytes, read_sheet: Callable[[str], tuple[Rows, tuple[int, int]]]) -> None:
        from openpyxl import load_workbook

        self._read_sheet = read_sheet
        self._grids: dict[str, Grid] = {}
        self._formulas: dict[str, dict[tuple[int, int], str]] = {}  # sheet -> (row, column) -> "=SUM(...)"
        self._names: dict[str, str] = {}  # upper-case sheet name -> its name
        self._sheet_index: dict[str, int] = {}  # sheet name -> its place in the workbook
        book = load_workbook(io.BytesIO(data), read_only=True, data_only=False, keep_links=False, keep_vba=False)
        try:
            for ws in book.worksheets:
                self._names[ws.title.upper()] = ws.title
                self._sheet_index[ws.title] = len(self._sheet_index)
                cells = self._formulas[ws.title] = {}
                for row in ws.iter_rows():
                    for cell in row:
                        if getattr(cell, "data_type", None) == "f" and isinstance(cell.value, str):
                            cells[cell.row - 1, cell.column - 1] = cell.value
        finally:
            book.close()
        self._extent = {  # sheet -> the last row and the last column holding a formula (0-based)
            sheet: (max(r for r, _ in cells), max(c for _, c in cells))
            for sheet, cells in self._formulas.items()
            if cells
        }
        self._values: dict[tuple[str, int, int], object] = {}
        self._why: dict[tuple[str, int, int], str] = {}  # cells not computed -> why
        self._busy: set[tuple[str, int, int]] = set()  # being computed (a cycle comes back to one)
        self._parsed: dict[str, tuple[object, dict[str, dict]]] = {}  # formula -> compiled, its references
        # A formula copied down a column (=A2*B2, =A3*B3, ...) is compiled once: its relative form ->
        # (compiled, references, the cell it was compiled for, which coordinates of each are absolute).
        self._templates: dict[str, tuple[object, dict[str, dict], tuple[int, int], dict[str, tuple[bool, ...]]]] = {}
        self.computed = 0
        self._deadline = time.monotonic() + MAX_SECONDS

    # -- what ingest/sheets.py asks -------------------------------------------------------------------
    def fill(self, sheet: str, rows: Rows, start: tuple[int, int]) -> tuple[Rows, tuple[int, int]]:
        """``sheet``'s ``rows`` (from 0-based ``start``, as calamine read them) with each formula cell
        that has no saved value computed, or left empty when it cannot be; and their start."""
        grid = self._grids.get(sheet)
        if grid is None:
            if not self._formulas.get(sheet):
                return rows, start  # nothing to compute here (kept only when a formula refers to it)
            grid = self._grids[sheet] = Grid(rows, start)
        for row, col in sorted(self._formulas.get(sheet, {})):
            if _blank(grid.get(row, col)):
                try:
                    self._value(sheet, row, col, 0)
                except Uncomputable:
                    pass  # named in warnings()
        return grid.filled()

    def warnings(self) -> list[tuple[str, str]]:
        """(sheet, sentence) for the document's warnings: how many cells were computed (on the first
        sheet with one), and which could not be (on the first sheet with one)."""
        out = []
        if self.computed:
            n, first = self.computed, min(self._values, key=self._order)[0]
            out.append((first, f"{n} formula cell{'s' if n != 1 else ''} had no saved value; docqa computed "
                               f"{'them' if n != 1 else 'it'}, so the spreadsheet program never showed "
                               f"{'these values' if n != 1 else 'this value'}"))  # fmt: skip
        if self._why:
            cells = sorted(self._why, key=self._order)
            named = ", ".join(cell_name(*k) for k in cells[:MAX_NAMED]) + ("…" if len(cells) > MAX_NAMED else "")
            reasons = list(dict.fromkeys(self._why[k] for k in cells))  # in the order of their first cell
            why = "; ".join(reasons[:4]) + ("; …" if len(reasons) > 4 else "")
            n = len(cells)
            out.append((cells[0][0], f"{n} formula cell{'s have' if n != 1 else ' has'} no saved value and could "
                                     f"not be computed: {named} ({why}); re-save the workbook in a spreadsheet "
                                     "program to keep their values"))  # fmt: skip
        return out

    def page_of(self, sheet: str) -> int:
        """The page of ``sheet`` in the document (1-based: one page per worksheet, in workbook order)."""
        return self._sheet_index.get(sheet, 0) + 1

    def _order(self, key: tuple[str, int, int]) -> tuple[int, int, int]:
        """Workbook order of a cell: its sheet's place, then row, then column."""
        return self._sheet_index.get(key[0], 0), key[1], key[2]

    # -- computing ------------------------------------------------------------------------------------
    def _grid(self, sheet: str) -> Grid:
        """``sheet``'s values, read on first use; Uncomputable when calamine cannot read them."""
        if sheet not in self._grids:
            try:
                rows, start = self._read_sheet(sheet)
            except (MemoryError, RecursionError):
                raise
            except Exception as exc:
                raise Uncomputable(f"sheet {sheet!r} could not be read ({type(exc).__name__})") from None
            self._grids[sheet] = Grid(rows, start)
        return self._grids[sheet]

    def _value(self, sheet: str, row: int, col: int, depth: int) -> object:
        """The cell's value: as saved, or computed when it is a formula with none (None: empty).
        Raises Uncomputable when it is a formula that cannot be computed (and records why), so that
        what refers to it is not computed either."""
        key = (sheet, row, col)
        if key in self._values:
            return self._values[key]
        grid = self._grid(sheet)
        saved = grid.get(row, col)
        formula = self._formulas.get(sheet, {}).get((row, col))
        if formula is None or not _blank(saved):
            return None if _blank(saved) else saved
        if key in self._why:
            raise Uncomputable(f"a formula that refers to {cell_name(*key)}, which could not be computed")
        if key in self._busy:
            raise Uncomputable("a circular reference")
        try:
            if depth >= MAX_DEPTH:
                raise Uncomputable(f"a chain of more than {MAX_DEPTH} formulas")
            if self.computed >= MAX_FORMULAS:
                raise Uncomputable(f"more than {MAX_FORMULAS:,} formulas to compute")
            if time.monotonic() > self._deadline:
                raise Uncomputable(f"more than {MAX_SECONDS:.0f} s of computing")
            self._busy.add(key)
            try:
                value = self._compute(sheet, row, col, formula, depth)
            finally:
                self._busy.discard(key)
        except Uncomputable as exc:
            self._why.setdefault(key, str(exc))
            raise
        self._values[key] = value
        grid.put(row, col, value)
        self.computed += 1
        return value

    def _compute(self, sheet: str, row: int, col: int, formula: str, depth: int) -> object:
        import numpy as np
        import schedula
        from formulas.tokens.operand import XlError

        func, refs = self._compiled(formula, row, col)
        args = [self._input(sheet, refs[name], depth) for name in func.inputs]
        try:
            result = func(*args)
        except Exception as exc:  # the library's own errors (a function it lacks): not computed
            raise Uncomputable(f"the formula could not be computed ({type(exc).__name__})") from None
        value = np.asarray(result, dtype=object)
        if value.size != 1:
            raise Uncomputable("a formula that gives several values")
        value = value.reshape(-1)[0]
        if isinstance(value, XlError):
            raise Uncomputable(f"its result is {value}")
        if value is schedula.EMPTY or value is None:
            return ""
        if isinstance(value, np.generic):
            value = value.item()
        return value

    def _compiled(self, formula: str, row: int, col: int) -> tuple[object, dict[str, dict]]:
        """The compiled formula of cell (``row``, ``col``) and its references by input name: that of
        the same formula copied from another cell, its references moved as a copy moves them, when
        there is one (compiling costs 3-5 ms a formula, a call 1 ms)."""
        key, flags = relative(formula, row, col)
        if key is not None and key in self._templates:
            func, refs, (r0, c0), absolute = self._templates[key]
            return func, {name: _moved(refs[name], absolute[name], row - r0, col - c0) for name in refs}
        func, refs = self._parse(formula)
        if key is not None and set(flags) == set(func.inputs) == set(refs):
            self._templates[key] = (func, refs, (row, col), flags)
        return func, refs

    def _parse(self, formula: str) -> tuple[object, dict[str, dict]]:
        """The compiled formula and its references by input name; Uncomputable for what is never computed."""
        if formula in self._parsed:
            return self._parsed[formula]
        import formulas

        try:
            tokens, builder = formulas.Parser().ast(formula)
        except Exception:
            raise Uncomputable("a formula docqa cannot read") from None
        refs: dict[str, dict] = {}
        for token in tokens:
            kind, attr = type(token).__name__, token.attr
            if kind == "Function":
                name = attr.get("name", "").upper()
                if name in VOLATILE:
                    raise Uncomputable(f"{name} is volatile: its value changes")
                if name not in FUNCTIONS:
                    raise Uncomputable(f"{name} is not computed")
            elif kind == "Range":
                if attr.get("filename") is not None or "[" in attr.get("name", ""):
                    raise Uncomputable("a link to another workbook")
                if attr.get("is_reference") or "c1" not in attr:
                    raise Uncomputable(f"the name {attr.get('ref', attr.get('name'))!r}")
                refs[attr["name"]] = attr
        try:
            func = builder.compile()
        except Exception:
            raise Uncomputable("a formula docqa cannot read") from None
        if any(name not in refs for name in func.inputs):
            raise Uncomputable("a reference docqa cannot read")
        self._parsed[formula] = (func, refs)
        return func, refs

    def _input(self, sheet: str, ref: dict, depth: int) -> object:
        """A reference's value: one cell's, or a range's as a 2-D array (clipped to the sheet's values)."""
        import numpy as np
        import schedula

        target = ref.get("sheet")
        if target:
            target = self._names.get(target.upper())
            if target is None:
                raise Uncomputable(f"a sheet the workbook lacks ({ref['sheet']!r})")
        else:
            target = sheet
        grid = self._grid(target)
        last_row, last_col = grid.end()
        r1, r2 = max(int(ref["r1"] or 1), 1) - 1, int(ref["r2"] or 1048576) - 1
        c1 = column_index(ref["c1"]) if ref["c1"] else 0
        c2 = column_index(ref["c2"]) if ref["c2"] else 16383
        if target in self._extent:  # a formula cell that is not computed yet may lie past the values
            last_row, last_col = max(last_row, self._extent[target][0]), max(last_col, self._extent[target][1])
        single = r1 == r2 and c1 == c2
        r2, c2 = (r2, c2) if single else (min(r2, last_row), min(c2, last_col))

        there, empty = self._formulas.get(target, {}), schedula.EMPTY

        def value(row: int, col: int) -> object:
            v = grid.get(row, col)
            if (v is None or v == "") and (row, col) in there:  # a formula with no saved value
                v = self._value(target, row, col, depth + 1)
            if isinstance(v, dt.date | dt.time | dt.timedelta):
                raise Uncomputable("a formula that refers to a date or time")
            return empty if v is None or v == "" else v

        if single:
            return value(r1, c1)
        if r2 < r1 or c2 < c1:
            return np.array([[schedula.EMPTY]], dtype=object)
        return np.array([[value(r, c) for c in range(c1, c2 + 1)] for r in range(r1, r2 + 1)], dtype=object)


def _blank(value: object) -> bool:
    return value is None or value == ""


#: A cell or range reference in a formula's text: ``B2``, ``$B$2:C$9``, ``Sheet2!A1``, ``'Q 1'!A1``.
_REF = re.compile(
    r"(?<![\w.$!'])(?P<sheet>(?:'(?:[^']|'')+'|[A-Za-z_][\w.]*)!)?"
    r"(?P<c1>\$?[A-Za-z]{1,3})(?P<r1>\$?[0-9]+)(?::(?P<c2>\$?[A-Za-z]{1,3})(?P<r2>\$?[0-9]+))?(?![\w(!])"
)


def relative(formula: str, row: int, col: int) -> tuple[str | None, dict[str, tuple[bool, ...]]]:
    """The formula of cell (``row``, ``col``, 0-based) as a copy to another cell reads it: each
    reference as its offset from the cell, an absolute (``$``) coordinate as it is (``=A2*$B$1`` in
    C2 and ``=A3*$B$1`` in C3 read the same); and, by each reference's name as the formulas parser
    names it (``B1``, ``SHEET2!A1:A3``), which of its coordinates (c1, r1, c2, r2) are absolute.
    (None, {}) when a reference is written two ways (``A1`` and ``$A$1``): such a formula is compiled
    for each cell."""
    parts = formula.split('"')  # even parts are outside string literals
    flags: dict[str, tuple[bool, ...]] = {}
    for k in range(0, len(parts), 2):
        out, at = [], 0
        for m in _REF.finditer(parts[k]):
            coords = [m["c1"], m["r1"]] + ([m["c2"], m["r2"]] if m["c2"] else [])
            absolute = tuple(c.startswith("$") for c in coords)
            sheet = (m["sheet"] or "").upper()
            plain = [c.lstrip("$").upper() for c in coords]
            name = sheet + plain[0] + plain[1] + (f":{plain[2]}{plain[3]}" if m["c2"] else "")
            if flags.setdefault(name, absolute) != absolute:
                return None, {}
            moved = []
            for i, (text, fixed) in enumerate(zip(plain, absolute, strict=True)):
                if fixed:
                    moved.append("$" + text)
                elif i % 2 == 0:
                    moved.append(f"c{column_index(text) - col}")
                else:
                    moved.append(f"r{int(text) - 1 - row}")
            written = sheet + "".join(moved[:2]) + (":" + "".join(moved[2:]) if m["c2"] else "")
            out += [parts[k][at : m.start()], written]
            at = m.end()
        parts[k] = "".join(out) + parts[k][at:]
    return '"'.join(parts), flags


def _moved(ref: dict, absolute: tuple[bool, ...], rows: int, cols: int) -> dict:
    """``ref`` (a parser's range attributes) as a formula copied ``rows`` down and ``cols`` right
    reads it: each coordinate that is not absolute moves."""
    both = absolute + absolute if len(absolute) == 2 else absolute  # one cell: its start and end move alike
    fixed = dict(zip(("c1", "r1", "c2", "r2"), both, strict=True))
    out = dict(ref)
    for axis, shift in (("c", cols), ("r", rows)):
        for end in ("1", "2"):
            key = axis + end
            if fixed[key] or not out.get(key):
                continue
            if axis == "c":
                out[key] = column_letter(column_index(out[key]) + shift)
            else:
                out[key] = str(int(out[key]) + shift)
    return out
