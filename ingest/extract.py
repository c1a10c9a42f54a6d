"""Bytes in, normalised text with a page map out. PDF through pypdf, plain text (.txt/.md) as UTF-8/16.

The type comes from the leading bytes, never from the file name. pypdf runs with ``strict=False`` so
that common breakage (a wrong startxref, a stray object pointer) is repaired the way viewers repair it,
and with its built-in decompression limits, so a flate bomb fails fast with ``LimitReachedError``.
"""

from __future__ import annotations

import bisect
import codecs
import io
import logging
from dataclasses import dataclass, field

from ingest.errors import (
    EmptyDocument,
    NoTextLayer,
    PasswordRequired,
    UnreadablePdf,
    UnsupportedType,
    WrongPassword,
)
from ingest.normalize import normalize_text

PAGE_SEPARATOR = "\n\n"

# Leading bytes of formats people upload by mistake, for a message that names what was sent.
_BINARY_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"PK\x03\x04", "a ZIP archive (docx/xlsx/epub?)"),
    (b"\x7fELF", "an executable"),
    (b"II*\x00", "a TIFF image"),
    (b"MM\x00*", "a TIFF image"),
    (b"\xd0\xcf\x11\xe0", "an old Microsoft Office file"),
    (b"\x1f\x8b", "a gzip archive"),
)


@dataclass(frozen=True, slots=True)
class ExtractedText:
    """Normalised document text.

    ``page_starts[i]`` is the character offset where page ``i + 1`` begins; a text file is one page.
    """

    text: str
    page_starts: list[int] = field(default_factory=lambda: [0])
    kind: str = "text"  # "pdf" | "text"

    @property
    def pages(self) -> int:
        return len(self.page_starts)

    def page_of(self, offset: int) -> int:
        """1-based page number of the character at ``offset``."""
        return bisect.bisect_right(self.page_starts, offset)


def sniff(data: bytes) -> str:
    """Return ``"pdf"`` or ``"text"`` from the leading bytes; raise UnsupportedType otherwise."""
    if not data:
        raise EmptyDocument("the file is empty (0 bytes); upload a PDF, .txt or .md file")
    head = data[:1024]
    if b"%PDF-" in head:
        return "pdf"
    for magic, what in _BINARY_MAGIC:
        if data.startswith(magic):
            raise UnsupportedType(f"the file is {what}, not a PDF or text; upload a PDF, .txt or .md file")
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "text"
    if b"\x00" in data[:8192]:
        raise UnsupportedType("the file is binary data, not a PDF or text; upload a PDF, .txt or .md file")
    return "text"


def extract(data: bytes, password: str | None = None) -> ExtractedText:
    """Extract and normalise text from ``data`` (a PDF or UTF-8/UTF-16 text).

    Raises EmptyDocument, UnsupportedType, PasswordRequired, WrongPassword, UnreadablePdf or
    NoTextLayer; never anything else for bad input.
    """
    kind = sniff(data)
    if kind == "pdf":
        result = _extract_pdf(data, password)
    else:
        result = ExtractedText(text=normalize_text(decode_text(data)), kind="text")
    if not result.text.strip():
        if kind == "pdf":
            raise NoTextLayer(
                f"the PDF has {result.pages} page(s) but no extractable text (a scan without a text "
                "layer?); run OCR on it first, or upload the text"
            )
        raise EmptyDocument("the file contains no text; upload a document with text in it")
    return result


def decode_text(data: bytes) -> str:
    """Decode text bytes: UTF-8 (BOM optional) unless a UTF-16 BOM says otherwise.

    Undecodable bytes become U+FFFD; this never raises.
    """
    if data.startswith(codecs.BOM_UTF8):
        return data[len(codecs.BOM_UTF8) :].decode("utf-8", errors="replace")
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16", errors="replace")  # the codec reads and strips the BOM
    return data.decode("utf-8", errors="replace")


def _extract_pdf(data: bytes, password: str | None) -> ExtractedText:
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
        raw_pages = [page.extract_text() or "" for page in reader.pages]
    except (WrongPassword, PasswordRequired):
        raise
    except Exception as exc:  # pypdf raises many types for broken files; all mean "unreadable"
        raise UnreadablePdf(
            f"the PDF could not be read ({type(exc).__name__}: {exc}); it may be broken, truncated or "
            "over pypdf's decompression limits; re-export or repair it and upload again"
        ) from exc
    if not raw_pages:
        raise NoTextLayer("the PDF has no pages; upload a PDF with text in it")
    parts: list[str] = []
    page_starts: list[int] = []
    offset = 0
    for i, raw in enumerate(raw_pages):
        page_text = normalize_text(raw)
        if i:
            parts.append(PAGE_SEPARATOR)
            offset += len(PAGE_SEPARATOR)
        page_starts.append(offset)
        parts.append(page_text)
        offset += len(page_text)
    return ExtractedText(text="".join(parts), page_starts=page_starts, kind="pdf")
