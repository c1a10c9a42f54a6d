"""Tables in PDFs as pipe rows, and glyphs without a character dropped (ingest/pdf_tables.py,
ingest/pdf.py; issue 29 item 9), on the Google-Docs sample of ../shared/cases and on PDFs made here."""

from __future__ import annotations

import io
import unicodedata

import pytest
from pypdf import PdfReader

from ingest.extract import extract
from ingest.marks import page_text
from ingest.normalize import drop_unmapped, normalize_pages
from ingest.pdf_tables import is_table, may_have_table, rows_text
from tests.ingest.samples import page_pdf, pdf, ruled_table_pdf

GOOGLE_ROWS = [
    "|  | Indonesia | Germany | Austria | France | Vatican |",
    "| --- | --- | --- | --- | --- | --- |",
    "| Continent | Asia | Europe | Europe | Europe | Europe |",  # one cell spanning Germany to Vatican
    "| Capital | Jakarta | Berlin | Vienna | Paris | Vatican City |",
    "| Currency | Rupia | EUR (€) | EUR (€) | EUR (€) | - |",
    "| Population | 273.879.750[1] | 83,190,556[2] | 8,935,112[3] | 67,413,000 | 453 |",  # marks: ingest/marks.py
]


def _unmapped(text: str) -> list[str]:
    return [c for c in text if c == "\ufffd" or unicodedata.category(c) == "Co"]


def test_the_google_docs_table_comes_out_as_rows_without_boxes(cases, manifest):
    """Before: one cell per line, and the flag icons as private-use code points (U+F03D9, ...)."""
    text = extract((cases / manifest["PDF-18"]["path"]).read_bytes()).text
    assert "\n".join(GOOGLE_ROWS) in text
    assert _unmapped(text) == []
    assert "Namespaces are one honking great idea -- let's do more of those!\n\n| " in text  # the text before it
    assert text.index(GOOGLE_ROWS[-1]) < text.index("2021 estimate")  # the footnotes after it
    assert "\nJakarta\n" not in text and text.count("Jakarta") == 1


def test_france_has_its_continent_and_currency(cases, manifest):
    """Issue 51: "Europe" and "EUR (€)" span Germany to France, and went under Germany alone, so "What
    is France's currency?" had nothing to stand on: a merged cell's text is in every column it covers."""
    text = extract((cases / manifest["PDF-18"]["path"]).read_bytes()).text
    rows = {line.split(" | ")[0].strip("| "): line.strip("|").split(" | ") for line in text.splitlines() if "|" in line}
    france = rows[""].index("France")
    assert rows["Continent"][france].strip() == "Europe" and rows["Currency"][france].strip() == "EUR (€)"


def test_a_cell_spanning_rows_is_in_each_row():
    """A cell merged down two rows (no rule between them in its column) is in both rows."""
    x0, top, w, h = 72, 680, 120, 20
    cells = [["Team", "Name", "Floor"], ["Tools", "Ada", "3"], [None, "Grace", "5"], ["Ops", "Linus", "2"]]
    ops = [b"0.5 w"]
    for k in range(5):  # horizontal rules; the one under row 2 leaves out the first column (the merge)
        start = x0 + w if k == 2 else x0
        ops.append(b"%d %d m %d %d l S" % (start, top - h * k, x0 + 3 * w, top - h * k))
    ops += [b"%d %d m %d %d l S" % (x0 + w * k, top, x0 + w * k, top - 4 * h) for k in range(4)]
    for r, row in enumerate(cells):
        for c, cell in enumerate(row):
            if cell is not None:
                dy = h / 2 if (r, c) == (1, 0) else 0  # drawn in the middle of the merged cell
                at = (x0 + w * c + 4, top - h * (r + 1) + 6 - dy)
                ops.append(b"BT /F1 10 Tf %d %d Td (%s) Tj ET" % (*at, cell.encode("latin-1")))
    text = extract(page_pdf(b"\n".join(ops))).text
    assert "| Tools | Ada | 3 |" in text and "| Tools | Grace | 5 |" in text, text


def test_a_ruled_table_made_here_comes_out_as_rows():
    rows = [
        ["Name", "Role", "Floor"],
        ["Ada", "Engineer", "3"],
        ["Grace", "Admiral", "5"],
        ["Linus", "Maintainer", "2"],
    ]
    text = extract(ruled_table_pdf(rows, "Staff list for the new building.", "Ask reception for a badge.")).text
    assert text == "Staff list for the new building.\n\n" + rows_text(rows) + "\n\nAsk reception for a badge."


@pytest.mark.parametrize(
    "path",
    [
        "pdf/pypdf-resources/crazyones.pdf",
        "pdf/sample-files/026-latex-multicolumn/multicolumn.pdf",
        "pdf/pypdf-resources/Sample_Td-matrix.pdf",  # a 2 x 2 grid of boxes with text in each: no table
        "pdf/pypdf-resources/libreoffice-form.pdf",  # check boxes: no table
        # plots and diagrams: no table; 117 pages read twice (15 s on 2 cores), in make test-slow
        pytest.param("pdf/sample-files/009-pdflatex-geotopo/GeoTopo-komprimiert.pdf", marks=pytest.mark.slow),
    ],
)
def test_pdfs_without_tables_keep_pypdfs_text(cases, path):
    """pypdf's text, its superscripts written apart (ingest/marks.py: multicolumn.pdf's km^2)."""
    data = (cases / path).read_bytes()
    raw = [drop_unmapped(page_text(p).text) for p in PdfReader(io.BytesIO(data), strict=False).pages]
    assert extract(data).text == normalize_pages(raw, paged=True)[0]


def test_a_text_page_skips_the_table_finder():
    page = PdfReader(io.BytesIO(pdf(["Just a line of text."]))).pages[0]
    assert not may_have_table(page)
    table = ruled_table_pdf([["a", "b"], ["c", "d"], ["e", "f"]], "x", "y")
    assert may_have_table(PdfReader(io.BytesIO(table)).pages[0])


@pytest.mark.parametrize(
    ("rows", "kept"),
    [
        ([["a", "b"], ["c", "d"], ["e", "f"]], True),
        ([["Hello PDF!", "Hello PDF 200 0 Td!"], ["Hello PDF 2 1!", "Hello PDF 10 7!"]], False),  # 2 rows
        ([["", "Agree"], ["", "Other"], ["", "None"]], False),  # check boxes: 1 filled cell a row
        ([["", "x", ""], ["", "", ""], ["y", "", ""]], False),  # a plot's grid: mostly empty
        ([["*", "*"], ["*", "*"], ["*", "*"]], False),  # a figure of stars
        ([["4 2", "x"], ["(cid:0) 2", "y"], ["1", "2"]], False),  # a formula's glyphs without mapping
    ],
)
def test_what_counts_as_a_table(rows, kept):
    assert is_table(rows) is kept


def test_pipes_in_cells_are_escaped():
    assert rows_text([["a|b", "c"], ["d", "e"]]) == "| a\\|b | c |\n| --- | --- |\n| d | e |"


def test_drop_unmapped_keeps_real_text():
    real = "Grüße, Ærøskøbing, naïve café; 你好世界, こんにちは, 한국어; مرحبا; emoji 😀🇩🇪👍🏽; € ™ ©"
    assert drop_unmapped(real) == real
    assert drop_unmapped("Indonesia \U000f03d9 flag \ue000 box \ufffd end \U00100001") == "Indonesia  flag  box  end "


def test_cjk_and_scripts_pdf_is_unchanged(cases, manifest):
    text = extract((cases / manifest["PDF-09"]["path"]).read_bytes()).text
    for snippet in manifest["PDF-09"]["value"]:
        assert snippet in text
