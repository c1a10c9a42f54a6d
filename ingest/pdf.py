"""The pages of a PDF as raw text: pypdf's text layer, and OCR (ingest/ocr.py) for the pages that
have none.

pypdf runs with ``strict=False`` so that common breakage (a wrong startxref, a stray object pointer)
is repaired the way viewers repair it, and with its built-in decompression limits, so a flate bomb
fails fast with ``LimitReachedError``. One page that cannot be read costs that page only (a
warning); only a PDF with no readable page at all is refused.

OCR (``OcrJob``; none: as ``off``): in ``auto`` mode a page is read by OCR when it has no usable text:
its text layer is empty, reads as garbage (:func:`garbled`) or could not be read; in ``force`` mode
every page is. Each page read by OCR gets its number in ``ocr_pages`` and the warning
:data:`OCR_NOTE` (the same words on every page, so a list of them can be shown as one line), or
one that says OCR found no words there. When Tesseract (or a language pack asked for) is missing,
a PDF with no usable text on any page is OcrUnavailable (4xx, with the command that installs it);
one that has some keeps its text pages as without OCR, and the pages OCR would have read say why
they are empty.
"""

from __future__ import annotations

import io
import logging
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field

from ingest.errors import NoTextLayer, OcrUnavailable, PasswordRequired, UnreadablePdf, WrongPassword
from ingest.marks import PageText, page_text
from ingest.normalize import drop_unmapped, normalize_text
from ingest.ocr import OcrSettings, PageOcr, unavailable
from ingest.pdf_tables import PageTables, may_have_table, splice_tables

__all__ = ["OCR_NOTE", "OcrJob", "PdfPages", "garbled", "pdf_pages"]

OCR_NOTE = "read by OCR (no usable text layer): quotes may differ from the page as printed"


@dataclass(frozen=True, slots=True)
class OcrJob:
    """OCR for one extraction. ``pages``: the pages wanted (1-based, inclusive; a cut, ingest/cut.py),
    None for all: OCR reads no page outside them. ``max_chars``: once the pages before hold this many
    characters, OCR stops (the rest is past any budget, ingest/cut.py keep_leading). ``progress``:
    called with (pages read by OCR so far, pages to read), 0 first, in the extracting process; and
    once before any page is read with (:data:`OPENED`, the PDF's number of pages), so a caller knows
    the file opened and how many pages it has (server/service/background.py: a part that lies inside it
    may be read in the background)."""

    settings: OcrSettings
    pages: tuple[int, int] | None = None
    max_chars: int | None = None
    progress: Callable[[int, int], None] | None = field(default=None, compare=False)


#: ``OcrJob.progress(OPENED, n_pages)``: the PDF is open and has ``n_pages`` pages (no page read yet).
OPENED = -1


@dataclass(slots=True)
class PdfPages:
    """Raw page texts (``texts[i]`` is page i + 1), warnings ``[{"page", "message"}]`` in page order,
    and the numbers of the pages read by OCR."""

    texts: list[str]
    warnings: list[dict]
    ocr_pages: list[int]
    labels: list[str] | None = None  # the printed page labels (/PageLabels) where any differs from its number


def pdf_pages(data: bytes, password: str | None, ocr: OcrJob | None = None) -> PdfPages:
    """Read every page of the PDF ``data``. Raises PasswordRequired, WrongPassword, UnreadablePdf,
    NoTextLayer (no pages) or OcrUnavailable; MemoryError and RecursionError are left to the worker."""
    pages, labels = _open(data, password)
    if ocr is not None and ocr.progress is not None:
        ocr.progress(OPENED, len(pages))
    mode = ocr.settings.mode if ocr is not None else "off"
    why = unavailable(ocr.settings.languages) if ocr is not None and mode != "off" else None
    if why is not None and mode == "force":
        mode = "auto"  # without Tesseract, force reads what auto would and keeps the text layers
    texts: list[str] = []
    notes: dict[int, str] = {}  # page index -> warning
    failures: list[Exception] = []
    need: list[int] = []  # page indices OCR should read
    bombs: set[int] = set()  # pages over pypdf's decompression limits: never handed to PDFium instead
    finder = PageTables(data, password)
    for i, page in enumerate(pages):
        if mode == "force" and _wanted(ocr, i):
            texts.append("")
            need.append(i)
            continue
        try:
            read = page_text(page)  # superscripts written apart (ingest/marks.py)
            text = read.text
        except (MemoryError, RecursionError):
            raise  # the whole file is a bomb or a loop: the worker answers for it
        except Exception as exc:  # one broken page (a bad font, a bad content stream) costs that page only
            text = ""
            failures.append(exc)
            notes[i] = f"could not be read ({type(exc).__name__}); it is left empty"
            if _is_bomb(exc):
                bombs.add(i)
        else:
            if garbled(text):
                notes[i] = (
                    "reads as mostly unreadable characters (a font without a text "
                    "mapping?); answers about it may be wrong"
                )
            elif read.chunks is not None and may_have_table(page):
                text = _with_tables(page, finder, i, read)
            text = drop_unmapped(text)
        texts.append(text)
        if mode == "auto" and _wanted(ocr, i) and (i in notes or not text.strip()) and i not in bombs:
            need.append(i)
    finder.close()
    ocr_pages: list[int] = []
    if need and ocr is not None:
        if why is not None:
            _cannot_read(ocr, texts, need, notes, why)
        else:
            ocr_pages = _read_by_ocr(data, password, ocr, texts, need, notes)
    if len(failures) == len(pages) and not ocr_pages:
        raise unreadable_pdf(failures[0])
    warnings = [{"page": i + 1, "message": notes[i]} for i in sorted(notes)]
    return PdfPages(texts, warnings, ocr_pages, labels)


def _open(data: bytes, password: str | None) -> tuple[list, list[str] | None]:
    """The PDF's pages, and its printed page labels (ISO 32000-1 12.4.2: "i", "ii", "1", "A-3") when
    any differs from its page's number (None otherwise)."""
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
        raise unreadable_pdf(exc) from exc
    if not pages:
        raise NoTextLayer("the PDF has no pages; upload a PDF with text in it")
    try:
        labels = [str(label) for label in reader.page_labels]
    except Exception:  # a malformed /PageLabels tree: the pages keep their numbers
        labels = []
    if len(labels) != len(pages) or all(label == str(i) for i, label in enumerate(labels, 1)):
        return pages, None
    return pages, labels


def _wanted(ocr: OcrJob | None, index: int) -> bool:
    return ocr is not None and (ocr.pages is None or ocr.pages[0] <= index + 1 <= ocr.pages[1])


def _cannot_read(ocr: OcrJob, texts: list[str], need: list[int], notes: dict[int, str], why: str) -> None:
    """OCR cannot run: OcrUnavailable when no wanted page has usable text, else a note on each page
    that OCR would have read."""
    usable = [i for i in range(len(texts)) if _wanted(ocr, i) and i not in need]
    if not usable:
        raise OcrUnavailable(
            f"the PDF has {len(need)} page(s) without usable text (a scan?) that need OCR, and OCR cannot run "
            f"here: {why}; or upload the text"
        )
    for i in need:
        before = f"{notes[i]}; " if i in notes else "no text layer; "
        notes[i] = f"{before}OCR could not read it: {why}"


def _read_by_ocr(
    data: bytes, password: str | None, ocr: OcrJob, texts: list[str], need: list[int], notes: dict[int, str]
) -> list[int]:
    """OCR the pages ``need`` into ``texts`` (their notes in ``notes``); the numbers of those read."""
    done: list[int] = []
    report = ocr.progress or (lambda n, total: None)
    report(0, len(need))
    lengths = [len(normalize_text(t)) for t in texts] if ocr.max_chars is not None else []
    with PageOcr(data, password, ocr.settings) as reader:
        for k, i in enumerate(need):
            if ocr.max_chars is not None and sum(lengths[:i]) > ocr.max_chars:
                for j in need[k:]:
                    notes[j] = "not read by OCR: the pages before it hold more text than fits"
                break
            try:
                texts[i] = reader.read(i)
            except (MemoryError, RecursionError):
                raise
            except Exception as exc:  # OcrFailed, or PDFium's error for a page it cannot render
                notes[i] = f"could not be read by OCR ({exc}); it is left empty"
                texts[i] = ""
            else:
                empty = "no usable text layer, and OCR found no words there"
                notes[i] = OCR_NOTE if texts[i].strip() else empty
                done.append(i + 1)
            if lengths:
                lengths[i] = len(normalize_text(texts[i]))
            report(k + 1, len(need))
    return done


def _is_bomb(exc: Exception) -> bool:
    """Whether pypdf refused a page for its decompression limits (``LimitReachedError``): a stream
    that inflates past them is a decompression bomb, which OCR must not render with PDFium (which has
    no such limit) in its stead."""
    from pypdf.errors import LimitReachedError

    return isinstance(exc, LimitReachedError)


def unreadable_pdf(exc: Exception) -> UnreadablePdf:
    return UnreadablePdf(
        f"the PDF could not be read ({type(exc).__name__}: {exc}); it may be broken, truncated or "
        "over pypdf's decompression limits; re-export or repair it and upload again"
    )


def _with_tables(page, finder: PageTables, index: int, read: PageText) -> str:
    """The page's text (``read``: pypdf's, ingest/marks.py) with its ruled tables as pipe rows
    (ingest/pdf_tables.py); that text itself when there are none or splicing fails."""
    tables = finder.tables(index, read.labels)
    if not tables or read.chunks is None:
        return read.text
    try:
        return splice_tables(page, tables, read.chunks)
    except (MemoryError, RecursionError):
        raise
    except Exception:  # pypdf read the page once; a second pass that fails keeps the first
        return read.text


def garbled(text: str) -> bool:
    """Mostly U+FFFD or control characters: what a page whose font has no usable text mapping gives."""
    chars = [c for c in text if not c.isspace()]
    bad = sum(1 for c in chars if c == "\ufffd" or unicodedata.category(c) in ("Cc", "Co", "Cn"))
    return len(chars) >= 20 and bad > 0.5 * len(chars)
