"""CSV and TSV: text whose lines are records of one delimiter, read as one table (ingest/sheets.py's
layout, without a sheet heading), so a citation names its cell ("B7").

Told from plain text by the bytes alone (:func:`delimiter`), strictly, since prose has commas too:
the first :data:`SNIFF_CHARS` characters, cut to whole lines, must parse (Python's csv module: quoted
fields, doubled quotes, newlines inside quotes; lines end in LF, CRLF or a lone CR, as old Mac
programs write them) into at least :data:`MIN_RECORDS` records (two for
tabs, which prose does not use) that have the header's number of fields, at least two (all but one
in ten of them: a ragged row is kept as it is), of at most
:data:`MAX_MEAN_FIELD` characters on average; a Markdown heading or list line rules it out, and so
does a comma or semicolon followed by a space in most places (a sentence's, not a record's). Of tab,
comma and semicolon the one that gives the most fields wins. The encoding is ingest/encoding.py's, as
for any text file.
"""

from __future__ import annotations

import csv
import io

from ingest.encoding import decode_text
from ingest.errors import UnreadableDocument
from ingest.sheets import Budget, render_table

DELIMITERS = ("\t", ",", ";")
SNIFF_CHARS = 16 * 1024
MIN_RECORDS = 3  # comma and semicolon; tab: 2
MAX_MEAN_FIELD = 60  # characters: a field is a value, not a sentence
_PROSE_START = ("# ", "## ", "- ", "* ", "> ")


def delimiter(sample: str, complete: bool) -> str | None:
    """The delimiter of a CSV/TSV ``sample`` (the start of the file decoded; ``complete``: all of
    it), or None when it is not one (module docstring)."""
    if not complete:
        sample = sample[: max(sample.rfind("\n"), sample.rfind("\r")) + 1]  # whole lines (LF, CRLF or CR-only)
    lines = [line for line in sample.splitlines() if line.strip()]
    if len(lines) < 2 or any(line.lstrip().startswith(_PROSE_START) for line in lines):
        return None
    best, best_fields = None, 1
    for d in DELIMITERS:
        try:
            records = list(csv.reader(io.StringIO(sample, newline=""), delimiter=d, strict=True))
        except csv.Error:
            continue
        records = [r for r in records if any(f.strip() for f in r)]
        if len(records) < (2 if d == "\t" else MIN_RECORDS):
            continue
        n = len(records[0])
        if n <= best_fields or sum(len(r) != n for r in records) > len(records) // 10:
            continue
        if sum(len(f) for r in records for f in r) / (n * len(records)) > MAX_MEAN_FIELD:
            continue
        if d != "\t" and sum(f.startswith(" ") for r in records for f in r[1:]) > (n - 1) * len(records) / 2:
            continue
        best, best_fields = d, n
    return best


def delimited_pages(data: bytes) -> tuple[list[str], str, list[dict]]:
    """``([the table], encoding, warnings)`` of a CSV/TSV file (ingest/extract.py has sniffed it)."""
    decoded = decode_text(data)
    text = decoded.text
    d = delimiter(text[:SNIFF_CHARS], len(text) <= SNIFF_CHARS) or ","
    budget = Budget()
    rows = csv.reader(io.StringIO(text, newline=""), delimiter=d)  # not strict: a stray quote is kept as text
    try:
        table = render_table(rows, 1, 0, budget, 1, "the file")
    except csv.Error as exc:  # a field over csv's limit (128 KiB): an unclosed quote, most likely
        raise UnreadableDocument(
            f"the {'TSV' if d == chr(9) else 'CSV'} file could not be read at line {rows.line_num} ({exc}); "
            "check its quotes, or save it again from the spreadsheet"
        ) from exc
    return [table], decoded.encoding, budget.warnings
