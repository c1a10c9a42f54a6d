"""Reflow: join the lines of a paragraph back into one line, as its author wrote it.

PDF text comes one printed line per line, and plain-text books (Project Gutenberg) come hard-wrapped
at about 70 characters. A model quoting such text re-wraps it, so prompt-lookup drafts copied from
the document break at every newline. These rules undo the wrapping and keep every break that means
something. Two adjacent lines of a block (a run of non-blank lines) are joined when:

* the first line ends a hyphenated word (``adip-``) and the next starts in lower case: joined with
  no space and without the hyphen (a hyphen at a line end before a lower-case letter is almost
  always the typesetter's; ``well-known`` split there loses its hyphen, the accepted cost). Before
  a capital the hyphen is the author's (``Jean-`` / ``Paul``): joined with no space, hyphen kept;
* or the first line is *full*: the next line's first word would not have fitted on it. "Fitted" is
  measured against the wrap width of the whole document (see :func:`wrap_width`), with 20 %
  slack for proportional fonts. A short line is a deliberate break: the end of a paragraph, a
  heading, a line of verse, an address, a table row.

Whatever the width, a break is always kept:

* around Markdown fenced code blocks (kept verbatim), pipe-table rows, ATX headings, setext
  underlines and thematic breaks, block quotes, and after a Markdown hard break (two trailing
  spaces or a backslash);
* before a list item (``-``, ``*``, ``•``, ``1.``, ``a)``, ``(iv)``, ...);
* around a line with a column gap (a tab or three spaces between words: a table row or aligned code);
* where the indentation changes (verse, quoted letters, code), except that the first line of a
  paragraph or list item may be indented more than the lines that continue it;
* in a block of three or more lines that all begin with a capital letter (verse, a list of names);
* before a short line that looks like a heading (no closing punctuation, capital or digit first)
  after a line that ends a sentence.

Blank lines are paragraph breaks: runs of them become one blank line. Trailing spaces are dropped.
Example: ``["Lorem ipsum dolor sit amet, consectetuer adip-", "iscing elit. Ut purus elit,"]`` with
a wrap width of 48 becomes ``["Lorem ipsum dolor sit amet, consectetuer adipiscing elit. Ut purus elit,"]``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from enum import Enum

FULL = 0.8  # a line is full when the next word would have taken it past FULL x the wrap width
MIN_WRAP, MAX_WRAP = 25, 200  # outside this range (characters) the text was not hard-wrapped
WRAPPED_SHARE = 0.5  # share of continued lines that must be long for the text to count as wrapped

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^ {0,3}#{1,6}(\s|$)")
_RULE = re.compile(r"^ {0,3}([-=*_])(\s*\1){2,}\s*$")  # setext underline or thematic break
_TABLE = re.compile(r"^\s*\||\|.*\|")
_QUOTE = re.compile(r"^\s*>")
_GAP = re.compile(r"\S(\t| {3,})\S")
_LIST = re.compile(
    r"^\s*(?:[-*+\u2022\u25e6\u25aa\u2023\u00b7]|\d{1,3}[.)]|\(\d{1,3}\)|[A-Za-z][.)]|\([A-Za-z]\)"
    r"|\(?[ivxIVX]{1,5}[.)])\s+"
)
_HYPHEN = re.compile(r"[^\W\d_][-\u00ad\u2010]$")


class Join(Enum):
    """How a line continues the one before it."""

    SPACE = " "  # a wrapped line
    DEHYPHEN = ""  # a word split by the typesetter: the hyphen goes
    ATTACH = "-"  # a hyphenated compound split at its hyphen ("Jean-" + "Paul"): the hyphen stays

    def apply(self, head: str, tail: str) -> str:
        """``head`` and ``tail`` joined this way (``tail`` without its indentation)."""
        if self is Join.DEHYPHEN:
            return head[:-1] + tail.lstrip()
        return head + (" " if self is Join.SPACE else "") + tail.lstrip()


_SENTENCE_END = re.compile(r"[.!?:][\"'\u2019\u201d)\]]*$")
_CLOSING = re.compile(r"[.,;:!?\"'\u2019\u201d)\]]$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _content_indent(line: str) -> int:
    """Where the text of a line starts: after the marker of a list item, else its indentation."""
    m = _LIST.match(line)
    return m.end() if m else _indent(line)


def _keeps_lines(line: str) -> bool:
    """Lines that never join anything: headings, rules, tables, quotes, column-aligned text."""
    return bool(_HEADING.match(line) or _RULE.match(line) or _TABLE.search(line) or _QUOTE.match(line)) or bool(
        _GAP.search(line.strip())
    )


def _starts_upper(line: str) -> bool:
    first = next((ch for ch in line if ch.isalpha()), "")
    return first.isupper()


def wrap_width(lines: Sequence[str]) -> int | None:
    """The width in characters that ``lines`` were hard-wrapped at, or None if they were not.

    The width is the 90th percentile of the lengths of the lines that may join (outside code fences,
    not headings or tables). The text counts as wrapped when the width is within
    [MIN_WRAP, MAX_WRAP] and at least WRAPPED_SHARE of the lines followed by another line reach 70 %
    of it: in wrapped text such lines are full, in text with one paragraph per line their lengths
    spread widely.
    """
    lengths: list[int] = []
    continued: list[int] = []
    fenced = False
    for line, nxt in zip(lines, [*lines[1:], ""][: len(lines)], strict=True):  # no lines: none
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or not line.strip() or _keeps_lines(line):
            continue
        lengths.append(len(line.strip()))
        if nxt.strip():
            continued.append(len(line.strip()))
    if not continued:
        return None
    width = sorted(lengths)[int(0.9 * (len(lengths) - 1))]
    if not MIN_WRAP <= width <= MAX_WRAP:
        return None
    share = sum(n >= 0.7 * width for n in continued) / len(continued)
    return width if share >= WRAPPED_SHARE else None


#: Lines of a page that go on to another line, at least, for the page to be judged wrapped by itself.
PAGE_LINES = 8


def page_width(lines: Sequence[str]) -> int | None:
    """The width one printed page's ``lines`` were hard-wrapped at (:func:`wrap_width` of the page
    alone), or None; None for a page with fewer than :data:`PAGE_LINES` lines that go on to another.

    For a document whose pages do not all look wrapped together: in a mathematics script the many short
    formula and table-of-contents lines keep the whole from passing :func:`wrap_width`'s test, while
    its prose pages (a preface wrapped at 94 characters) pass it on their own; without this their
    sentences stayed cut at every printed line, and a quote or a judged passage was half a sentence."""
    continued = sum(1 for line, nxt in zip(lines, lines[1:], strict=False) if line.strip() and nxt.strip())
    return wrap_width(lines) if continued >= PAGE_LINES else None


def join_how(prev: str, nxt: str, width: int | None, max_indent: int, exact_indent: bool) -> Join | None:
    """How ``nxt`` continues ``prev`` in a block, or None where the break is kept.

    ``max_indent``: the indentation a continuation line may have; it must be exactly that when
    ``exact_indent`` (the paragraph's continuation indent is known), at most that otherwise.
    """
    body = nxt.strip()
    if prev.endswith(("  ", "\\")) or _keeps_lines(prev) or _keeps_lines(nxt) or _LIST.match(nxt):
        return None
    indent = _indent(nxt)
    if indent > max_indent or (exact_indent and indent != max_indent):
        return None
    prev = prev.rstrip()
    if _HYPHEN.search(prev) and body[:1].isalpha():
        return Join.DEHYPHEN if body[:1].islower() else Join.ATTACH
    if width is None:
        return None
    first_word = body.split(maxsplit=1)[0]
    if len(prev.strip()) + 1 + len(first_word) < FULL * width:
        return None
    looks_like_heading = len(body) < 0.6 * width and not _CLOSING.search(body) and not body[:1].islower()
    if looks_like_heading and _SENTENCE_END.search(prev):
        return None
    return Join.SPACE


def _blocks(lines: Sequence[str]) -> Iterator[tuple[str, list[str]]]:
    """Split into ("fence", lines) kept verbatim, ("blank", []) and ("text", lines) blocks."""
    block: list[str] = []
    fence: list[str] | None = None
    for line in lines:
        if fence is not None:
            fence.append(line)
            if _FENCE.match(line):
                yield "fence", fence
                fence = None
        elif _FENCE.match(line):
            if block:
                yield "text", block
                block = []
            fence = [line]
        elif not line.strip():
            if block:
                yield "text", block
                block = []
            yield "blank", []
        else:
            block.append(line)
    if fence is not None:
        yield "fence", fence
    if block:
        yield "text", block


def _reflow_block(block: list[str], width: int | None) -> list[str]:
    if len(block) >= 3 and all(_starts_upper(line) for line in block):
        return [line.rstrip() for line in block]  # verse, or a list of names: every line starts a unit
    out = [block[0].rstrip()]
    max_indent, exact = _content_indent(block[0]), False
    for prev, nxt in zip(block, block[1:], strict=False):
        how = join_how(prev, nxt, width, max_indent, exact)
        if how is None:
            out.append(nxt.rstrip())
            max_indent, exact = _content_indent(nxt), False
            continue
        out[-1] = how.apply(out[-1], nxt.rstrip())
        if not exact:
            max_indent, exact = _indent(nxt), True
    return out


def reflow_lines(lines: Sequence[str], width: int | None) -> list[str]:
    """Reflow one page of lines (see the module docstring); leading and trailing blank lines go."""
    out: list[str] = []
    for kind, block in _blocks(lines):
        if kind == "blank":
            if out and out[-1] != "":
                out.append("")
        elif kind == "fence":
            out.extend(block)
        else:
            out.extend(_reflow_block(block, width))
    while out and out[-1] == "":
        out.pop()
    return out
