"""Bytes in, normalised text with a page map out: PDF (pypdf), DOCX (mammoth, ingest/docx.py), EPUB
(its spine, ingest/epub.py), HTML (BeautifulSoup + markdownify) and plain text (.txt/.md in
UTF-8/16/32, Windows-1252 or a common CJK encoding).

The type comes from the leading bytes, never from the file name. pypdf runs with ``strict=False`` so
that common breakage (a wrong startxref, a stray object pointer) is repaired the way viewers repair it,
and with its built-in decompression limits, so a flate bomb fails fast with ``LimitReachedError``.
DOCX and EPUB are checked for ZIP and XML-entity bombs first (``ingest/containers.py``). Every format
then goes through the same text rules (``ingest/normalize.py``).

Bad input never raises anything but a DocumentError (HTTP 4xx): the readers' own errors are
mapped where they are known, and any other exception of a reader becomes UnreadableDocument naming
the format and the exception (MemoryError and RecursionError are left to the worker, which names
them, ingest/worker.py). An input that yields no page with text is EmptyDocument.
"""

from __future__ import annotations

import bisect
import io
import logging
import re
import unicodedata
from dataclasses import dataclass, field

from ingest.containers import check_container, container_kind
from ingest.docx import docx_pages
from ingest.encoding import bom_encoding, check_not_binary, decode_text
from ingest.epub import epub_pages
from ingest.errors import (
    DocumentError,
    EmptyDocument,
    NoTextLayer,
    PasswordRequired,
    UnreadableDocument,
    UnreadablePdf,
    UnsupportedType,
    WrongPassword,
)
from ingest.markup import decode_html, html_to_text
from ingest.normalize import PAGE_SEPARATOR, TEXT_RULES, normalize_pages

__all__ = ["PAGE_SEPARATOR", "ExtractedText", "extract", "sniff"]

KINDS = ("pdf", "docx", "epub", "html", "text")
ACCEPTED = "upload a PDF, DOCX, EPUB, HTML, .txt or .md file"

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
_HTML_START = re.compile(r"^\s*(<\?xml[^>]*>\s*)?(<!--.*?-->\s*)*<(!doctype\s+html|html[\s>])", re.I | re.S)


@dataclass(frozen=True, slots=True)
class ExtractedText:
    """Normalised document text.

    ``page_starts[i]`` is the character offset where page ``first_page + i`` begins: a PDF page, an
    EPUB chapter; a text, HTML or DOCX file is one page. A part of an upload (``cut``, ingest/cut.py)
    keeps its pages' real numbers: ``first_page`` is the number of its first page.
    """

    text: str
    page_starts: list[int] = field(default_factory=lambda: [0])
    kind: str = "text"  # one of KINDS
    encoding: str | None = None  # text and HTML: the codec the bytes were decoded with
    rules: int = TEXT_RULES  # the text rules version that made `text` (ingest/normalize.py)
    warnings: list[dict] = field(default_factory=list)  # [{"page": n, "message": ...}]: pages read badly
    first_page: int = 1  # the number of the page that starts at page_starts[0]
    cut: str | None = None  # the part of the upload this is ("pages=5-9", "chars=0-50000"); None: all of it
    # Characters past the end of ``text`` that were not kept: more than any budget holds (ingest/cut.py
    # keep_leading), so such a text is only ever refused; 0 for a whole text.
    omitted_chars: int = 0

    @property
    def pages(self) -> int:
        return len(self.page_starts)

    def page_of(self, offset: int) -> int:
        """Page number (1-based, as in the upload) of the character at ``offset``."""
        return bisect.bisect_right(self.page_starts, offset) + self.first_page - 1


def sniff(data: bytes) -> str:
    """Return one of KINDS from the leading bytes; raise EmptyDocument or UnsupportedType otherwise
    (UnreadableDocument for a broken ZIP)."""
    if not data:
        raise EmptyDocument(f"the file is empty (0 bytes); {ACCEPTED}")
    head = data[:1024]
    if b"%PDF-" in head:
        return "pdf"
    if data.startswith(b"PK\x03\x04"):
        return container_kind(data)
    for magic, what in _BINARY_MAGIC:
        if data.startswith(magic):
            raise UnsupportedType(f"the file is {what}, not a document docqa reads; {ACCEPTED}")
    bom = bom_encoding(data)
    head_text = head.decode(bom or "latin-1", errors="ignore").lstrip("\ufeff")
    if _HTML_START.match(head_text):
        return "html"
    check_not_binary(data)
    return "text"


def extract(data: bytes, password: str | None = None, rules: int = TEXT_RULES) -> ExtractedText:
    """Extract and normalise the text of ``data`` with text rules version ``rules``.

    Raises EmptyDocument, UnsupportedType, PasswordRequired, WrongPassword, UnreadablePdf,
    UnreadableDocument or NoTextLayer (all DocumentError); never anything else for bad input but
    MemoryError and RecursionError (see the module docstring).
    """
    kind = sniff(data)
    try:
        raw_pages, encoding, warnings = _read(kind, data, password)
        text, page_starts = normalize_pages(raw_pages, paged=kind == "pdf", rules=rules)
    except (DocumentError, MemoryError, RecursionError):
        raise
    except Exception as exc:  # a reader's error that is not mapped above: the file, not the server
        raise _unreadable(kind, exc) from exc
    result = ExtractedText(text, page_starts or [0], kind, encoding, rules, warnings)
    if not result.text.strip():
        if kind == "pdf":
            raise NoTextLayer(
                f"the PDF has {result.pages} page(s) but no extractable text (a scan without a text "
                "layer?); run OCR on it first, or upload the text"
            )
        why = f" ({warnings[0]['message']})" if warnings else ""
        raise EmptyDocument(f"the file contains no text{why}; upload a document with text in it")
    return result


def _read(kind: str, data: bytes, password: str | None) -> tuple[list[str], str | None, list[dict]]:
    """``(raw pages, encoding, warnings)`` of a file of ``kind`` (one of KINDS)."""
    if kind == "pdf":
        pages, warnings = _pdf_pages(data, password)
        return pages, None, warnings
    if kind in ("docx", "epub"):
        check_container(data)
        pages, warnings = docx_pages(data) if kind == "docx" else epub_pages(data)
        return pages, None, warnings
    if kind == "html":
        markup, encoding = decode_html(data)
        return [html_to_text(markup)], encoding, []
    decoded = decode_text(data)
    return [decoded.text], decoded.encoding, []


def _unreadable(kind: str, exc: Exception) -> UnreadableDocument:
    what = {"pdf": "PDF", "docx": "DOCX", "epub": "EPUB", "html": "HTML file"}.get(kind, "file")
    error = UnreadablePdf if kind == "pdf" else UnreadableDocument
    return error(
        f"the {what} could not be read ({type(exc).__name__}: {exc}); it may be broken or truncated: "
        "re-export or repair it and upload again"
    )


def _pdf_pages(data: bytes, password: str | None) -> tuple[list[str], list[dict]]:
    """The raw text of each page (pypdf's extract_text), before normalisation, and a warning for each
    page that could not be read (kept empty) or reads as garbage. Only a PDF with no readable page
    at all is refused."""
    from pypdf import PasswordType, PdfReader

    # pypdf logs every repaired defect at WARNING; one upload of a broken file would flood the log.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted:
            # Permission-only PDFs (empty user password) open with "", as they do in viewers.
            if reader.decrypt(password or "") == PasswordType.NOT_DECRYPTED:
                if password:
                    raise WrongPassword("the password is wrong for this encrypted PDF; send the right `password`")
                raise PasswordRequired("this PDF is encrypted; send its password in the `password` form field")
        pages = list(reader.pages)
    except (WrongPassword, PasswordRequired):
        raise
    except Exception as exc:  # pypdf raises many types for broken files; all mean "unreadable"
        raise _unreadable_pdf(exc) from exc
    if not pages:
        raise NoTextLayer("the PDF has no pages; upload a PDF with text in it")
    raw_pages, warnings, failures = [], [], []
    for number, page in enumerate(pages, start=1):
        try:
            text = page.extract_text() or ""
        except (MemoryError, RecursionError):
            raise  # the whole file is a bomb or a loop: the worker answers for it
        except Exception as exc:  # one broken page (a bad font, a bad content stream) costs that page only
            text = ""
            failures.append(exc)
            warnings.append({"page": number, "message": f"page {number} could not be read ({type(exc).__name__}); "
                             "it is left empty"})  # fmt: skip
        else:
            if _garbled(text):
                warnings.append({"page": number, "message": f"page {number} reads as mostly unreadable characters "
                                 "(a font without a text mapping?); answers about it may be wrong"})  # fmt: skip
        raw_pages.append(text)
    if len(failures) == len(pages):
        raise _unreadable_pdf(failures[0])
    return raw_pages, warnings


def _unreadable_pdf(exc: Exception) -> UnreadablePdf:
    return UnreadablePdf(
        f"the PDF could not be read ({type(exc).__name__}: {exc}); it may be broken, truncated or "
        "over pypdf's decompression limits; re-export or repair it and upload again"
    )


def _garbled(text: str) -> bool:
    """Mostly U+FFFD or control characters: what a page whose font has no usable text mapping gives."""
    chars = [c for c in text if not c.isspace()]
    bad = sum(1 for c in chars if c == "\ufffd" or unicodedata.category(c) in ("Cc", "Co", "Cn"))
    return len(chars) >= 20 and bad > 0.5 * len(chars)
