"""XLSX worksheet parts that calamine cannot read as they are, rewritten so that it can, before
ingest/sheets.py reads them (issue 49). calamine (https://github.com/tafia/calamine) reads a sheet
into one dense rectangle of cells and fails a whole sheet for one bad record; three faults of real
and hostile files, each now costing only what is wrong:

* **Far-apart cells**: a sheet whose cells span more than :data:`DENSE_CELLS` positions (``A1`` and
  ``XFD1048576``: 17 billion) made calamine allocate all of them, and the worker died ("repair or
  re-export"). The used range is bounded by the cells that exist, never by the ``<dimension>``
  record: each worksheet part's cell references are scanned first (bytes, in pieces), and a sheet
  too sparse for one rectangle is rewritten with only its used rows and columns, side by side; its
  :class:`Layout` gives each kept row's number and each kept column's index back, so the table
  (ingest/sheets.py ``render_table``) still names the real cells (``XFD1048576``).
* **A ``<dimension>`` record of row 0** (``A0:B3``; calamine: "Range is missing the expected row
  component") emptied its sheet: the record is dropped (it only repeats what the cells say).
* **A shared-string index that does not exist** (calamine: "Cell string index not found") emptied its
  sheet: the cell is left empty with a warning naming it, and the rest of the sheet is read
  (:func:`blank_bad_strings`, after calamine has refused the sheet once).

A rewritten part keeps the sheet's cells (values, types, styles: calamine still reads them) inside a
bare ``<worksheet><sheetData>``; what calamine never reads here (column widths, merged cells, views)
is left out. The parts are parsed with lxml without entities (the container passed
ingest/containers.py ``check_container``) in a streaming pass, one row at a time.
"""

from __future__ import annotations

import io
import posixpath
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field

from lxml import etree

from ingest.cells import column_letter, column_number

DENSE_CELLS = 4_000_000  # positions calamine may hold for one sheet (~40 bytes each)
CHUNK_BYTES = 1024**2
MAX_COLUMNS = 16_384  # XFD: a cell without a reference may lie anywhere in its row
_NS_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_QUICK_REF = re.compile(rb'<c r="([A-Z]{1,3})([0-9]{1,7})"')
_REF = re.compile(rb"<(?:\w+:)?c\b[^>]*?\sr=\"([A-Z]{1,3})([0-9]{1,7})\"")
_CELL = re.compile(rb"<(?:\w+:)?c[\s>/]")
_ROW = re.compile(rb"<(?:\w+:)?row\b[^>]*?\sr=\"([0-9]{1,7})\"")
_DIMENSION = re.compile(rb"<(?:\w+:)?dimension\b[^>]*>")
_BAD_DIMENSION = re.compile(rb"ref=\"(?:[A-Z]+0\b|[^\"]*:[A-Z]+0\b|[^\"]*[^A-Z0-9:\"])")
_CELL_REF = re.compile(r"([A-Z]{1,3})([0-9]{1,7})$")
_XML_ERRORS = (etree.XMLSyntaxError, ValueError)


@dataclass(frozen=True, slots=True)
class Layout:
    """A compacted sheet: the sheet row number (1-based) of each kept row and the 0-based sheet column
    of each kept column, in order."""

    rows: tuple[int, ...]
    columns: tuple[int, ...]


@dataclass(slots=True)
class Repaired:
    """The workbook as calamine gets it, the layout of each compacted sheet (by sheet name), the
    worksheet part of each sheet name, and warnings ``(sheet name, message)``."""

    data: bytes
    layouts: dict[str, Layout] = field(default_factory=dict)
    parts: dict[str, str] = field(default_factory=dict)
    warnings: list[tuple[str, str]] = field(default_factory=list)


def repair(data: bytes) -> Repaired:
    """``data`` (an XLSX) with its far-apart sheets compacted and its row-0 dimension records dropped
    (module docstring); ``data`` itself when nothing needs it. Never raises for a malformed part:
    calamine says what is wrong with it."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        parts = sheet_parts(archive)
    except (zipfile.BadZipFile, OSError, ValueError, KeyError, EOFError, *_XML_ERRORS):
        return Repaired(data)
    out = Repaired(data, parts=parts)
    replaced: dict[str, bytes] = {}
    for name, part in parts.items():
        try:
            scan = _scan(archive, part)
        except (zipfile.BadZipFile, OSError, ValueError, KeyError, EOFError, RuntimeError, NotImplementedError):
            continue
        if not (scan.bad_dimension or scan.too_sparse):
            continue
        try:
            body, layout, _ = rewrite(archive.read(part), compact=scan.too_sparse)
        except _XML_ERRORS:
            continue
        replaced[part] = body
        if scan.bad_dimension:
            out.warnings.append((name, f"sheet {name!r}: its dimension record ({scan.dimension}) is wrong; ignored"))
        if layout is not None:
            out.layouts[name] = layout
            out.warnings.append((name, f"sheet {name!r}: its cells lie far apart ({scan.span}); only the rows and "
                                       "columns with values are shown"))  # fmt: skip
    if replaced:
        out.data = with_parts(archive, replaced)
    return out


def blank_bad_strings(repaired: Repaired, sheet: str) -> list[str] | None:
    """Rewrite ``sheet``'s part with each cell whose shared-string index does not exist left empty (in
    ``repaired``, in place); the messages naming those cells, or None when the sheet's part or the
    shared strings cannot be found."""
    part = repaired.parts.get(sheet)
    if part is None:
        return None
    try:
        archive = zipfile.ZipFile(io.BytesIO(repaired.data))
        count = shared_strings(archive)
        body, _, bad = rewrite(archive.read(part), compact=False, strings=count)
    except (zipfile.BadZipFile, OSError, ValueError, KeyError, *_XML_ERRORS):
        return None
    repaired.data = with_parts(archive, {part: body})
    layout = repaired.layouts.get(sheet)  # a compacted sheet's cells are named by their real places
    messages = []
    for col, number, index in bad:
        if layout is not None:
            col, number = layout.columns[col], layout.rows[number - 1]
        messages.append(f"sheet {sheet!r}: cell {column_letter(col)}{number} names shared string {index}, which "
                        "the workbook does not have; it is left empty")  # fmt: skip
    return messages


# -- the workbook's parts -------------------------------------------------------------------------------
def _xml(data: bytes):
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=True)
    return etree.fromstring(data, parser)


def _targets(archive: zipfile.ZipFile, rels: str, base: str) -> dict[str, tuple[str, str]]:
    """``{relationship id: (type, ZIP path)}`` of a relationships part."""
    root = _xml(archive.read(rels))
    out = {}
    for e in root:
        target = e.get("Target", "")
        path = target.lstrip("/") if target.startswith("/") else posixpath.normpath(posixpath.join(base, target))
        out[e.get("Id", "")] = (e.get("Type", ""), path)
    return out


def sheet_parts(archive: zipfile.ZipFile) -> dict[str, str]:
    """``{sheet name: worksheet part}`` of the workbook (``xl/workbook.xml`` and its relationships)."""
    targets = _targets(archive, "xl/_rels/workbook.xml.rels", "xl")
    out = {}
    for e in _xml(archive.read("xl/workbook.xml")).iter("{*}sheet"):
        kind, path = targets.get(e.get(f"{{{_NS_REL}}}id", ""), ("", ""))
        if kind.endswith("/worksheet") and path in archive.NameToInfo:
            out[e.get("name", "")] = path
    return out


def shared_strings(archive: zipfile.ZipFile) -> int:
    """How many shared strings the workbook has (0 without a shared-strings part)."""
    targets = _targets(archive, "xl/_rels/workbook.xml.rels", "xl")
    path = next((p for kind, p in targets.values() if kind.endswith("/sharedStrings")), "xl/sharedStrings.xml")
    if path not in archive.NameToInfo:
        return 0
    count = 0
    with archive.open(path) as f:
        for _, element in etree.iterparse(f, events=("end",), tag="{*}si", resolve_entities=False, huge_tree=True):
            count += 1
            element.clear()
    return count


def with_parts(archive: zipfile.ZipFile, replaced: dict[str, bytes]) -> bytes:
    """The archive with the members in ``replaced`` rewritten (the others copied as they are)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for info in archive.infolist():
            z.writestr(info.filename, replaced.get(info.filename) or archive.read(info))
    return out.getvalue()


# -- one worksheet part ---------------------------------------------------------------------------------
@dataclass(slots=True)
class _Scan:
    min_row: int = 0
    max_row: int = 0
    min_col: int = 0
    max_col: int = 0
    unreferenced: bool = False  # cells without an ``r``: their column is not known from the bytes
    dimension: str = ""
    bad_dimension: bool = False

    @property
    def too_sparse(self) -> bool:
        if not self.max_row:
            return False
        width = MAX_COLUMNS if self.unreferenced else self.max_col - self.min_col + 1
        return (self.max_row - self.min_row + 1) * width > DENSE_CELLS

    @property
    def span(self) -> str:
        return f"{column_letter(self.min_col)}{self.min_row} to {column_letter(self.max_col)}{self.max_row}"


def _scan(archive: zipfile.ZipFile, part: str) -> _Scan:
    """The span of the cells of a worksheet part, from their references (bytes, in pieces: a cell's own
    ``r`` places it, whatever its row says). Cells written ``<c r="B7"`` (every spreadsheet program)
    take one quick pattern; a piece with others (a prefix, ``r`` after another attribute) the general
    one."""
    found = _Scan()
    rows: list[int] = []
    cols: set[bytes] = set()
    first = True
    with archive.open(part) as f:
        carry = b""
        while chunk := f.read(CHUNK_BYTES):
            text = carry + chunk
            cut = text.rfind(b"<")
            text, carry = (text[:cut], text[cut:]) if cut > 0 else (text, b"")
            if first:
                first = False
                dim = _DIMENSION.search(text)
                if dim is not None:
                    ref = re.search(rb'ref="([^"]{0,40})"', dim.group(0))
                    found.dimension = ref.group(1).decode("ascii", "replace") if ref else ""
                    found.bad_dimension = _BAD_DIMENSION.search(dim.group(0)) is not None
            refs = _QUICK_REF.findall(text)
            if len(refs) != text.count(b"<c ") + text.count(b"<c>") + text.count(b"<c/") or b":c " in text:
                refs = _REF.findall(text)
                found.unreferenced |= len(refs) != len(_CELL.findall(text))
            if refs:
                letters, numbers = zip(*refs, strict=True)
                cols.update(letters)
                numbers = list(map(int, numbers))
                rows += (min(numbers), max(numbers))
            numbers = [int(r) for r in _ROW.findall(text)] if found.unreferenced else []
            if numbers:
                rows += (min(numbers), max(numbers))
    if rows:
        found.min_row, found.max_row = min(rows), max(rows)
    if cols:
        indexes = [column_number(c.decode("ascii")) for c in cols]
        found.min_col, found.max_col = min(indexes), max(indexes)
    return found


def _cells(part: bytes) -> Iterator[tuple[object, int, list[tuple[object, int]]]]:
    """Each row element of a worksheet part with its sheet row number (1-based) and its cells with
    their 0-based columns, as a spreadsheet program places them (a missing ``r`` follows the one
    before). Each row is cleared once the caller is done with it."""
    row_number = 0
    for _, row in etree.iterparse(io.BytesIO(part), events=("end",), tag="{*}row", resolve_entities=False,
                                  huge_tree=True):  # fmt: skip
        r = row.get("r")
        row_number = int(r) if r and r.isdigit() else row_number + 1
        col = -1
        cells = []
        for c in row:
            if not isinstance(c.tag, str) or not (c.tag.endswith("}c") or c.tag == "c"):
                continue
            ref = _CELL_REF.match(c.get("r", ""))
            col = column_number(ref.group(1)) if ref else col + 1
            cells.append((c, col))
        yield row, row_number, cells
        row.clear()
        while row.getprevious() is not None:
            del row.getparent()[0]


def rewrite(
    part: bytes, compact: bool, strings: int | None = None
) -> tuple[bytes, Layout | None, list[tuple[int, int, str]]]:
    """The worksheet part as a bare ``<worksheet><sheetData>`` of its rows (no dimension record):
    ``compact``: only the used rows and columns, side by side (and their :class:`Layout`);
    ``strings``: the number of shared strings, a cell naming one past them left empty (and listed as
    ``(0-based column, row number, index)``, in the part's own places)."""
    ns = _xml_namespace(part)
    layout = None
    if compact:
        used_rows, used_cols = set(), set()
        for _, number, cells in _cells(part):
            if cells:
                used_rows.add(number)
                used_cols.update(col for _, col in cells)
        layout = Layout(tuple(sorted(used_rows)), tuple(sorted(used_cols)))
    row_of = {n: i + 1 for i, n in enumerate(layout.rows)} if layout else None
    col_of = {c: i for i, c in enumerate(layout.columns)} if layout else None
    out = [f'<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="{ns}"><sheetData>'.encode()]
    bad: list[tuple[str, str]] = []
    for _, number, cells in _cells(part):
        if row_of is not None and number not in row_of:
            continue
        new_row = row_of[number] if row_of is not None else number
        kept = etree.Element(f"{{{ns}}}row", r=str(new_row))
        for c, col in cells:
            if strings is not None and c.get("t") == "s":
                v = c.find("{*}v")
                index = (v.text or "").strip() if v is not None else ""
                if not index.isdigit() or int(index) >= strings:
                    bad.append((col, number, index or "(none)"))
                    c.attrib.pop("t", None)
                    if v is not None:
                        c.remove(v)
            new_col = col_of[col] if col_of is not None else col
            c.set("r", f"{column_letter(new_col)}{new_row}")
            kept.append(c)
        out.append(etree.tostring(kept))
    out.append(b"</sheetData></worksheet>")
    return b"".join(out), layout, bad


def _xml_namespace(part: bytes) -> str:
    """The namespace of a worksheet part's root (transitional or strict SpreadsheetML)."""
    for _, element in etree.iterparse(io.BytesIO(part), events=("start",), resolve_entities=False, huge_tree=True):
        tag = element.tag
        return tag[1:].split("}", 1)[0] if isinstance(tag, str) and tag.startswith("{") else ""
    return ""
