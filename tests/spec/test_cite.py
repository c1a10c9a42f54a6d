"""Citations: answer n-grams matched against the document, merged with accepted lookup copies."""

from __future__ import annotations

import numpy as np

from spec.cite import CitationIndex, TokenOffsets

DOC = (
    "Chapter one. The quick brown fox jumps over the lazy dog near the river bank.\n"
    "Nothing else happens here at all.\f"
    "Chapter two. The quick brown fox jumps over the lazy dog again, far from the\n"
    "river. A completely different sentence closes the second page."
)
PAGE2 = DOC.index("Chapter two")


def index() -> CitationIndex:
    return CitationIndex(DOC, [0, PAGE2], min_words=5)


def test_quote_is_cited_with_offsets_and_page():
    (c,) = index().cite("It says: a completely different sentence closes the second page!")
    assert c.text == "A completely different sentence closes the second page"
    assert DOC[c.start : c.end] == c.text
    assert (c.page, c.page_end, c.source) == (2, 2, "match")


def test_rewrapped_and_recased_quote_still_matches():
    (c,) = index().cite("FAR FROM THE river. a completely")
    assert c.text == "far from the\nriver. A completely"


def test_short_overlaps_are_not_citations():
    assert index().cite("The fox is quick and the dog is lazy.") == []


def test_repeated_passage_takes_the_occurrence_near_the_lookup_copy():
    quote = "the quick brown fox jumps over the lazy dog"
    first, second = DOC.index("The quick"), DOC.index("The quick", PAGE2)
    (c,) = index().cite(quote, [(second, second + 9)])
    assert (c.start, c.page, c.source) == (second, 2, "lookup+match")
    (c,) = index().cite(quote)
    assert (c.start, c.page, c.source) == (first, 1, "match")  # no hint: the first occurrence


def test_lookup_copy_alone_is_cited_when_long_enough():
    a = DOC.index("Nothing else")
    (c,) = index().cite("unrelated words", [(a, a + len("Nothing else happens"))])
    assert (c.text, c.source, c.page) == ("Nothing else happens", "lookup", 1)
    assert index().cite("unrelated words", [(a, a + 7)]) == []  # "Nothing": too short to be a citation


def test_citation_spanning_a_page_break_names_both_pages():
    (c,) = index().cite("Nothing else happens here at all. Chapter two. The quick")
    assert (c.page, c.page_end) == (1, 2)


def test_a_quote_cut_by_a_page_break_keeps_the_words_on_the_other_page():
    """Issue 49: a quote-first answer's sentence over a page break lost the words on the second page (the
    quote index ends a sentence at a line break, and the page separator is one). The cut is a boundary
    of the citation's pages, not of its words; a sentence that ends at the page's end stays on it."""
    one = "The lighthouse stood on the point. The last keeper of the Gull Point lighthouse was Thomas"
    two = "Harrow, who kept it until 1931. After him it went dark.\nNotes follow."
    text = one + "\n\n" + two
    cited = CitationIndex(text, [0, len(one) + 2])
    for a, b in ((text.index("The last"), len(one)), (text.index("Harrow"), text.index("1931.") + 5)):
        c = cited.quote(a, b)
        assert c.text == "The last keeper of the Gull Point lighthouse was Thomas\n\nHarrow, who kept it until 1931."
        assert (c.page, c.page_end) == (1, 2) and text[c.start : c.end] == c.text
    assert cited.quote(0, text.index("point.") + 6).text == "The lighthouse stood on the point."
    after = cited.quote(text.index("After"), text.index("dark.") + 5)
    assert (after.text, after.page, after.page_end) == ("After him it went dark.", 2, 2)
    ends = CitationIndex("It ended here.\n\nA new page begins.", [0, 16])
    assert ends.quote(0, 14).text == "It ended here." and ends.quote(16, 34).text == "A new page begins."


def test_token_offsets_follow_utf8_pieces():
    text = "héllo wörld"
    pieces = {1: b"<s>", 2: "hé".encode(), 3: b"llo", 4: " wö".encode(), 5: b"rld", 6: b"\n"}
    prefix = np.array([1, 2, 3, 4, 5, 6], dtype=np.int32)
    offsets = TokenOffsets(prefix, n_head=1, n_doc=4, text=text, piece=pieces.__getitem__)
    assert offsets.chars(1, 3) == (0, 5)  # "héllo"
    assert offsets.chars(3, 5) == (5, 11)  # " wörld"
    assert text[slice(*offsets.chars(4, 5))] == "rld"
    assert offsets.chars(0, 6) == (0, 11)


def test_token_offsets_absorb_a_leading_space_the_tokenizer_adds():
    text = "abc def"
    pieces = {1: b" abc", 2: b" def"}
    offsets = TokenOffsets(np.array([1, 2], dtype=np.int32), 0, 2, text, pieces.__getitem__)
    assert text[slice(*offsets.chars(1, 2))] == " def"
