"""The token budget, checked before a document is tokenized in full.

Tokenizing a 60 MB text at once costs gigabytes (llama.cpp's token buffer is sized to the byte
count) and minutes, only to refuse it. Here the text is tokenized page by page in pieces of at most
:data:`PIECE_CHARS` characters, and counting stops as soon as the count passes the budget, so an
over-budget document costs about the budget's worth of tokenizing, whatever its size. The count per
page gives the largest leading page range that fits (or, for one-page text, the leading characters).

A piece boundary can split what whole-text tokenization would merge, so a piecewise count can be a
few tokens off the exact one; counting stops only once it passes the budget by one token per piece
(:func:`count_leading`), and a document that is not refused here is tokenized exactly and checked
again (ingest/pipeline.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from ingest.errors import DocumentTooLong
from ingest.extract import ExtractedText
from ingest.prompt import Tokenizer

#: Characters tokenized per call while counting (~500 tokens): small calls, fine-grained fits.
PIECE_CHARS = 2048


@dataclass(frozen=True, slots=True)
class Budget:
    """Tokens a document prefix may have (``limit``: n_ctx minus the answer reserve), and the context
    sizes the 413 message weighs (``n_ctx``, and the model's trained context ``n_ctx_train``)."""

    limit: int
    n_ctx: int
    n_ctx_train: int


@dataclass(slots=True)
class Count:
    """A count that may have stopped early: ``n_tokens`` over the first ``n_chars`` characters,
    ``page_tokens[i]`` of them on the document's i-th page (the pages counted in full), and
    ``chars_fit``: the end of the last piece within ``room``."""

    n_tokens: int = 0
    n_chars: int = 0
    page_tokens: list[int] = field(default_factory=list)
    chars_fit: int = 0
    complete: bool = True

    def estimate(self, total_chars: int) -> int:
        """Tokens of the whole text, from the rate of the part counted."""
        if self.complete or not self.n_chars:
            return self.n_tokens
        return round(self.n_tokens * total_chars / self.n_chars)


def pieces(text: str, a: int = 0, b: int | None = None, size: int = PIECE_CHARS) -> Iterator[tuple[int, int]]:
    """``[i, j)`` spans of at most ``size`` characters covering ``text[a:b]`` (without copying it),
    each cut after whitespace where there is any, so a word is not split between two calls.

    >>> list(pieces("aaa bbb ccc", size=5))
    [(0, 4), (4, 8), (8, 11)]
    """
    end = len(text) if b is None else b
    while a < end:
        j = min(a + size, end)
        if j < end:
            cut = max(text.rfind(" ", a, j), text.rfind("\n", a, j))
            j = cut + 1 if cut > a else j
        yield a, j
        a = j


def count_leading(extracted: ExtractedText, tok: Tokenizer, room: int) -> Count:
    """Count the document's tokens page by page, piece by piece, stopping once the count passes
    ``room`` by more than one token per piece counted (see the module docstring). A text with
    ``omitted_chars`` is never complete: what was left out is past any budget."""
    count, text, starts = Count(complete=not extracted.omitted_chars), extracted.text, extracted.page_starts
    ends = [*starts[1:], len(text)]
    n_pieces = 0
    for a, b in zip(starts, ends, strict=True):
        on_page = 0
        for i, j in pieces(text, a, b):
            n = len(tok.tokenize(text[i:j], parse_special=False))
            n_pieces += 1
            on_page += n
            count.n_tokens += n
            count.n_chars = j
            if count.n_tokens <= room:
                count.chars_fit = j
            if count.n_tokens > room + n_pieces:
                count.complete = False
                return count
        count.page_tokens.append(on_page)
    if extracted.omitted_chars and count.page_tokens:
        count.page_tokens.pop()  # the last page kept may be cut short: it does not count as a whole page
    return count


def too_long(extracted: ExtractedText, count: Count, n_tokens: int, budget: Budget, room: int) -> DocumentTooLong:
    """The 413 for a document of ``n_tokens`` (exact, or estimated when ``count`` stopped early),
    with the largest leading part that fits: pages for a paged document, else characters."""
    fits: dict[str, list[int]] | None = None
    cum, n_pages = 0, 0
    for n in count.page_tokens:
        if cum + n > room:
            break
        cum, n_pages = cum + n, n_pages + 1
    if extracted.pages > 1 and n_pages:
        fits = {"pages": [extracted.first_page, extracted.first_page + n_pages - 1]}
    elif count.chars_fit:
        # A part cut by characters: the range is in the whole upload's characters.
        offset = int(extracted.cut.split("=")[1].split("-")[0]) if (extracted.cut or "").startswith("chars=") else 0
        fits = {"chars": [offset, offset + count.chars_fit]}
    return DocumentTooLong(
        n_tokens,
        budget.limit,
        estimated=not count.complete,
        fits=fits,
        n_ctx=budget.n_ctx,
        n_ctx_train=budget.n_ctx_train,
    )
