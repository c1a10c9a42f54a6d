"""Bytes in, normalised text with a page map out: PDF (pypdf, and OCR for pages without a text layer:
ingest/pdf.py), DOCX (mammoth, ingest/docx.py), EPUB (its spine, ingest/epub.py), HTML (BeautifulSoup
+ markdownify), plain text (.txt/.md in UTF-8/16/32, Windows-1252 or a common CJK encoding),
spreadsheets (XLSX/XLSM and ODS: a page per sheet, ingest/sheets.py; CSV/TSV: ingest/delimited.py)
and slide decks (PPTX: a page per slide, ingest/slides.py). The formats, their sniffs and readers: one
row each in ingest/formats.py FORMATS.

The type comes from the leading bytes, never from the file name: the first row whose sniff takes
them. ZIP containers (DOCX, EPUB, XLSX, ODS, PPTX) are checked for ZIP and XML-entity bombs first
(``ingest/containers.py``); text is CSV when its first lines are records of one delimiter
(ingest/delimited.py). Every format then goes through the same text rules (``ingest/normalize.py``).

Bad input never raises anything but a DocumentError (HTTP 4xx): the readers' own errors are
mapped where they are known, and any other exception of a reader becomes UnreadableDocument naming
the format and the exception (MemoryError and RecursionError are left to the worker, which names
them, ingest/worker.py). An input that yields no page with text is EmptyDocument.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from ingest import formats as table
from ingest.encoding import NEEDS_BOM
from ingest.errors import DocumentError, EmptyDocument, NoTextLayer, UnreadableDocument, UnreadablePdf, UnsupportedType
from ingest.formats import Format, Probe
from ingest.normalize import PAGE_SEPARATOR, TEXT_RULES, normalize_pages
from ingest.pdf import OcrJob

__all__ = ["PAGE_SEPARATOR", "ExtractedText", "extract", "sniff"]


# Leading bytes of formats people upload by mistake, for a message that names what was sent.
_BINARY_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"\x7fELF", "an executable"),
    (b"II*\x00", "a TIFF image"),
    (b"MM\x00*", "a TIFF image"),
    (b"\xd0\xcf\x11\xe0", "an old Microsoft Office file (.doc/.xls: save it as DOCX or PDF)"),
    (b"\x1f\x8b", "a gzip archive"),
)


@dataclass(frozen=True, slots=True)
class ExtractedText:
    """Normalised document text.

    ``page_starts[i]`` is the character offset where page ``first_page + i`` begins: a PDF page, an
    EPUB chapter; a text, HTML or DOCX file is one page. A part of an upload (``cut``, ingest/cut.py)
    keeps its pages' real numbers: ``first_page`` is the number of its first page.
    """

    text: str
    page_starts: list[int] = field(default_factory=lambda: [0])
    kind: str = "text"  # a kind of ingest/formats.py FORMATS
    encoding: str | None = None  # text and HTML: the codec the bytes were decoded with
    rules: int = TEXT_RULES  # the text rules version that made `text` (ingest/normalize.py)
    warnings: list[dict] = field(default_factory=list)  # [{"page": n, "message": ...}]: pages read badly
    first_page: int = 1  # the number of the page that starts at page_starts[0]
    cut: str | None = None  # the part of the upload this is ("pages=5-9", "chars=0-50000"); None: all of it
    # Characters past the end of ``text`` that were not kept: more than any budget holds (ingest/cut.py
    # keep_leading), so such a text is only ever refused; 0 for a whole text.
    omitted_chars: int = 0
    ocr_pages: list[int] = field(default_factory=list)  # numbers of the pages read by OCR (ingest/pdf.py)
    # A PDF's printed page labels, one per page of the whole upload (page n's is page_labels[n - 1]),
    # where any differs from its number ("i", "ii", "1", ...: ingest/pdf.py); None: the numbers are the labels.
    page_labels: list[str] | None = None

    @property
    def pages(self) -> int:
        return len(self.page_starts)

    def page_of(self, offset: int) -> int:
        """Page number (1-based, as in the upload) of the character at ``offset``."""
        return bisect.bisect_right(self.page_starts, offset) + self.first_page - 1


def sniff(data: bytes, formats: tuple[Format, ...] | None = None) -> str:
    """The kind of the first row of ``formats`` (ingest/formats.py FORMATS) whose sniff takes the leading
    bytes; EmptyDocument or UnsupportedType otherwise (UnreadableDocument for a broken ZIP)."""
    if not data:
        raise EmptyDocument(f"the file is empty (0 bytes); {table.accepted(formats)}")
    for magic, what in _BINARY_MAGIC:
        if data.startswith(magic):
            raise UnsupportedType(f"the file is {what}, not a document docqa reads; {table.accepted(formats)}")
    probe = Probe(data)
    for row in table.table(formats):
        if row.sniff(probe):
            return row.kind
    hint = f" ({NEEDS_BOM})" if probe.binary else ""
    raise UnsupportedType(f"the file is {probe.refusal()}, not a document docqa reads; {table.accepted(formats)}{hint}")


def extract(
    data: bytes,
    password: str | None = None,
    rules: int = TEXT_RULES,
    ocr: OcrJob | None = None,
    formats: tuple[Format, ...] | None = None,
) -> ExtractedText:
    """Extract and normalise the text of ``data`` with text rules version ``rules``, read by the row of
    ``formats`` (None: ingest/formats.py FORMATS) its bytes are; a PDF's pages without a text layer
    are read by OCR as ``ocr`` says (None: no OCR; ingest/pdf.py).

    Raises EmptyDocument, UnsupportedType, PasswordRequired, WrongPassword, UnreadablePdf,
    UnreadableDocument, NoTextLayer or OcrUnavailable (all DocumentError); never anything else for
    bad input but MemoryError and RecursionError (see the module docstring).
    """
    kind = sniff(data, formats)
    row = table.row(kind, formats)
    assert row is not None
    try:
        read = row.reader(data, password, ocr)
        text, page_starts = normalize_pages(read.pages, paged=kind == "pdf", rules=rules)
    except (DocumentError, MemoryError, RecursionError):
        raise
    except Exception as exc:  # a reader's error that is not mapped above: the file, not the server
        error = UnreadablePdf if kind == "pdf" else UnreadableDocument
        raise error(
            f"the {row.label} file could not be read ({type(exc).__name__}: {exc}); it may be broken or truncated: "
            "re-export or repair it and upload again"
        ) from exc
    warnings, labels = read.warnings, read.labels
    result = ExtractedText(
        text, page_starts or [0], kind, read.encoding, rules, warnings, ocr_pages=read.ocr_pages, page_labels=labels
    )
    if not result.text.strip():
        if kind == "pdf":
            raise NoTextLayer(_no_text(result.pages, ocr))
        why = f" ({warnings[0]['message']})" if warnings else ""
        raise EmptyDocument(f"the file contains no text{why}; upload a document with text in it")
    return result


def _no_text(pages: int, ocr: OcrJob | None) -> str:
    if ocr is None or ocr.settings.mode == "off":
        return (
            f"the PDF has {pages} page(s) but no extractable text (a scan without a text layer?), and OCR "
            "is off on this server (DOCQA_OCR=off); run OCR on it first, or upload the text"
        )
    return (
        f"the PDF has {pages} page(s) but no extractable text, and OCR found no words on them (blank "
        "pages, or pictures without text?); upload a PDF with text in it"
    )
