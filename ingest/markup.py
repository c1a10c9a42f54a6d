"""HTML to Markdown-like text: headings as ``#``, list items as ``-``/``1.``, tables as ``|`` rows.

BeautifulSoup (with lxml's HTML parser) reads the page and markdownify writes the Markdown, with
these choices for text a model reads and quotes:

* Only the main content: the page's ``<main>`` (or ``role="main"``, or its one ``<article>``), else
  its ``<body>`` without ``<nav>``, ``<aside>`` and page-level ``<header>``/``<footer>``. Scripts,
  styles, forms' controls, SVG and embedded objects go everywhere.
* Inline markup becomes its text: no ``**``/``_`` emphasis markers, no link targets, no backslash
  escapes, images as their alt text. Those characters would sit between the words of every quote.
* HTML whitespace rules: source line breaks inside a paragraph are spaces; ``<br>`` is a Markdown
  hard break (two spaces and a newline), which the reflow rules keep; ``<pre>`` becomes a fenced block.
* A table cell that spans columns or rows (``colspan``/``rowspan``: a DOCX's merged cells, as mammoth
  writes them) gives its text to every cell it covers (:func:`spread_spans`), so that the row of
  France under a "Europe" spanning Germany to France reads "Europe" too (issue 51;
  bench/results/spans.md measured it against marking the span).

The encoding of HTML bytes is found by BeautifulSoup's UnicodeDammit: a BOM, then the page's own
``<meta charset>`` declaration, then detection (charset-normalizer), then UTF-8 and Windows-1252.
"""

from __future__ import annotations

import copy
import re
import warnings

from bs4 import BeautifulSoup, Tag, XMLParsedAsHTMLWarning
from bs4.dammit import UnicodeDammit
from markdownify import ATX, MarkdownConverter

_REMOVE = (
    "script", "style", "noscript", "template", "svg", "canvas", "iframe", "object", "embed",
    "button", "select", "input", "textarea", "head",
)  # fmt: skip
_CHROME = ("nav", "aside")
# A DOCTYPE with an internal subset (``<!DOCTYPE html [ <!ENTITY ...> ]>``): lxml's HTML parser ends
# the doctype at the first ">" and leaves the rest of the subset, "]>" at least, as text (issue 27).
# The subset is dropped (HTML has no use for it; its entities are never expanded, as in browsers).
_INTERNAL_SUBSET = re.compile(r"(<!DOCTYPE\b[^\[>]*)\[.*?\]\s*>", re.I | re.S)
_AFTER_BREAK = re.compile(r"(?m)( {2}|\\)\n (?=\S)")  # "<br>\n  text": the space is source whitespace


class _TextConverter(MarkdownConverter):
    """markdownify with inline markup reduced to its text (see the module docstring)."""

    def convert_a(self, el: Tag, text: str, parent_tags: set[str]) -> str:
        return text

    def convert_img(self, el: Tag, text: str, parent_tags: set[str]) -> str:
        return str(el.attrs.get("alt", "") or "")

    def convert_code(self, el: Tag, text: str, parent_tags: set[str]) -> str:
        return text  # inline code; <pre> blocks are fenced by convert_pre

    convert_b = convert_strong = convert_i = convert_em = convert_a
    convert_u = convert_s = convert_del = convert_ins = convert_mark = convert_a
    convert_sub = convert_sup = convert_kbd = convert_samp = convert_a


_CONVERTER = _TextConverter(
    heading_style=ATX,
    bullets="-",
    escape_asterisks=False,
    escape_underscores=False,
    escape_misc=False,
    wrap=True,  # collapse source newlines inside paragraphs...
    wrap_width=None,  # ...without re-wrapping them at any width
    table_infer_header=True,
)


def decode_html(data: bytes) -> tuple[str, str | None]:
    """Decode HTML bytes; returns ``(markup, encoding)`` (encoding None if it was already text)."""
    dammit = UnicodeDammit(data, is_html=True)
    if dammit.unicode_markup is None:
        return data.decode("utf-8", errors="replace"), "utf-8"
    return dammit.unicode_markup, dammit.original_encoding


def _main_content(soup: BeautifulSoup) -> Tag:
    for tag in soup.find_all(_REMOVE):
        tag.decompose()
    main = soup.find("main") or soup.find(attrs={"role": "main"})
    if main is None:
        articles = soup.find_all("article")
        main = articles[0] if len(articles) == 1 else None
    if isinstance(main, Tag):
        return main
    body = soup.find("body")
    root = body if isinstance(body, Tag) else soup
    for tag in root.find_all(_CHROME):
        tag.decompose()
    for tag in root.find_all(("header", "footer")):
        if tag.find_parent(("article", "section")) is None:
            tag.decompose()
    return root


MAX_SPREAD = 10_000  # cells a table's spans may add; a table that would need more keeps its spans


def spread_spans(table: Tag) -> None:
    """Give the text of each cell of ``table`` that spans columns or rows to every cell it covers: its
    rows are rebuilt with a copy of the cell in each slot it covers (the HTML table model, rows of
    nested tables left to their own table). A table whose spans would add more than MAX_SPREAD cells
    is left as it is."""
    rows = [tr for tr in table.find_all("tr") if tr.find_parent("table") is table]
    spans = [(int(_span(c, "colspan")), int(_span(c, "rowspan"))) for tr in rows for c in _cells(tr)]
    if all(span == (1, 1) for span in spans):
        return
    if sum(w * min(h, len(rows)) - 1 for w, h in spans) > MAX_SPREAD:
        return
    grid: list[dict[int, Tag]] = [{} for _ in rows]
    for i, tr in enumerate(rows):
        col = 0
        for cell in _cells(tr):
            while col in grid[i]:
                col += 1
            width, height = _span(cell, "colspan"), min(_span(cell, "rowspan"), len(rows) - i)
            for di in range(height):
                for dj in range(width):
                    slot = cell if (di, dj) == (0, 0) else copy.copy(cell)
                    slot.attrs.pop("colspan", None)
                    slot.attrs.pop("rowspan", None)
                    grid[i + di].setdefault(col + dj, slot)
            col += width
    for tr, slots in zip(rows, grid, strict=True):
        for cell in _cells(tr):
            cell.extract()
        for col in sorted(slots):
            tr.append(slots[col])


def _cells(tr: Tag) -> list[Tag]:
    return list(tr.find_all(("td", "th"), recursive=False))


def _span(cell: Tag, attr: str) -> int:
    """A cell's colspan or rowspan, within the limits browsers keep (1-1000 columns, 1-65534 rows)."""
    try:
        value = int(str(cell.get(attr, "1")).strip() or 1)
    except ValueError:
        return 1
    return max(1, min(value, 1000 if attr == "colspan" else 65534))


def html_to_text(markup: str) -> str:
    """Markdown-like text of an HTML page or fragment (see the module docstring)."""
    head = markup[:4096]
    if "[" in head and _INTERNAL_SUBSET.search(head):
        markup = _INTERNAL_SUBSET.sub(r"\1>", markup, count=1)
    with warnings.catch_warnings():  # XHTML (EPUB chapters) read as HTML is what we want
        warnings.simplefilter("ignore", XMLParsedAsHTMLWarning)
        soup = BeautifulSoup(markup, "lxml")
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    for table in soup.find_all("table"):
        spread_spans(table)
    text = _AFTER_BREAK.sub(r"\1\n", _CONVERTER.convert_soup(_main_content(soup))).strip("\n")
    # A page with no heading of its own: its title says what it is. A page with no text at all (an EPUB's
    # cover, an image) stays empty: its title alone is no text (a cover-only EPUB is empty_document).
    if title and text.strip() and not text.lstrip().startswith("#") and title not in text[: len(title) + 200]:
        text = f"# {title}\n\n{text}"
    return text
