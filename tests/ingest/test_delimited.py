"""CSV and TSV (ingest/delimited.py): told from prose by their bytes, encoding and delimiter sniffed,
read as one table whose citations name the cell."""

from __future__ import annotations

import pytest

from ingest.delimited import delimiter
from ingest.errors import UnreadableDocument
from ingest.extract import extract, sniff
from ingest.locate import Locator


def _where(extracted, needle: str) -> str | None:
    at = extracted.text.index(needle)
    return Locator(extracted.text, extracted.kind, extracted.page_starts).where(at, at + len(needle))


@pytest.mark.parametrize(
    ("data", "encoding"),
    [
        ('name,city,amount\nAlice,"Paris, France",30\nBob,Köln,"2,5"\n'.encode(), "utf-8"),
        # Windows-1252, as Excel saves "CSV" in Western Europe (enough accents to tell it by)
        (
            "name;city;amount\nAlice;Paris;30\nBob;Köln;2,5\nRené;Zürich;4\nAndré;Besançon;5\nSøren;Malmö;6\n".encode(
                "cp1252"
            ),
            "cp1252",
        ),
        ("name\tcity\tamount\nAlice\tParis\t30\nBob\tKöln\t2,5\n".encode("utf-16"), "utf-16"),
    ],
)
def test_delimiter_and_encoding_are_sniffed(data, encoding):
    assert sniff(data) == "csv"
    result = extract(data)
    assert result.kind == "csv" and result.encoding == encoding and result.pages == 1
    lines = result.text.split("\n")
    assert lines[0] == "| 1 | name (A) | city (B) | amount (C) |" and lines[1] == "| --- | --- | --- | --- |"
    assert lines[3].startswith("| 3 | Bob | Köln | 2,5 |")
    assert _where(result, "Köln") == "B3" and _where(result, "Alice") == "A2"


@pytest.mark.parametrize(
    "text",
    [
        "Hello, world.\nGoodbye, moon.\n",  # two lines, one comma each: too few records to tell
        "Dear Ann, thank you.\nWe met, talked, and left.\nSee you, soon.\n",  # the counts differ
        "# Notes\n\nFirst, second, third.\nFourth, fifth, sixth.\nSeventh, eighth, ninth.\n",  # Markdown
        "It was the best of times, it was the worst of times, it was the age of wisdom.\n" * 4,  # sentences
    ],
)
def test_prose_with_commas_stays_text(text):
    assert sniff(text.encode()) == "text"


def test_quoted_newlines_stay_in_their_cell_and_a_ragged_tail_is_kept():
    data = b'id,note\n1,"two\nlines"\n' + b"".join(b"%d,plain\n" % i for i in range(2, 10)) + b"10,y,extra\n"
    assert delimiter(data.decode()[:30], complete=False) == ","  # a cut sample: whole lines only
    result = extract(data)
    assert "| 2 | 1 | two lines |" in result.text and "| 11 | 10 | y | extra |" in result.text  # records, not lines
    assert result.text.split("\n")[0] == "| 1 | id (A) | note (B) | (C) |"  # the header gains column C


def test_an_unclosed_quote_is_a_document_error_naming_the_line():
    data = b'a,b\n1,2\n3,4\n5,"' + b"x" * 200_000 + b"\n"
    with pytest.raises(UnreadableDocument, match=r"CSV file could not be read at line \d+"):
        extract(data)


def test_a_csv_whose_lines_end_in_a_lone_cr_is_a_table():
    """Issue 49: a CSV written with old Mac line ends (CR only) was read as one line of plain text."""
    data = b"name,amount,city\rAlice,30,Leeds\rBob,25,York\rCarol,3,Bath\r"
    assert sniff(data) == "csv"
    result = extract(data)
    assert result.kind == "csv" and "| 3 | Bob | 25 | York |" in result.text
    long = b"name,amount,city\r" + b"".join(
        b"P%d,%d,Town%d\r" % (i, i, i) for i in range(3000)
    )  # past the sniff window
    assert sniff(long) == "csv" and "| 3001 | P2999 | 2999 | Town2999 |" in extract(long).text
