"""The token budget before full tokenization (ingest/budget.py) and parts of uploads (ingest/cut.py),
on the embedded model's tokenizer and real books from ../shared/cases."""

from __future__ import annotations

import pytest

from ingest.budget import Budget, count_leading, pieces
from ingest.cut import Cut, OutsideDocument, apply
from ingest.errors import DocumentTooLong
from ingest.extract import ExtractedText, extract
from ingest.pipeline import prepare
from ingest.prompt import plain_layout

AROUND = "text/gutenberg/around-the-world-in-80-days-pg103.txt"
GEOTOPO = "pdf/sample-files/009-pdflatex-geotopo/GeoTopo-komprimiert.pdf"


class Spy:
    """The model's tokenizer, counting the characters it was given (what counting costs)."""

    def __init__(self, model) -> None:
        self.model, self.chars, self.calls = model, 0, 0
        self.add_bos, self.bos, self.chat_template = model.add_bos, model.bos, model.chat_template

    def tokenize(self, text: str, *, parse_special: bool, add_bos: bool = False):
        self.chars += len(text)
        self.calls += 1
        return self.model.tokenize(text, parse_special=parse_special, add_bos=add_bos)


@pytest.mark.parametrize(
    "text, size, spans",
    [
        ("aaa bbb ccc", 5, [(0, 4), (4, 8), (8, 11)]),  # cut after the last space in each window
        ("aaaaaaaaaa", 4, [(0, 4), (4, 8), (8, 10)]),  # no whitespace: cut hard at the size
        ("ab\ncd ef", 6, [(0, 6), (6, 8)]),  # the later of a newline and a space wins
        ("", 4, []),  # nothing to count
    ],
)
def test_pieces_cover_the_text_and_cut_after_whitespace(text, size, spans):
    assert list(pieces(text, size=size)) == spans
    assert list(pieces("xx" + text + "yy", 2, 2 + len(text), size)) == [(i + 2, j + 2) for i, j in spans]  # in place


def test_an_over_budget_book_is_refused_after_tokenizing_about_the_budget(cases, gemma):
    """A 90k-token book (and the same book x150, 57 MB) against a 7,168-token budget: counting stops
    past the budget, so the work and the memory are the budget's, not the file's."""
    text = (cases / AROUND).read_text(encoding="utf-8-sig")
    budget = Budget(limit=7168, n_ctx=8192, n_ctx_train=32768)
    for copies in (1, 150):
        spy = Spy(gemma)
        with pytest.raises(DocumentTooLong) as err:
            prepare(ExtractedText(text * copies), plain_layout(gemma.add_bos), spy, budget)
        exc = err.value
        assert spy.chars < 60_000, f"tokenized {spy.chars} characters of {len(text) * copies}"
        assert exc.estimated and 70_000 * copies < exc.n_tokens < 120_000 * copies  # ~90k per copy
        assert exc.fits["chars"][0] == 0 and 20_000 < exc.fits["chars"][1] < 40_000
        assert "upload it again with chars=0-" in str(exc) and "limit is 7168 tokens" in str(exc)
        assert "larger DOCQA_N_CTX (the model is trained for up to 32768)" in str(exc)


def test_the_suggested_part_fits_and_one_page_more_does_not(cases, gemma):
    """A 117-page PDF: the 413 names the largest leading page range that fits; that range is
    accepted, one page more is not."""
    extracted = extract((cases / GEOTOPO).read_bytes())
    layout, budget = plain_layout(gemma.add_bos), Budget(limit=7168, n_ctx=8192, n_ctx_train=32768)
    with pytest.raises(DocumentTooLong) as err:
        prepare(extracted, layout, gemma, budget)
    first, last = err.value.fits["pages"]
    assert first == 1 and 3 <= last < 100
    assert f"pages 1-{last} fit: upload it again with pages=1-{last}" in str(err.value)
    part = prepare(apply(extracted, Cut("pages", 1, last)), layout, gemma, budget)
    assert len(part.prefix) <= 7168
    with pytest.raises(DocumentTooLong):
        prepare(apply(extracted, Cut("pages", 1, last + 2)), layout, gemma, budget)
    # A part that is itself too long: the suggestion starts at its first page.
    with pytest.raises(DocumentTooLong) as err:
        prepare(apply(extracted, Cut("pages", 20, 117)), layout, gemma, budget)
    assert err.value.fits["pages"][0] == 20


def test_when_n_ctx_is_the_trained_context_no_larger_n_ctx_is_suggested(gemma):
    budget = Budget(limit=31744, n_ctx=32768, n_ctx_train=32768)
    with pytest.raises(DocumentTooLong) as err:
        prepare(ExtractedText("word " * 200_000), plain_layout(gemma.add_bos), gemma, budget)
    message = str(err.value)
    assert "larger DOCQA_N_CTX" not in message
    assert "serve a model with a longer context" in message and "32768" in message


def test_count_is_exact_for_a_document_within_budget(gemma):
    text = "The misfits. The rebels. The troublemakers. " * 40
    count = count_leading(ExtractedText(text), gemma, room=10_000)
    whole = len(gemma.tokenize(text, parse_special=False))
    assert count.complete and abs(count.n_tokens - whole) <= 1
    assert count.page_tokens == [count.n_tokens]


PAGED = ExtractedText(
    "page one.\n\npage two.\n\npage three.",
    page_starts=[0, 11, 22],
    kind="pdf",
    warnings=[{"page": 2, "message": "garbled"}, {"page": 3, "message": "empty"}],
)


@pytest.mark.parametrize(
    "cut, text, page_starts, first_page, warned, spec",
    [
        # pages keep their numbers, their warnings, and nothing of the others
        (Cut("pages", 2, 3), "page two.\n\npage three.", [0, 11], 2, [2, 3], "pages=2-3"),
        (Cut("pages", 2, 2), "page two.", [0], 2, [2], "pages=2-2"),
        # an end past the last page is clipped to it
        (Cut("pages", 3, 9), "page three.", [0], 3, [3], "pages=3-3"),
        # characters: the pages they touch, numbered as in the upload
        (Cut("chars", 5, 16), "one.\n\npage", [0, 6], 1, [2], "chars=5-15"),
        (Cut("chars", 12, 99), "age two.\n\npage three.", [0, 10], 2, [2, 3], "chars=12-33"),
    ],
)
def test_a_part_keeps_its_page_numbers(cut, text, page_starts, first_page, warned, spec):
    part = apply(PAGED, cut)
    assert (part.text, part.page_starts, part.first_page, part.cut) == (text, page_starts, first_page, spec)
    assert [w["page"] for w in part.warnings] == warned
    assert part.page_of(0) == first_page and part.page_of(len(text) - 1) == first_page + len(page_starts) - 1
    assert Cut.from_spec(spec).unit == cut.unit


@pytest.mark.parametrize(
    "pages, chars, words",
    [
        ("5-", None, "write it as pages=1-80"),
        ("0-3", None, "pages count from 1"),
        ("9-5", None, "must not run backwards"),
        (None, "10-10", "the end must be past the start"),
        ("1-2", "0-9", "either pages or chars"),
    ],
)
def test_bad_ranges_say_how_to_write_them(pages, chars, words):
    with pytest.raises(ValueError, match=words):
        Cut.parse(pages, chars)


def test_a_range_past_the_end_is_refused_with_the_size():
    with pytest.raises(OutsideDocument, match="the document has 3 page"):
        apply(PAGED, Cut("pages", 4, 6))
    with pytest.raises(OutsideDocument, match="33 characters"):
        apply(PAGED, Cut("chars", 40, 50))
    assert Cut.parse("7", None) == Cut("pages", 7, 7) and Cut.parse(None, None) is None
