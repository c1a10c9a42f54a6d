"""Citations: the document spans an answer quotes, as character offsets and page numbers.

Two sources, merged:

* **lookup**: draft tokens copied from the document and accepted by the target. The lookup drafter
  records the document token range of every accepted copy (:attr:`spec.lookup.LookupDrafter.copied`);
  :class:`TokenOffsets` maps those token positions to character offsets in the document text.
* **match**: after the answer is complete, runs of at least ``min_words`` consecutive answer words
  that also occur consecutively in the document (case-folded words, so re-wrapped lines and changed
  punctuation still match), extended greedily to the longest common run. Where a run occurs several
  times, the occurrence nearest a lookup span or the previous citation wins.

Cost: building a :class:`CitationIndex` is O(document words), once per document; citing an answer is
O(answer words x candidates) and never scans the document.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

_WORD = re.compile(r"\w+")
_CLOSE = "\"'”’)\\]"
_SENTENCE_END = re.compile(f"[.!?][{_CLOSE}]*\\s*$")  # a span that ends a sentence
_SENTENCE_OR_LINE = re.compile(f"[.!?][{_CLOSE}]*(?=\\s)|[.!?][{_CLOSE}]*$|(?=\\n)")  # a sentence's (or line's) end
_SENTENCE_BREAK = re.compile(f"[.!?][{_CLOSE}]*\\s")  # where a sentence ends and another begins
MAX_CANDIDATES = 64  # occurrences of one n-gram considered (a very common phrase is not a citation)
MIN_LOOKUP_CHARS = 12  # a shorter accepted copy that no answer n-gram confirms is not cited


@dataclass(frozen=True, slots=True)
class Citation:
    """A quoted document span: characters ``[start, end)`` of the document text, on pages
    ``page``..``page_end`` (1-based)."""

    start: int
    end: int
    page: int
    page_end: int
    text: str
    source: str  # "quote" (a quote-first answer's quote) | "lookup" | "match" | "lookup+match"

    @property
    def verified(self) -> bool:
        """The span is the document's text as the answer wrote it: a quote-first answer's quote, or
        tokens the answer copied from the document (lookup). A ``match`` alone is the same words,
        case and punctuation aside."""
        return self.source != "match"

    def as_dict(self) -> dict:
        return {
            "start": self.start,
            "end": self.end,
            "page": self.page,
            "page_end": self.page_end,
            "text": self.text,
            "source": self.source,
            "verified": self.verified,
        }


class TokenOffsets:
    """Character offset in the document text of each document-prefix token position.

    ``prefix`` = ``n_head`` scaffolding tokens + the document's tokens + trailing scaffolding. Offsets
    come from the byte length of each token's piece (UTF-8), converted to characters; a leading space
    that the tokenizer adds is absorbed by aligning the end. Shape: int64 [len(prefix) + 1], clamped to
    ``[0, len(text)]``.
    """

    def __init__(self, prefix: np.ndarray, n_head: int, n_doc: int, text: str, piece: Callable[[int], bytes]):
        data = text.encode("utf-8")
        doc = prefix[n_head : n_head + n_doc].tolist()
        lens = np.fromiter((len(piece(t)) for t in doc), dtype=np.int64, count=len(doc))
        byte_at = np.concatenate([[0], np.cumsum(lens)])
        byte_at = np.clip(byte_at - max(0, int(byte_at[-1]) - len(data)), 0, len(data))
        raw = np.frombuffer(data, dtype=np.uint8)
        char_at_byte = np.concatenate([[0], np.cumsum((raw & 0xC0) != 0x80)])  # counts UTF-8 lead bytes
        chars = char_at_byte[byte_at]
        self.offsets = np.concatenate(
            [np.zeros(n_head, np.int64), chars, np.full(len(prefix) - n_head - n_doc, len(text), np.int64)]
        )

    def chars(self, start: int, end: int) -> tuple[int, int]:
        """Token positions ``[start, end)`` -> character offsets ``[a, b)``."""
        last = len(self.offsets) - 1
        return int(self.offsets[min(start, last)]), int(self.offsets[min(end, last)])


class CitationIndex:
    """Word n-gram index of one document for :meth:`cite`.

    ``page_starts[i]`` is the character offset where page ``first_page + i`` begins (a document cut to
    pages 5-9 keeps their numbers).
    """

    def __init__(self, text: str, page_starts: Sequence[int], min_words: int = 5, first_page: int = 1) -> None:
        self.text = text
        self.page_starts = list(page_starts) or [0]
        self.first_page = first_page
        self.min_words = min_words
        vocab: dict[str, int] = {}
        starts, ends, ids = [], [], []
        for m in _WORD.finditer(text):
            starts.append(m.start())
            ends.append(m.end())
            ids.append(vocab.setdefault(m.group().casefold(), len(vocab)))
        self.vocab = vocab
        self.starts = np.asarray(starts, dtype=np.int64)
        self.ends = np.asarray(ends, dtype=np.int64)
        self.ids = ids
        n = min_words
        self.grams: dict[tuple[int, ...], list[int]] = {}
        for i, key in enumerate(zip(*(ids[j:] for j in range(n)), strict=False)):
            self.grams.setdefault(key, []).append(i)

    def page_of(self, offset: int) -> int:
        """Page number (1-based, as in the upload) of the character at ``offset``."""
        return bisect.bisect_right(self.page_starts, offset) + self.first_page - 1

    def quote(self, a: int, b: int) -> Citation | None:
        """The citation of a quote-first answer's quote: characters ``[a, b)`` of the text, trimmed of
        whitespace (None when nothing is left), and carried across a page break that cuts its sentence
        (:meth:`across_pages`): the cut is a boundary of the citation's pages, not of its words."""
        a, b = self._trim(a, b)
        if b <= a:
            return None
        a, b = self.across_pages(a, b)
        return Citation(a, b, self.page_of(a), self.page_of(b - 1), self.text[a:b], "quote")

    def across_pages(self, a: int, b: int) -> tuple[int, int]:
        """``[a, b)`` (a sentence, as the quote index cut it at line breaks) widened over a page break
        that falls inside its sentence: when only whitespace lies between ``b`` and the next page's
        start and the span does not end a sentence, on to the end of the sentence on that page (its
        first ". ", "! ", "? " or line break); when only whitespace lies between the page's start and
        ``a`` and the page before does not end a sentence, back to that sentence's start. One page
        each way: a sentence runs over one page break, not several."""
        text, starts = self.text, self.page_starts
        i = bisect.bisect_right(starts, b)  # the next page's start, if any
        if i < len(starts) and not text[b : starts[i]].strip() and not _SENTENCE_END.search(text[a:b]):
            end = _SENTENCE_OR_LINE.search(text, starts[i])
            stop = starts[i + 1] if i + 1 < len(starts) else len(text)
            b = min(end.end() if end is not None else stop, stop)
            b = self._trim(a, b)[1]
        j = bisect.bisect_right(starts, a) - 1  # the start of the page ``a`` is on
        if 0 < j and not text[starts[j] : a].strip():
            before = text[starts[j - 1] : starts[j]].rstrip()
            if before and not _SENTENCE_END.search(before):
                begin = max(before.rfind("\n") + 1, max((m.end() for m in _SENTENCE_BREAK.finditer(before)), default=0))
                a = self._trim(starts[j - 1] + begin, b)[0]
        return a, b

    def cite(self, answer: str, lookup_spans: Sequence[tuple[int, int]] = ()) -> list[Citation]:
        """Citations for ``answer``, in document order.

        ``lookup_spans``: character ranges ``[a, b)`` of the document copied by accepted lookup drafts.
        """
        matched = self._match(answer, lookup_spans)
        spans = [(a, b, "match") for a, b in matched]
        spans += [(a, b, "lookup") for a, b in lookup_spans if b > a]
        spans.sort()
        merged: list[list] = []
        for a, b, source in spans:
            if merged and a <= merged[-1][1] + 1 and not self.text[merged[-1][1] : a].strip():
                last = merged[-1]
                last[1] = max(last[1], b)
                last[2].add(source)
            else:
                merged.append([a, b, {source}])
        out = []
        for a, b, sources in merged:
            if sources == {"lookup"} and len(self.text[a:b].strip()) < MIN_LOOKUP_CHARS:
                continue
            a, b = self._trim(a, b)
            if b <= a:
                continue
            source = "+".join(s for s in ("lookup", "match") if s in sources)
            out.append(Citation(a, b, self.page_of(a), self.page_of(b - 1), self.text[a:b], source))
        return out

    def _trim(self, a: int, b: int) -> tuple[int, int]:
        while a < b and self.text[a].isspace():
            a += 1
        while b > a and self.text[b - 1].isspace():
            b -= 1
        return a, b

    def _match(self, answer: str, hints: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
        """Greedy longest runs of answer words found consecutively in the document, as char ranges."""
        n, doc = self.min_words, self.ids
        words = [self.vocab.get(m.group().casefold(), -1) for m in _WORD.finditer(answer)]
        anchors = [a for a, _ in hints]
        out: list[tuple[int, int]] = []
        i = 0
        while i + n <= len(words):
            candidates = self.grams.get(tuple(words[i : i + n]))
            if not candidates or len(candidates) > MAX_CANDIDATES:
                i += 1
                continue
            near = [int(self.ends[out[-1][1] - 1])] if out else []
            best, best_len, best_dist = -1, 0, 0
            for c in candidates:
                length = n
                while i + length < len(words) and c + length < len(doc) and doc[c + length] == words[i + length]:
                    length += 1
                pos = int(self.starts[c])
                dist = min((abs(pos - h) for h in anchors + near), default=0)
                if length > best_len or (length == best_len and dist < best_dist):
                    best, best_len, best_dist = c, length, dist
            out.append((best, best + best_len))
            i += best_len
        return [(int(self.starts[s]), int(self.ends[e - 1])) for s, e in out]
