"""Text normalisation shared by every format, versioned as "text rules".

Character rules (every version; one place, so the stored text, the page map and the tokens agree):
* CRLF and lone CR become LF.
* Unicode NFKC (UAX #15), so presentation forms such as the ligature U+FB01 become plain letters.
* Control characters (Unicode category Cc) are dropped except LF and TAB; so are lone surrogates
  and U+FEFF (a byte-order mark left inside text).

Layout rules, by version (``TEXT_RULES`` is the one new documents get; the version that made a
document's text is stored with it, so documents ingested before an upgrade keep working and
``reingest`` applies the new rules):
* 1: pages as extracted, joined with :data:`PAGE_SEPARATOR`.
* 2: running headers, footers and page numbers of paged documents dropped (``ingest/furniture.py``),
  then paragraphs reflowed (``ingest/reflow.py``); a paragraph that runs on to the next page is
  joined across the page break (the page map then starts the page mid-paragraph).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from ingest.furniture import strip_furniture
from ingest.reflow import Join, join_how, page_width, reflow_lines, wrap_width

TEXT_RULES = 2
KNOWN_RULES = (1, 2)
PAGE_SEPARATOR = "\n\n"

_DROP = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufeff]")
# U+FFFD and the private-use areas (BMP, planes 15 and 16): glyphs without a character (drop_unmapped)
_UNMAPPED = re.compile("[\ufffd\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd]")


def normalize_text(text: str) -> str:
    """Return ``text`` with the character rules of the module docstring applied."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = unicodedata.normalize("NFKC", text)
    return _DROP.sub("", text)


def drop_unmapped(text: str) -> str:
    """``text`` without U+FFFD and private-use code points (Unicode category Co): what pypdf gives for
    a glyph whose font maps it to no character (an icon font's flags, a symbol font), which a reader
    sees as a box. Assigned characters (CJK, accents, emoji) are untouched; unassigned ones (Cn) are
    kept too, since Python's Unicode tables may predate a new character."""
    if not _UNMAPPED.search(text):
        return text
    return _UNMAPPED.sub("", text)


def normalize_pages(raw_pages: Sequence[str], *, paged: bool, rules: int = TEXT_RULES) -> tuple[str, list[int]]:
    """Normalise extracted pages into one text and its page map.

    ``raw_pages``: the text of each page (a PDF page, an EPUB chapter; one item for a text file).
    ``paged``: True for printed pages (PDF): furniture is dropped and paragraphs may run across pages.
    Returns ``(text, page_starts)``: ``page_starts[i]`` is the character offset in ``text`` where
    page ``i + 1`` begins; ``("", [])`` for no pages (the caller's EmptyDocument). Raises ValueError
    for an unknown ``rules`` version.
    """
    if rules not in KNOWN_RULES:
        raise ValueError(f"unknown text rules version {rules}; known: {KNOWN_RULES}")
    if not raw_pages:
        return "", []
    if rules == 1:
        return _join([normalize_text(p) for p in raw_pages], [None] * len(raw_pages))
    pages = [normalize_text(p).split("\n") for p in raw_pages]
    if paged:
        pages = strip_furniture(pages)
    width = wrap_width([line for page in pages for line in [*page, ""]])
    widths = [width or (page_width(page) if paged else None) for page in pages]
    flowed = ["\n".join(reflow_lines(page, w)) for page, w in zip(pages, widths, strict=True)]
    hows = [_continues(a, b, width) if paged and width else None for a, b in zip(pages, pages[1:], strict=False)]
    return _join(flowed, hows)


def _join(pages: list[str], hows: Sequence[Join | None]) -> tuple[str, list[int]]:
    """Concatenate pages with PAGE_SEPARATOR, or joined as ``hows[i - 1]`` says where page ``i``
    continues the paragraph of the page before; page ``i`` starts at its first character."""
    text, starts = "", []
    for i, page in enumerate(pages):
        how = hows[i - 1] if i else None
        if i and how is None:
            text += PAGE_SEPARATOR
        elif how is not None:
            page = page.lstrip(" \t")
            text = how.apply(text, "")  # the separator (or the dropped hyphen), then the page
        starts.append(len(text))
        text += page
    return text, starts


def _continues(before: list[str], after: list[str], width: int) -> Join | None:
    """How the first line of a page continues the last line of the page before: the reflow rules,
    and only before a lower-case letter (a page break is a likelier paragraph end than a line end)."""
    last = next((line for line in reversed(before) if line.strip()), "")
    first = next((line for line in after if line.strip()), "")
    if not last or not first.lstrip()[:1].islower():
        return None
    indent = len(last) - len(last.lstrip(" \t"))
    return join_how(last, first, width, max_indent=max(indent, len(first) - len(first.lstrip())), exact_indent=False)
