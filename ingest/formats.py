"""The formats docqa reads, one row each (:data:`FORMATS`), and everything that names them derived
from it: extraction's dispatch (ingest/extract.py ``sniff`` and ``extract``), the sentence every
refusal ends with (:func:`accepted`), the file names a watched folder reads (:func:`suffixes`; only
there does a name count, never for an upload), the media type a stored upload is served with
(server/api/served.py), and the lists of the upload field, the MCP tool and the page (GET /v1/formats).

A row's ``sniff`` looks at the leading bytes (a :class:`Probe`), never at the file name; the rows are
tried in table order, so a particular format comes before a general one (CSV before text). Its
``reader`` turns the bytes into raw pages (:class:`Read`), which ingest/extract.py normalises.
Both are module-level functions: the table is sent to the extraction worker with each file.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, partial

from ingest.containers import ODS_MIMETYPE, check_container, mimetype, ods_content, zip_names
from ingest.delimited import SNIFF_CHARS, delimited_pages, delimiter
from ingest.docx import docx_pages
from ingest.encoding import binary, bom_encoding, decode_text
from ingest.epub import epub_pages
from ingest.markup import decode_html, html_to_text
from ingest.pdf import OcrJob, pdf_pages
from ingest.sheets import sheet_pages
from ingest.slides import slide_pages

#: The kinds whose text is a table per sheet (ingest/sheets.py), and a page per slide: their
#: citations name a cell or a slide (ingest/locate.py).
SHEET_KINDS = ("xlsx", "ods", "csv")
SLIDE_KINDS = ("pptx",)
_HTML_START = re.compile(r"^\s*(<\?xml[^>]*>\s*)?(<!--.*?-->\s*)*<(!doctype\s+html|html[\s>])", re.I | re.S)


@dataclass(frozen=True, slots=True)
class Read:
    """A reader's raw pages (one string per page, sheet, slide or chapter), before normalisation."""

    pages: list[str]
    encoding: str | None = None  # text, HTML and CSV: the codec the bytes were decoded with
    warnings: list[dict] = field(default_factory=list)  # [{"page": n, "message": ...}]
    ocr_pages: list[int] = field(default_factory=list)  # PDF: the pages read by OCR
    labels: list[str] | None = None  # PDF: the printed page labels where any differs from its number


class Probe:
    """The bytes of an upload as the sniffs look at them, each view computed once."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.head = data[:1024]

    @cached_property
    def zip(self) -> frozenset[str]:
        """A ZIP's member names (UnreadableDocument for a broken one); empty for anything else."""
        return zip_names(self.data) if self.data.startswith(b"PK\x03\x04") else frozenset()

    @cached_property
    def mimetype(self) -> str:
        """The ``mimetype`` member of an OpenDocument or EPUB ZIP; "" without one."""
        return mimetype(self.data) if "mimetype" in self.zip else ""

    @cached_property
    def binary(self) -> str | None:
        """What the bytes are when mostly NUL or control bytes (ingest/encoding.py), else None."""
        return binary(self.data) if not self.zip else None

    def refusal(self) -> str:
        """What the file is, when no row took it ("a ZIP archive", "binary data (...)")."""
        if self.zip:
            what = "a ZIP archive"
            if self.mimetype.startswith("application/vnd.oasis.opendocument") or "content.xml" in self.zip:
                what = f"an OpenDocument file ({self.mimetype or 'not a spreadsheet'})"
            return what
        return self.binary or "not in a format docqa recognises"


Sniff = Callable[[Probe], bool]
Reader = Callable[[bytes, "str | None", "OcrJob | None"], Read]  # (bytes, PDF password, OCR) -> pages


@dataclass(frozen=True, slots=True)
class Format:
    """One format docqa reads (module docstring)."""

    kind: str  # ExtractedText.kind and a document's kind
    sniff: Sniff  # whether the leading bytes are this format (tried in FORMATS order)
    reader: Reader
    suffixes: tuple[str, ...]  # file name endings, lower case; the first is the one a served file gets
    media_type: str  # what GET /v1/documents/{id}/file serves it as
    label: str  # its name for people: "Word", "PDF"


# ---------------------------------------------------------------- sniffs


def is_pdf(p: Probe) -> bool:
    return b"%PDF-" in p.head


def has_part(name: str, p: Probe) -> bool:  # DOCX, XLSX (and XLSM: the same parts), PPTX
    return name in p.zip


def is_ods(p: Probe) -> bool:
    return p.mimetype == ODS_MIMETYPE or (not p.mimetype and "content.xml" in p.zip and ods_content(p.data))


def is_epub(p: Probe) -> bool:
    return "META-INF/container.xml" in p.zip and not p.mimetype.startswith("application/vnd.oasis.")


def is_html(p: Probe) -> bool:
    bom = bom_encoding(p.data)
    return not p.zip and bool(_HTML_START.match(p.head.decode(bom or "latin-1", errors="ignore").lstrip("\ufeff")))


def is_text(p: Probe) -> bool:
    return not p.zip and p.binary is None


def is_csv(p: Probe) -> bool:
    if not is_text(p):
        return False
    head = p.data[: 4 * SNIFF_CHARS]  # UTF-8, -16 or -32: at least SNIFF_CHARS characters
    sample = head.decode(bom_encoding(p.data) or "utf-8", errors="ignore").lstrip("\ufeff")
    return bool(delimiter(sample[:SNIFF_CHARS], len(head) == len(p.data) and len(sample) <= SNIFF_CHARS))


# ---------------------------------------------------------------- readers


def read_pdf(data: bytes, password: str | None, ocr: OcrJob | None) -> Read:
    read = pdf_pages(data, password, ocr)
    return Read(read.texts, None, read.warnings, read.ocr_pages, read.labels)


def read_container(pages: Callable[[bytes], tuple[list[str], list[dict]]], data: bytes, *_) -> Read:
    check_container(data)  # ZIP and XML-entity bombs (ingest/containers.py)
    texts, warnings = pages(data)
    return Read(texts, warnings=warnings)


def read_html(data: bytes, password: str | None, ocr: OcrJob | None) -> Read:
    markup, encoding = decode_html(data)
    return Read([html_to_text(markup)], encoding)


def read_csv(data: bytes, password: str | None, ocr: OcrJob | None) -> Read:
    pages, encoding, warnings = delimited_pages(data)
    return Read(pages, encoding, warnings)


def read_text(data: bytes, password: str | None, ocr: OcrJob | None) -> Read:
    decoded = decode_text(data)
    return Read([decoded.text], decoded.encoding)


_OOXML = "application/vnd.openxmlformats-officedocument."
FORMATS: tuple[Format, ...] = (
    Format("pdf", is_pdf, read_pdf, (".pdf",), "application/pdf", "PDF"),
    Format("docx", partial(has_part, "word/document.xml"), partial(read_container, docx_pages), (".docx",),
           _OOXML + "wordprocessingml.document", "Word"),
    Format("xlsx", partial(has_part, "xl/workbook.xml"), partial(read_container, sheet_pages), (".xlsx", ".xlsm"),
           _OOXML + "spreadsheetml.sheet", "Excel"),
    Format("pptx", partial(has_part, "ppt/presentation.xml"), partial(read_container, slide_pages), (".pptx",),
           _OOXML + "presentationml.presentation", "PowerPoint"),
    Format("ods", is_ods, partial(read_container, sheet_pages), (".ods",), ODS_MIMETYPE, "OpenDocument spreadsheet"),
    Format("epub", is_epub, partial(read_container, epub_pages), (".epub",), "application/epub+zip", "EPUB"),
    Format("html", is_html, read_html, (".html", ".htm", ".xhtml"), "text/html", "HTML"),
    Format("csv", is_csv, read_csv, (".csv", ".tsv"), "text/csv", "CSV/TSV"),
    Format("text", is_text, read_text, (".txt", ".md", ".markdown"), "text/plain", "text"),
)  # fmt: skip


# ---------------------------------------------------------------- derived, at call time (a test may extend FORMATS)


def table(formats: tuple[Format, ...] | None = None) -> tuple[Format, ...]:
    return FORMATS if formats is None else formats


def row(kind: str, formats: tuple[Format, ...] | None = None) -> Format | None:
    """The row of ``kind``, or None for a kind no row has."""
    return next((f for f in table(formats) if f.kind == kind), None)


def kinds(formats: tuple[Format, ...] | None = None) -> tuple[str, ...]:
    return tuple(f.kind for f in table(formats))


def suffixes(formats: tuple[Format, ...] | None = None) -> tuple[str, ...]:
    """Every file name ending of every row (lower case, with the dot)."""
    return tuple(s for f in table(formats) for s in f.suffixes)


def names(formats: tuple[Format, ...] | None = None) -> str:
    """The labels as a list for people: "PDF, Word, ... or text"."""
    labels = [f.label for f in table(formats)]
    return " or ".join(filter(None, [", ".join(labels[:-1]), labels[-1]]))


def accepted(formats: tuple[Format, ...] | None = None) -> str:
    """The end of every refusal: "upload a PDF, Word, ... or text file (.pdf .docx ...)"."""
    return f"upload a {names(formats)} file ({' '.join(suffixes(formats))})"
