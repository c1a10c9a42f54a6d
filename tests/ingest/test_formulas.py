"""Formula cells without a saved value, computed (ingest/formulas.py, issue 51): workbooks written by
openpyxl, as scripts write them, read through the extractor (ingest/sheets.py), and what is never
computed named in the document's warnings."""

from __future__ import annotations

import datetime as dt

from ingest.extract import extract
from ingest.formulas import FUNCTIONS, MAX_NAMED, has_unsaved, relative
from tests.ingest.office_samples import ods, xlsx

BUDGET = [
    ["Item", "Q1", "Q2", "Q3", "Q4", "Annual total"],
    ["Cloud hosting", 1200, 1350, 1425, 1580],
    ["Laptops", 4000, 0, 2500, 0],
    ["Training", 300, 450, 300, 450],
]


def _messages(result) -> list[str]:
    return [w["message"] for w in result.warnings]


def test_sum_totals_a_script_wrote_are_in_the_text():
    formulas = {("Budget 2025", f"F{r}"): f"=SUM(B{r}:E{r})" for r in (2, 3, 4)}
    formulas |= {("Budget 2025", "A6"): "Total", ("Budget 2025", "F6"): "=SUM(F2:F4)"}
    formulas |= {("Budget 2025", "G2"): "=ROUND(AVERAGE(B2:E2),1)"}
    formulas |= {("Budget 2025", "H2"): '=IF(F2>5000,"over","under")'}
    data = xlsx({"Budget 2025": BUDGET}, formulas)
    assert has_unsaved(data)
    result = extract(data)
    assert "| 2 | Cloud hosting | 1200 | 1350 | 1425 | 1580 | 5555 | 1388.8 | over |" in result.text, result.text
    assert "| 3 | Laptops | 4000 | 0 | 2500 | 0 | 6500 |" in result.text
    assert "| 6 | Total |  |  |  |  | 13555 |" in result.text
    assert "SUM" not in result.text and "=" not in result.text.replace("| --- |", "")
    assert _messages(result) == [
        "6 formula cells had no saved value; docqa computed them, so the spreadsheet program never showed these values"
    ]


def test_references_across_sheets_and_copies_down_a_column():
    rows = [["n", "rate"], *[[n, None] for n in range(1, 41)]]
    rows[0].append(1.5)  # C1: the rate every row multiplies by
    formulas = {("Data", f"B{r}"): f"=A{r}*$C$1" for r in range(2, 42)}  # one formula copied down
    formulas |= {("Data", f"D{r}"): f"=D{r - 1}+B{r}" if r > 2 else "=B2" for r in range(2, 42)}  # a running total
    formulas |= {("Sum up", "A1"): "='Data'!D41", ("Sum up", "B1"): "=COUNT(Data!A2:A41)"}
    formulas |= {("Sum up", "C1"): "=MAX(Data!B:B)"}
    result = extract(xlsx({"Data": rows, "Sum up": [[None]]}, formulas))
    assert "| 41 | 40 | 60 |  | 1230 |" in result.text, result.text
    assert "| 1 | 1230 (A) | 40 (B) | 60 (C) |" in result.text
    assert _messages(result)[0].startswith("83 formula cells had no saved value")


def test_what_is_never_computed_is_named_in_a_warning():
    formulas = {
        ("Budget", "H9"): "=NOW()",  # volatile
        ("Budget", "H10"): "=[1]Rates!A1*2",  # a link to another workbook
        ("Budget", "H11"): "=MYMACRO(A1)",  # a macro or add-in function
        ("Budget", "H12"): "=H12+1",  # circular
        ("Budget", "H13"): "=1/0",  # an error value
        ("Budget", "H14"): "=A1+1",  # a date
        ("Budget", "H15"): "=H9+1",  # refers to one that could not be computed
        ("Budget", "H16"): "=Rate*2",  # a defined name
        ("Budget", "H17"): "=2+3",
    }
    result = extract(xlsx({"Budget": [[dt.date(2025, 1, 1)]]}, formulas))
    messages = _messages(result)
    assert messages[0].startswith("1 formula cell had no saved value"), messages
    failed = messages[1]
    cells = ", ".join(f"Budget!H{r}" for r in range(9, 17))
    assert failed.startswith(f"8 formula cells have no saved value and could not be computed: {cells} ("), failed
    for why in ("NOW is volatile", "a link to another workbook", "MYMACRO is not computed", "a circular reference"):
        assert why in failed
    rows = {line.split(" | ")[0]: line for line in result.text.splitlines()}
    assert rows["| 17"].endswith("| 5 |") and "| 9" not in rows, "computed, and left empty (no value: no row)"
    assert "NOW" not in result.text and "MYMACRO" not in result.text


def test_a_warning_names_ten_cells_then_counts():
    formulas = {("S", f"A{r}"): "=TODAY()" for r in range(1, 16)}
    (message,) = _messages(extract(xlsx({"S": [[]]}, formulas)))
    assert message.startswith("15 formula cells have no saved value and could not be computed: S!A1, S!A2")
    assert f"S!A{MAX_NAMED}…" in message and f"S!A{MAX_NAMED + 1}" not in message


def test_saved_values_are_read_as_saved_and_other_workbooks_never_reach_openpyxl():
    assert not has_unsaved(xlsx({"P": [["a", 1]]}))
    assert not has_unsaved(ods({"P": [["a", 1]]})) and not has_unsaved(b"not a zip")
    assert {"NOW", "TODAY", "RAND", "OFFSET", "INDIRECT", "CELL", "INFO"}.isdisjoint(FUNCTIONS)


def test_a_formula_copied_to_another_cell_reads_the_same():
    key, flags = relative("=A2*$C$1+SUM(B$1:B2)", 1, 3)
    assert relative("=A7*$C$1+SUM(B$1:B7)", 6, 3)[0] == key
    assert relative("=A7*$C$2+SUM(B$1:B7)", 6, 3)[0] != key
    assert flags == {"A2": (False, False), "C1": (True, True), "B1:B2": (False, True, False, False)}
    assert relative('=A1&"B2"', 0, 0)[0] == '=c0r0&"B2"', "a string is not a reference"
    assert relative("=A1+$A$1", 0, 1) == (None, {}), "written two ways: compiled per cell"


def test_computed_in_the_extraction_worker_under_its_memory_limit():
    """The formulas package and its imports (numpy, scipy) fit the worker's default 1 GiB address space."""
    from ingest.worker import ExtractionWorker

    data = xlsx({"Budget 2025": BUDGET}, {("Budget 2025", "F2"): "=SUM(B2:E2)"})
    worker = ExtractionWorker(timeout_s=60, memory_bytes=1024**3, workers=1, queue=0)
    try:
        result = worker.extract(data)
    finally:
        worker.close()
    assert "| 2 | Cloud hosting | 1200 | 1350 | 1425 | 1580 | 5555 |" in result.text


def test_column_letters_and_indices_agree():
    from ingest.formulas import column_index, column_letter

    assert [column_index(column_letter(i)) for i in (0, 25, 26, 701, 702, 16383)] == [0, 25, 26, 701, 702, 16383]
