"""Spreadsheet cell references: a column's letters and its 0-based index (``A`` is 0, ``XFD`` is 16383),
shared by the sheet reader (ingest/sheets.py), its repairs (ingest/xlsx_repair.py) and the citation
locator (ingest/locate.py)."""

from __future__ import annotations


def column_letter(index: int) -> str:
    """The spreadsheet name of the 0-based column ``index``: 0 -> A, 25 -> Z, 26 -> AA."""
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(65 + rest) + letters
    return letters


def column_number(letters: str) -> int:
    """The 0-based index of a column's letters, either case (A -> 0, AA -> 26, XFD -> 16383): the
    inverse of :func:`column_letter`."""
    n = 0
    for ch in letters.upper():
        n = n * 26 + ord(ch) - 64
    return n - 1
