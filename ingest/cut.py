"""Part of an upload: a page range (``pages=1-80``) or, for text, a character range (``chars=0-50000``).

A document longer than the context can still be read in parts. The part keeps its pages' real
numbers: a PDF cut to pages 5-9 says "page 5" where the PDF does (``ExtractedText.first_page``).
The ranges are as people write them: pages 1-based and inclusive, as printed; characters 0-based
and half-open ``[start, end)``, as the API's offsets are everywhere else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal

from ingest.errors import DocumentError
from ingest.extract import ExtractedText

_RANGE = re.compile(r"\s*(\d{1,9})\s*(?:-\s*(\d{1,9})\s*)?")


class OutsideDocument(DocumentError):
    """A requested page or character range lies outside the document."""


@dataclass(frozen=True, slots=True)
class Cut:
    """Pages ``start``..``end`` (1-based, inclusive) or characters ``[start, end)`` of a document."""

    unit: Literal["pages", "chars"]
    start: int
    end: int

    @property
    def spec(self) -> str:
        """As the upload field writes it: ``pages=5-9``, ``chars=0-50000``."""
        return f"{self.unit}={self.start}-{self.end}"

    @classmethod
    def parse(cls, pages: str | None = None, chars: str | None = None) -> Cut | None:
        """The upload fields ``pages`` ("5-9", "7") and ``chars`` ("0-50000"); None when both are
        empty. Raises ValueError with what is wrong and how to write it."""
        if pages and chars:
            raise ValueError("send either pages or chars, not both")
        unit: Literal["pages", "chars"] = "pages" if pages else "chars"
        raw = pages or chars
        if not raw:
            return None
        m = _RANGE.fullmatch(raw)
        if m is None:
            example = "pages=1-80 (or pages=7)" if unit == "pages" else "chars=0-50000"
            raise ValueError(f"{unit}={raw!r} is not a range; write it as {example}")
        start, end = int(m[1]), int(m[2] or m[1])
        if unit == "pages" and (start < 1 or end < start):
            raise ValueError(f"pages={raw!r}: pages count from 1 and the range must not run backwards")
        if unit == "chars" and end <= start:
            raise ValueError(f"chars={raw!r}: the end must be past the start (characters [start, end))")
        return cls(unit, start, end)

    @classmethod
    def from_spec(cls, spec: str) -> Cut:
        """The inverse of :attr:`spec`."""
        unit, _, raw = spec.partition("=")
        cut = cls.parse(raw, None) if unit == "pages" else cls.parse(None, raw)
        assert cut is not None
        return cut


def apply(extracted: ExtractedText, cut: Cut) -> ExtractedText:
    """The part ``cut`` of a whole extracted document, its pages keeping their numbers, warnings and OCR marks.
    Raises OutsideDocument when the range starts past the document's end (an end past it is clipped)."""
    if extracted.cut is not None:
        raise ValueError("apply cuts to whole documents only")
    text, starts = extracted.text, extracted.page_starts
    if cut.unit == "pages":
        if cut.start > len(starts):
            raise OutsideDocument(
                f"pages={cut.start}-{cut.end} starts past the end: the document has {len(starts)} page(s)"
            )
        end_page = min(cut.end, len(starts))
        a, b = starts[cut.start - 1], starts[end_page] if end_page < len(starts) else len(text)
        first, last = cut.start, end_page
    else:
        if cut.start >= len(text):
            raise OutsideDocument(
                f"chars={cut.start}-{cut.end} starts past the end: the text has {len(text)} characters"
            )
        a, b = cut.start, min(cut.end, len(text))
        first, last = extracted.page_of(a), extracted.page_of(b - 1)
    part = text[a:b].rstrip()
    if not part.strip():
        raise OutsideDocument(f"{cut.spec} holds no text; choose another range")
    page_starts = [0] + [s - a for s in starts[first:last] if a < s < a + len(part)]
    return replace(
        extracted,
        text=part,
        page_starts=page_starts,
        first_page=first,
        cut=Cut(cut.unit, cut.start, last if cut.unit == "pages" else a + len(part)).spec,
        warnings=[w for w in extracted.warnings if first <= w.get("page", 0) <= last],
        ocr_pages=[n for n in extracted.ocr_pages if first <= n <= last],
    )


def keep_leading(extracted: ExtractedText, max_chars: int) -> ExtractedText:
    """At most the first ``max_chars`` characters of ``extracted`` (its pages that start there), the
    rest counted in ``omitted_chars``: a text longer than the most characters a token budget can hold
    is over it whatever the rest is, so the rest need not travel or be tokenized."""
    if len(extracted.text) <= max_chars:
        return extracted
    return replace(
        extracted,
        text=extracted.text[:max_chars],
        page_starts=[s for s in extracted.page_starts if s < max_chars] or [0],
        omitted_chars=extracted.omitted_chars + len(extracted.text) - max_chars,
    )
