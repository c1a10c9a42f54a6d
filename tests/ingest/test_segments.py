"""Splitting a long document into segments (ingest/segments.py) and ranking them for a question
(store/index.py): table tests with words as tokens, then the embedded model's tokenizer on a
Gutenberg novel from ../shared/cases."""

from __future__ import annotations

import numpy as np
import pytest

from ingest.budget import Budget
from ingest.extract import ExtractedText
from ingest.pipeline import Segmenting, prepare
from ingest.prompt import plain_layout
from ingest.segments import PAGE, PARAGRAPH, PIECE, SENTENCE, cuts, key, parse_key, plan, split
from store import index

AROUND = "text/gutenberg/around-the-world-in-80-days-pg103.txt"


def words(text: str):
    """A token counter for plan(): one token per word of ``text[a:b]``."""
    return lambda a, b: len(text[a:b].split())


def test_cuts_mark_pages_paragraphs_and_pieces():
    text = "one two\n\nthree\n\n\nfour. Five" + " x" * 1500  # the last sentence is over PIECE_CHARS
    bounds = cuts(text, [0, 9])
    assert bounds[0] == (0, PAGE) and bounds[-1] == (len(text), PAGE)
    assert (9, PAGE) in bounds  # a page start that is also a paragraph start stays a page start
    assert (17, PARAGRAPH) in bounds  # after a run of blank lines, at the next text
    assert (23, SENTENCE) in bounds  # after ". ", at the next word
    assert any(s == PIECE for _, s in bounds)  # the long paragraph is cut after whitespace
    assert [o for o, _ in bounds] == sorted({o for o, _ in bounds})


@pytest.mark.parametrize(
    "units, room, overlap, spans",
    [
        # 6 one-word units, room 3, no overlap: back to back, each full
        ([PIECE] * 6, 3, 0, [(0, 3), (3, 6)]),
        # overlap 1: the next span starts one unit before the previous end
        ([PIECE] * 6, 3, 1, [(0, 3), (2, 5), (4, 6)]),
        # a page start within the last quarter of the room wins over a later piece cut
        ([PIECE, PIECE, PIECE, PAGE, PIECE, PIECE, PIECE, PIECE], 4, 0, [(0, 3), (3, 7), (7, 8)]),
        # but not one below FILL of the room: the span would be too short
        ([PIECE, PAGE, PIECE, PIECE, PIECE, PIECE], 4, 0, [(0, 4), (4, 6)]),
        # everything fits: one span
        ([PIECE] * 3, 10, 2, [(0, 3)]),
    ],
)
def test_plan_cuts_at_the_strongest_boundary_near_the_end_with_overlap(units, room, overlap, spans):
    # unit i is the word at characters [2i, 2i + 2); strength of the cut before it from ``units``
    text = "w " * len(units)
    bounds = [(2 * i, s) for i, s in enumerate(units)] + [(len(text), PAGE)]
    got = plan(bounds, words(text), room, overlap)
    assert [(a // 2, b // 2) for a, b in got] == spans
    for a, b in got:
        assert len(text[a:b].split()) <= room  # each within the room


def test_plan_refuses_a_unit_larger_than_the_room():
    text = "a b c d"
    with pytest.raises(ValueError, match="no cut within 2 tokens"):
        plan([(0, PAGE), (len(text), PAGE)], words(text), 2, 0)


def test_keys_name_a_document_or_its_segment():
    assert key("abc", None) == "abc" and key("abc", 3) == "abc/3"
    assert parse_key("abc/3") == ("abc", 3) and parse_key("abc") == ("abc", None)


def test_a_novel_splits_into_segments_that_fit_overlap_and_cover_it(cases, gemma):
    """The 90k-token novel with an 8,192-token budget: every segment's exact prefix fits, neighbours
    share about the overlap, and together they cover the text."""
    text = (cases / AROUND).read_text(encoding="utf-8-sig")
    layout, limit, overlap = plain_layout(gemma.add_bos), 8192, 200
    segments, prefixes = split(ExtractedText(text), layout, gemma, limit, overlap)
    assert 10 <= len(segments) <= 16  # ~90k tokens at < 8k each
    assert segments[0].start == 0 and segments[-1].end == len(text)
    for s, p in zip(segments, prefixes, strict=True):
        assert len(p) == s.n_tokens <= limit
        assert s.n_tokens > 0.6 * limit or s is segments[-1]  # not cut needlessly short
        assert s.start == 0 or text[s.start - 1].isspace()  # whole words
    for prev, nxt in zip(segments, segments[1:], strict=False):
        assert prev.start < nxt.start <= prev.end  # overlapping or touching, always moving on
        shared = len(gemma.tokenize(text[nxt.start : prev.end], parse_special=False))
        assert 0 < shared <= overlap + 16
    second = segments[1]
    assert np.array_equal(prefixes[1], layout.document_prefix(gemma, text[second.start : second.end]))


def test_prepare_segments_only_when_asked(cases, gemma):
    text = (cases / AROUND).read_text(encoding="utf-8-sig")[:120_000]  # ~28k tokens
    budget = Budget(limit=12_000, n_ctx=12_288, n_ctx_train=32_768)
    prepared = prepare(ExtractedText(text), plain_layout(gemma.add_bos), gemma, budget, Segmenting(128, 8))
    assert len(prepared.prefix) == 0 and len(prepared.segments) == 3
    assert prepared.n_tokens == sum(len(p) for p in prepared.segment_prefixes)
    with pytest.raises(Exception, match="document_too_long|tokens"):  # more than max_segments: 413
        prepare(ExtractedText(text), plain_layout(gemma.add_bos), gemma, budget, Segmenting(128, 2))


def test_terms_drop_stopwords_and_repeats():
    assert index.terms("What is the name of the ship, and what is the ship's speed?") == ["name", "ship", "speed"]
    assert index.terms("Who was it?") == []  # only stopwords: nothing can locate an answer


def test_rank_orders_segments_by_bm25_and_matches_stems(tmp_path):
    texts = [
        "Phileas Fogg lived at Saville Row and played whist at the Reform Club.",
        "The steamer Mongolia sailed from Suez towards Bombay with Passepartout aboard.",
        "In Bombay the travellers bought an elephant to cross the forest to Allahabad.",
    ]
    index.build(tmp_path, texts)
    ranked = index.rank(tmp_path, "Where did they buy the elephants?")
    assert [i for i, _ in ranked] == [2]  # "elephants" -> "elephant", "buy" has no stem match to "bought"
    ranked = index.rank(tmp_path, "Which ship went to Bombay, elephant or not?")
    assert ranked[0][0] in (1, 2) and all(s > 0 for _, s in ranked)
    assert index.rank(tmp_path, "What colour was the zeppelin?") == []  # no term anywhere: not in it
    assert index.rank(tmp_path, "What was it?") == []


def test_chosen_takes_the_second_segment_only_when_close():
    assert index.chosen([], 0.8) == []
    assert index.chosen([(1, 5.0)], 0.8) == [1]
    assert index.chosen([(1, 5.0), (0, 4.0)], 0.8) == [1, 0]  # 4.0 >= 0.8 x 5.0
    assert index.chosen([(1, 5.0), (0, 3.9)], 0.8) == [1]
    assert index.chosen([(1, 5.0), (0, 5.0)], 0.0) == [1]  # ratio 0: never two


@pytest.mark.parametrize(
    "text",
    [
        "word " * 6000,  # no sentence punctuation, no line breaks: pieces only
        "".join(f"log line {i} value ok\n" for i in range(1500)),  # lines, no punctuation, no blank lines
    ],
)
def test_text_without_sentences_or_blank_lines_still_overlaps(text):
    # Issue 27: the only cuts were pieces of PIECE_CHARS (~500 tokens), none within a 100-token overlap.
    room, overlap = 1000, 100
    spans = plan(cuts(text, [0]), words(text), room, overlap)
    assert len(spans) > 3 and spans[0][0] == 0 and spans[-1][1] == len(text)
    count = words(text)
    for (a, b), (c, _) in zip(spans, spans[1:], strict=False):
        assert count(a, b) <= room
        assert a < c < b, "consecutive segments share text"
        assert 0 < count(c, b) <= overlap
