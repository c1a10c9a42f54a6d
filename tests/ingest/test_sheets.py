"""Spreadsheets (ingest/sheets.py): XLSX and ODS made in the test, read a page per sheet with the sheet's
name, header row and cell references; values only; the limits; damaged workbooks."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from ingest.errors import DocumentError, UnreadableDocument
from ingest.extract import extract, sniff
from ingest.locate import Locator
from ingest.sheets import MAX_ROWS, cell_text, column_letter
from ingest.worker import ExtractionWorker
from tests.ingest.office_samples import big_xlsx, ods, raw_xlsx, with_member, xlsx

PEOPLE = [["Name", "Amount", "Joined"], ["Alice", 30, dt.date(2024, 1, 2)], ["Bob", 2.5, None]]


def _where(extracted, needle: str) -> str | None:
    at = extracted.text.index(needle)
    return Locator(extracted.text, extracted.kind, extracted.page_starts).where(at, at + len(needle))


def test_xlsx_is_a_table_per_sheet_with_its_name_header_and_cell_references():
    data = xlsx(
        {"People": PEOPLE, "Sheet2": [[], [], [None, "Code", "Value"], [], [], [], [None, "launch code 7741", 12]]}
    )
    assert sniff(data) == "xlsx"
    result = extract(data)
    assert result.kind == "xlsx" and result.pages == 2 and not result.warnings
    people, second = (
        result.text[a:b] for a, b in zip(result.page_starts, [*result.page_starts[1:], None], strict=True)
    )
    assert people.strip() == (
        "## Sheet: People\n\n| 1 | Name (A) | Amount (B) | Joined (C) |\n| --- | --- | --- | --- |\n"
        "| 2 | Alice | 30 | 2024-01-02 |\n| 3 | Bob | 2.5 |"
    )
    # Sheet2's values start at B3: its row numbers and column letters are the sheet's own.
    assert "| 3 | Code (B) | Value (C) |" in second and "| 7 | launch code 7741 | 12 |" in second
    assert _where(result, "launch code 7741") == "Sheet2!B7"
    assert _where(result, "Alice | 30") == "People!A2:B2"
    assert _where(result, "Amount") == "People!B1"
    assert result.page_of(result.text.index("launch code")) == 2


def test_xlsm_reads_like_xlsx_and_sheet_names_are_quoted_as_excel_writes_them():
    data = xlsx({"Q1 sales": [["Region", "Total"], ["North", 4]]})
    result = extract(data)
    assert _where(result, "North") == "'Q1 sales'!A2"


def test_formulas_without_a_saved_value_are_computed_and_the_rest_named():
    """A formula written by a script has no saved value: the sum is computed (issue 51: it read as
    empty, and a question about the total got the first quarter's figure); one docqa does not compute
    stays empty and is named in the warnings. A formula's text never reaches the document."""
    data = xlsx({"People": PEOPLE}, formulas={("People", "B4"): "=SUM(B2:B3)", ("People", "C4"): '=HYPERLINK("x")'})
    result = extract(data)
    assert "| 4 |  | 32.5 |" in result.text and _where(result, "32.5") == "People!B4"
    assert "SUM" not in result.text and "HYPERLINK" not in result.text
    messages = [w["message"] for w in result.warnings]
    assert any(m.startswith("1 formula cell had no saved value; docqa computed it") for m in messages), messages
    assert any("could not be computed: People!C4 (HYPERLINK is not computed)" in m for m in messages), messages


def test_cached_formula_values_are_read(tmp_path):
    import xlsxwriter

    path = tmp_path / "cached.xlsx"
    book = xlsxwriter.Workbook(path)
    sheet = book.add_worksheet("Calc")
    sheet.write_row(0, 0, ["a", "b"])
    sheet.write_formula(1, 0, "=2*3", None, 6)
    sheet.write_formula(1, 1, '="x"&"y"', None, "xy")
    book.close()
    result = extract(path.read_bytes())
    assert "| 2 | 6 | xy |" in result.text and "=" not in result.text.replace("| --- |", "")


def test_ods_reads_like_xlsx():
    data = ods({"Stock": [["Item", "Count", "Since"], ["pears", 12, dt.date(2023, 5, 1)], [None], ["plums", 7.5]]})
    assert sniff(data) == "ods"
    result = extract(data)
    assert result.kind == "ods"
    assert "## Sheet: Stock" in result.text and "| 2 | pears | 12 | 2023-05-01 |" in result.text
    assert "| 4 | plums | 7.5 |" in result.text  # the empty row 3 is left out, its number too
    assert _where(result, "plums") == "Stock!A4"


def test_cell_values_as_text():
    assert [column_letter(i) for i in (0, 25, 26, 701, 702)] == ["A", "Z", "AA", "ZZ", "AAA"]
    assert cell_text(3.0) == "3" and cell_text(0.1 + 0.2) == "0.3" and cell_text(True) == "TRUE"
    assert cell_text(dt.datetime(2024, 1, 2, 3, 4, 5)) == "2024-01-02 03:04:05"
    assert cell_text(dt.datetime(2024, 1, 2)) == "2024-01-02" and cell_text("a|b\nc") == "a\\|b c"


def test_a_million_row_sheet_is_read_to_the_row_limit_in_the_worker():
    """A million rows pass the ZIP checks (109 MB of XML: its prolog is checked, not parsed); calamine
    holds the sheet inside the worker's memory limit and the first MAX_ROWS rows are read, the rest
    named in a warning."""
    data = big_xlsx(1_000_000)
    worker = ExtractionWorker(timeout_s=60, memory_bytes=1024**3, workers=1, queue=0)
    try:
        t0 = time.monotonic()
        result = worker.extract(data)
        elapsed = time.monotonic() - t0
    finally:
        worker.close()
    assert f"| {MAX_ROWS} | n{MAX_ROWS} |" in result.text and f"n{MAX_ROWS + 1} " not in result.text
    assert result.warnings == [
        {
            "page": 1,
            "message": f"sheet 'Big': rows from {MAX_ROWS + 1} on are not read (at most {MAX_ROWS:,} rows a sheet)",
        }
    ]
    assert elapsed < 60, elapsed


def _cell(ref: str, string: int | None = None, number: float | None = None) -> str:
    return f'<c r="{ref}" t="s"><v>{string}</v></c>' if string is not None else f'<c r="{ref}"><v>{number}</v></c>'


def test_far_apart_cells_are_read_in_the_worker():
    """Issue 49: two cells far apart (A1 and XFD1048576: 17 billion places between them) made calamine
    allocate them all, and the worker died ("repair or re-export"). Only the used rows and columns are
    read, each named as in the sheet."""
    rows = f"<row r='1'>{_cell('A1', 0)}{_cell('B1', 1)}</row><row r='2'>{_cell('A2', 2)}{_cell('B2', number=5)}</row>"
    rows += f"<row r='1048576'>{_cell('XFD1048576', 3)}</row>"
    data = raw_xlsx(rows, dimension="A1:XFD1048576", strings=["Name", "Count", "boilers", "far away"])
    worker = ExtractionWorker(timeout_s=60, memory_bytes=1024**3, workers=1, queue=0)
    try:
        result = worker.extract(data)
    finally:
        worker.close()
    assert "| 1 | Name (A) | Count (B) | (XFD) |" in result.text
    assert "| 2 | boilers | 5 |" in result.text and "| 1048576 |  |  | far away |" in result.text
    assert _where(result, "far away") == "S!XFD1048576" and _where(result, "boilers") == "S!A2"
    assert any("far apart (A1 to XFD1048576)" in w["message"] for w in result.warnings), result.warnings


def test_a_row_0_dimension_and_a_missing_shared_string_cost_no_sheet():
    """Issue 49 (and a public calamine report): a ``<dimension ref="A0:B3">`` emptied its sheet, and so did
    one cell naming a shared string the workbook lacks; the record is ignored, the cell left empty."""
    rows = f"<row r='1'>{_cell('A1', 0)}{_cell('B1', 1)}</row><row r='2'>{_cell('A2', 2)}{_cell('B2', number=5)}</row>"
    rows += f"<row r='3'>{_cell('A3', 99)}{_cell('B3', number=7)}</row>"
    strings = ["Name", "Count", "boilers"]
    zero = extract(raw_xlsx(rows.replace("99", "2"), dimension="A0:B3", strings=strings))
    assert "| 2 | boilers | 5 |" in zero.text and "| 3 | boilers | 7 |" in zero.text
    assert "dimension record (A0:B3)" in zero.warnings[0]["message"]
    bad = extract(raw_xlsx(rows, dimension="A1:B3", strings=strings))
    assert "| 2 | boilers | 5 |" in bad.text and "| 3 |  | 7 |" in bad.text  # the bad cell only
    assert bad.warnings == [
        {
            "page": 1,
            "message": "sheet 'S': cell A3 names shared string 99, which the workbook does not have; it is left empty",
        }  # fmt: skip
    ]


def test_damaged_workbooks_are_document_errors():
    good = xlsx({"People": PEOPLE})
    with pytest.raises(UnreadableDocument, match="spreadsheet could not be opened"):
        extract(with_member(good, "xl/workbook.xml", b"<not-closed"))
    with pytest.raises(UnreadableDocument, match="declares XML entities"):
        extract(with_member(good, "xl/sharedStrings.xml",
                            '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e "e">]><sst>&e;</sst>'))  # fmt: skip
    with pytest.raises(DocumentError):
        extract(good[: len(good) // 2])
    for cut in (100, 1000, len(good) - 30):
        with pytest.raises(DocumentError):
            extract(good[:cut])
