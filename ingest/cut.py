"""Part of an upload: a page range (``pages=1-80``) or, for text, a character range (``chars=0-50000``).

A document longer than the context can still be read in parts. The part keeps its pages' real
numbers: a PDF cut to pages 5-9 says "page 5" where the PDF does (``ExtractedText.first_page``).
The ranges are as people write them: pages 1-based and inclusive; characters 0-based and half-open
``[start, end)``, as the API's offsets are everywhere else. Page numbers count the PDF's pages; a PDF
whose pages are labelled as printed (ISO 32000-1 12.4.2 /PageLabels: i, ii, iii, 1, 2, ...) can also
be cut by its labels: ``pages=ii-3`` (a range with a label that is no number is read as labels), or
``pages=1-6`` with ``labels`` set (printed page 1 is then PDF page 4 of a book with three front
pages). Labels are resolved once the PDF is read (:func:`apply`), and the part is stored with its PDF
page numbers. A label with a hyphen in it ("A-3") cannot be given, as the hyphen separates the ends.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal

from ingest.errors import DocumentError
from ingest.extract import ExtractedText

_RANGE = re.compile(r"\s*(\d{1,9})\s*(?:-\s*(\d{1,9})\s*)?")
_LABELS = re.compile(r"\s*([^\s-][^-]{0,30}?)\s*(?:-\s*([^\s-][^-]{0,30}?)\s*)?")


class OutsideDocument(DocumentError):
    """A requested page or character range lies outside the document."""


@dataclass(frozen=True, slots=True)
class Cut:
    """Pages ``start``..``end`` (1-based, inclusive) or characters ``[start, end)`` of a document."""

    unit: Literal["pages", "chars"]
    start: int
    end: int
    labels: tuple[str, str] | None = None  # printed page labels, resolved to start/end by apply()

    @property
    def spec(self) -> str:
        """As the upload field writes it: ``pages=5-9``, ``chars=0-50000``, ``labels=ii-3``."""
        if self.labels is not None:
            return f"labels={self.labels[0]}-{self.labels[1]}"
        return f"{self.unit}={self.start}-{self.end}"

    @classmethod
    def parse(cls, pages: str | None = None, chars: str | None = None, labels: bool = False) -> Cut | None:
        """The upload fields ``pages`` ("5-9", "7", printed labels "ii-3") and ``chars``
        ("0-50000"); None when both are empty. ``labels``: the pages are printed labels even where
        they are numbers. Raises ValueError with what is wrong and how to write it."""
        if pages and chars:
            raise ValueError("send either pages or chars, not both")
        unit: Literal["pages", "chars"] = "pages" if pages else "chars"
        raw = pages or chars
        if not raw:
            return None
        if pages and (labels or _RANGE.fullmatch(raw) is None):
            named = _LABELS.fullmatch(raw)
            if named is None:
                raise ValueError(f"pages={raw!r} is not a range; write it as pages=1-80, pages=7 or pages=ii-3")
            return cls("pages", 0, 0, (named[1], named[2] or named[1]))
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
        if unit == "labels":
            cut = cls.parse(raw, None, labels=True)
        else:
            cut = cls.parse(raw, None) if unit == "pages" else cls.parse(None, raw)
        assert cut is not None
        return cut


def apply(extracted: ExtractedText, cut: Cut) -> ExtractedText:
    """The part ``cut`` of a whole extracted document, its pages keeping their numbers, warnings and OCR marks.
    Raises OutsideDocument when the range starts past the document's end (an end past it is clipped)."""
    if extracted.cut is not None:
        raise ValueError("apply cuts to whole documents only")
    if cut.labels is not None:
        cut = by_label(extracted, cut)
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


def by_label(extracted: ExtractedText, cut: Cut) -> Cut:
    """``cut``'s printed labels as PDF page numbers: the first page with the start's label, and the
    first page from there with the end's. Raises OutsideDocument naming the labels the document has."""
    labels = extracted.page_labels or [str(n) for n in range(1, extracted.pages + 1)]
    first_label, last_label = cut.labels
    one = first_label == last_label
    want = f"pages={first_label}" if one else f"pages={first_label}-{last_label}"
    missing = f"no page labelled {first_label!r}" + ("" if one else f" followed by one labelled {last_label!r}")
    try:
        start = labels.index(first_label) + 1
        end = labels.index(last_label, start - 1) + 1
    except ValueError:
        raise OutsideDocument(
            f"{want}: the document has {missing}; its pages are labelled {label_runs(labels)}"
            + ("" if extracted.page_labels else f" (it has no printed labels: write it as pages=1-{len(labels)})")
        ) from None
    return Cut("pages", start, end)


def label_runs(labels: list[str]) -> str:
    """ "i–iii, 1–120": the labels in runs, as a person reads a book's page numbering."""
    runs: list[list[str]] = []
    for i, label in enumerate(labels):
        if runs and i > 0 and _follows(labels[i - 1], label):
            runs[-1][1] = label
        else:
            runs.append([label, label])
    text = ", ".join(a if a == b else f"{a}–{b}" for a, b in runs[:6])
    return text + (", …" if len(runs) > 6 else "")


def _follows(before: str, label: str) -> bool:
    """Whether ``label`` continues ``before``'s numbering (12 after 11, or any roman after a roman)."""
    if before.isdigit() and label.isdigit():
        return int(label) == int(before) + 1
    roman = set("ivxlcdm")
    return set(before.lower()) <= roman and set(label.lower()) <= roman and before.islower() == label.islower()


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
