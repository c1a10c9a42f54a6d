"""Cell and slide labels read back from the text (ingest/locate.py): ranges, several sheets, a part of an
upload, spans that name no cell."""

from __future__ import annotations

from ingest.cut import Cut, apply
from ingest.extract import extract
from ingest.locate import Locator, column_index, printed_label
from tests.ingest.office_samples import xlsx


def test_ranges_sheets_and_parts():
    data = xlsx({"A": [["k", "v"], ["one", 1], ["two", 2]], "B b": [["k", "v"], ["three", 3]]})
    full = extract(data)
    locate = Locator(full.text, full.kind, full.page_starts)
    one, three = full.text.index("one"), full.text.index("three")
    assert locate.where(one, three + 5) == "A!A2:B3, 'B b'!A1:B2"  # through the second sheet's header
    assert locate.where(one, one + 1) == "A!A2"
    heading = full.text.index("## Sheet: B b")
    assert locate.where(heading, heading + 8) == "'B b'"  # the sheet, no cell
    assert locate.where(one, one) is None
    # A part of the upload (chars=) keeps its lines, so its cells are named the same way.
    part = apply(full, Cut.parse(None, f"{full.page_starts[1]}-{len(full.text)}"))
    at = part.text.index("three")
    assert Locator(part.text, part.kind, part.page_starts, part.first_page).where(at, at + 5) == "'B b'!A2"
    assert [column_index(c) for c in ("A", "Z", "AA", "ZZ", "AAA")] == [0, 25, 26, 701, 702]


def test_other_kinds_name_nothing():
    text = "| 1 | a (A) |\n| --- | --- |\n| 2 | b |"
    assert Locator(text, "text", [0]).where(0, len(text)) is None
    assert Locator(text, "csv", [0]).where(text.index("b"), len(text)) == "A2"


def test_printed_label_names_a_page_only_where_the_pdf_prints_another():
    labels = ["i", "ii", "iii", "1", "2"]
    assert [printed_label(labels, n) for n in (1, 2, 4, 5, 6)] == ["i", "ii", "1", "2", None]
    assert printed_label(["1", "2"], 2) is None and printed_label(None, 2) is None
