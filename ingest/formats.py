"""The formats docqa reads, in one place: the kinds the extractor tells apart by their bytes
(ingest/extract.py ``sniff``), the sentence every refusal ends with, and the file names a watched
folder considers (server/api/watch.py; only there does a name count, never for an upload).

A kind is what ``ExtractedText.kind`` and a document's ``kind`` say:

| kind | what | read by |
|---|---|---|
| ``pdf`` | PDF | ingest/pdf.py |
| ``docx`` | Word (OOXML) | ingest/docx.py |
| ``epub`` | EPUB 2/3 | ingest/epub.py |
| ``html`` | HTML, XHTML | ingest/markup.py |
| ``text`` | .txt, .md | ingest/encoding.py |
| ``xlsx`` | Excel workbooks: .xlsx, .xlsm | ingest/sheets.py (python-calamine) |
| ``ods`` | OpenDocument spreadsheets | ingest/sheets.py (python-calamine) |
| ``csv`` | comma-, semicolon- or tab-separated text | ingest/delimited.py |
| ``pptx`` | PowerPoint decks | ingest/slides.py (python-pptx) |
"""

from __future__ import annotations

KINDS = ("pdf", "docx", "epub", "html", "text", "xlsx", "ods", "csv", "pptx")
#: The kinds whose text is a table per sheet (ingest/sheets.py), and a page per slide: their
#: citations name a cell or a slide (ingest/locate.py).
SHEET_KINDS = ("xlsx", "ods", "csv")
SLIDE_KINDS = ("pptx",)
ACCEPTED = "upload a PDF, DOCX, EPUB, HTML, .txt, .md, XLSX, ODS, CSV/TSV or PPTX file"
#: File name endings a watched folder reads (lower case); anything else there is not a document.
SUFFIXES = (
    ".pdf", ".docx", ".epub", ".html", ".htm", ".xhtml", ".txt", ".md", ".markdown",
    ".xlsx", ".xlsm", ".ods", ".csv", ".tsv", ".pptx",
)  # fmt: skip
