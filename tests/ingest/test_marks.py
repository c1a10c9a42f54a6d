"""Superscripts read apart from the number they follow (ingest/marks.py; issue 39 item 1): footnote
marks as ``[3]`` in tables and in running text, exponents as ``^2``; on the Google-Docs sample of
../shared/cases, whose table said ``8,935,1123`` for 8,935,112 with mark 3, and on PDFs made here."""

from __future__ import annotations

import re

from ingest.extract import extract
from ingest.marks import Chunk, is_mark, labels, marked
from ingest.pdf_tables import rows_text
from tests.ingest.samples import page_pdf

GOOGLE_POPULATION = "| Population | 273.879.750[1] | 83,190,556[2] | 8,935,112[3] | 67,413,000 | 453 |"


def _text(x: int, y: int, size: int, text: str) -> bytes:
    return b"BT /F1 %d Tf %d %d Td (%s) Tj ET " % (size, x, y, text.encode("latin-1"))


def test_the_google_docs_table_keeps_its_numbers_and_marks_apart(cases, manifest):
    text = extract((cases / manifest["PDF-18"]["path"]).read_bytes()).text
    assert GOOGLE_POPULATION in text
    assert "8,935,1123" not in text and "273.879.7501" not in text
    # The footnotes themselves, under the table, keep their labels as pypdf gives them.
    assert text.endswith("3\n2020 estimate\n2\n2020 estimate\n1\n2021 estimate")


def test_running_text_made_here_reads_its_marks_and_its_exponents_apart():
    """A word processor's marks (smaller, raised by a text-position move, as Word, Google Docs and
    LaTeX draw them) after a number and after a word, the footnotes' labels at the foot of the page,
    and an exponent that labels no footnote."""
    stream = b"\n".join(
        [
            _text(72, 720, 11, "Austria had 8,935,112") + _text(183, 724, 7, "3") + _text(187, 720, 11, " people."),
            _text(72, 700, 11, "The treaty") + _text(128, 704, 7, "12") + _text(136, 700, 11, " was signed."),
            _text(72, 680, 11, "The area is 12 km") + _text(164, 684, 7, "2") + _text(168, 680, 11, " in all."),
            _text(72, 100, 7, "3") + _text(76, 98, 9, "Census of 2020."),
            _text(72, 88, 7, "12") + _text(80, 86, 9, "Signed in Vienna."),
        ]
    )
    text = extract(page_pdf(stream)).text
    assert "Austria had 8,935,112[3] people." in text
    assert "The treaty[12] was signed." in text
    assert "The area is 12 km^2 in all." in text  # no footnote is labelled 2: a power
    assert "3 Census of 2020." in text and "12 Signed in Vienna." in text  # labels as labels, not glued
    assert not re.search(r"8,935,1123|treaty12|km2", text)


def test_a_ruled_table_made_here_keeps_its_marks_apart_in_the_cells():
    x0, top, w, h = 72, 680, 140, 20
    rows = [["Country", "Population"], ["Austria", "8,935,112"], ["France", "67,413,000"]]
    ops = [b"0.5 w"]
    ops += [b"%d %d m %d %d l S" % (x0, top - h * k, x0 + 2 * w, top - h * k) for k in range(4)]
    ops += [b"%d %d m %d %d l S" % (x0 + w * k, top, x0 + w * k, top - 3 * h) for k in range(3)]
    for r, row in enumerate(rows):
        for c, cell in enumerate(row):
            ops.append(_text(x0 + w * c + 4, top - h * (r + 1) + 6, 10, cell))
            if cell == "8,935,112":  # its mark, drawn next, right after it (10 pt Helvetica: 44.5 pt wide)
                ops.append(_text(x0 + w * c + 4 + 45, top - h * (r + 1) + 10, 6, "3"))
    ops.append(_text(72, 100, 6, "3") + _text(76, 98, 9, "2020 estimate"))
    text = extract(page_pdf(b"\n".join(ops))).text
    marked_rows = [rows[0], ["Austria", "8,935,112[3]"], rows[2]]
    assert rows_text(marked_rows) in text, text
    assert "8,935,1123" not in text


def test_the_rule_of_a_mark():
    # smaller and raised about a third of the size before it; digits or a symbol, at most 3
    assert is_mark("3", 7, 4, 11) and is_mark("†", 7, 4, 11) and is_mark("123", 7, 4, 11)
    assert not is_mark("1234", 7, 4, 11)  # too long for a mark
    assert not is_mark("3", 11, 4, 11)  # the same size: text
    assert not is_mark("3", 7, -2, 11)  # lowered: a subscript
    assert not is_mark("3", 7, -13, 11)  # the next line
    assert not is_mark("ab", 7, 4, 11)  # letters
    # A label is a mark first on its line, before larger text; a mark after text is not one.
    chunks = [Chunk("Austria 8", 72, 720, 11), Chunk("3", 120, 724, 7)]
    chunks += [Chunk("3", 72, 100, 7), Chunk("Note.", 76, 98, 9)]
    assert labels(chunks) == {"3"}
    assert "".join(c.text for c in marked(chunks, labels(chunks))) == "Austria 8[3]3 Note."
