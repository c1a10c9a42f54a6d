"""Page furniture: running headers, footers and page numbers that a PDF repeats on its pages.

pypdf returns them as ordinary lines at the top or bottom of each page, so a quote that crosses a
page break would carry "4 1.1. TOPOLOGISCHE RÄUME" or a bare "12" in its middle. Two rules, both
looking only at the first and last :data:`EDGE_LINES` non-blank lines of each page:

* **Page numbers.** A line that starts or ends with an integer equal to ``page_index + offset``
  (a printed page label), where one offset holds on at least :data:`MIN_SHARE` of the pages, and
  whose text with numbers masked is at an edge of at least :data:`MIN_REPEAT` pages. That catches
  bare numbers ("12"), "Page 12 of 40", and headers that carry the number ("4 1.1. RÄUME", on each
  page of its section); not a line that appears once, such as a contents page's first entry "1
  Topologische Grundbegriffe 2" on the page printed 1 (issue 51: it was taken for a running header).
* **Repeated lines.** A line whose text, with numbers masked, is at an edge of at least
  :data:`MIN_SHARE` of the pages (a document title or a copyright footer on every page, or bare
  page numbers that do not follow the page order, such as roman numerals).

Documents of fewer than :data:`MIN_PAGES` pages are left alone: with two pages nothing "repeats".
A page is never emptied: when every line of it looks like furniture, it is its content.

Example: pages ``[["Title", "Body one", "1"], ["Title", "Body two", "2"], ["Title", "Body 3", "3"]]``
become ``[["Body one"], ["Body two"], ["Body 3"]]``.
"""

from __future__ import annotations

import re
from collections import Counter

EDGE_LINES = 2  # lines looked at at the top and at the bottom of each page
MIN_PAGES = 3
MIN_SHARE = 0.45  # of the pages; 0.45 and not 0.5 so that odd/even alternating headers count
MIN_REPEAT = 2  # pages a line carrying the page number must be on (numbers masked) to be a running header

_EDGE_NUMBER = re.compile(r"^\D{0,6}?(\d{1,5})\b|\b(\d{1,5})\D{0,3}$")
_ROMAN = re.compile(r"^[ivxlcdm]{1,7}$", re.IGNORECASE)
_DIGITS = re.compile(r"\d+")
_SPACE = re.compile(r"\s+")


def _edge_indices(lines: list[str]) -> list[int]:
    """Indices of the first and last EDGE_LINES non-blank lines (deduplicated, in order)."""
    nonblank = [i for i, line in enumerate(lines) if line.strip()]
    return sorted(set(nonblank[:EDGE_LINES] + nonblank[-EDGE_LINES:]))


def _key(line: str) -> str:
    """The line with digits and roman numerals masked, so "Page 3" and "Page 4" compare equal."""
    text = _SPACE.sub(" ", line.strip()).lower()
    return "#" if _ROMAN.match(text) else _DIGITS.sub("#", text)


def _numbers(line: str) -> set[int]:
    """Integers at the start or the end of the line (candidate printed page labels)."""
    text = line.strip()
    found = set()
    for m in _EDGE_NUMBER.finditer(text):
        found.update(int(g) for g in m.groups() if g)
    return found


def strip_furniture(pages: list[list[str]]) -> list[list[str]]:
    """Return ``pages`` (each a list of lines) without their running headers, footers and page
    numbers, as described in the module docstring. The input is not modified."""
    if len(pages) < MIN_PAGES:
        return [list(p) for p in pages]
    need = max(MIN_PAGES, MIN_SHARE * len(pages))
    edges = [_edge_indices(p) for p in pages]

    # Offsets between a printed number at a page edge and the page's index; one per page at most.
    offsets: Counter[int] = Counter()
    for i, (page, idx) in enumerate(zip(pages, edges, strict=True)):
        offsets.update({n - i for j in idx for n in _numbers(page[j])})
    numbered = {off for off, count in offsets.items() if count >= need}

    keys: Counter[str] = Counter()
    for page, idx in zip(pages, edges, strict=True):
        keys.update({_key(page[j]) for j in idx})
    repeated = {k for k, count in keys.items() if count >= need and k}

    out: list[list[str]] = []
    for i, (page, idx) in enumerate(zip(pages, edges, strict=True)):
        drop = {
            j
            for j in idx
            if _key(page[j]) in repeated
            or (keys[_key(page[j])] >= MIN_REPEAT and any(n - i in numbered for n in _numbers(page[j])))
        }
        if len(drop) == len([line for line in page if line.strip()]):
            drop = set()  # a page that is nothing but "furniture" is content (a one-line slide, a label)
        out.append([line for j, line in enumerate(page) if j not in drop])
    return out
