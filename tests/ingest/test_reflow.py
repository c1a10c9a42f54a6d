"""Table tests for the text rules (version 2): reflow, page furniture, the page map.

Each case gives input lines, the wrap width the document was measured at (None: not hard-wrapped),
the expected output lines and why. Cases that must NOT be joined are as important as those that must.
"""

from __future__ import annotations

import pytest

from ingest.furniture import strip_furniture
from ingest.normalize import PAGE_SEPARATOR, normalize_pages
from ingest.reflow import reflow_lines, wrap_width

W = 40  # wrap width of the toy documents below: lines are "full" from 32 characters on

VERSE = [
    "How doth the little crocodile improve",
    "His shining tail, and pour the waters",
    "Of the Nile on every scale!",
]

# fmt: off
JOINED = [
    (["The quick brown fox jumps over the lazy", "dog and runs away into the forest."],
     ["The quick brown fox jumps over the lazy dog and runs away into the forest."],
     "a full line continues on the next: one paragraph"),
    (["Lorem ipsum dolor sit amet, consectetuer adip-", "iscing elit."],
     ["Lorem ipsum dolor sit amet, consectetuer adipiscing elit."],
     "a word hyphenated at the line end before a lower-case letter is joined without the hyphen"),
    (["short line adip-", "iscing elit."], ["short line adipiscing elit."],
     "hyphenation is evidence of wrapping even on a short line"),
    (["The quick brown fox jumps over the lazy", "Dog of the Baskervilles, a novel by him."],
     ["The quick brown fox jumps over the lazy Dog of the Baskervilles, a novel by him."],
     "a capital after a full line that does not end a sentence is still the same paragraph"),
    (["- the quick brown fox jumps over the lazy", "  dog and runs away into the forest.", "- a second item"],
     ["- the quick brown fox jumps over the lazy dog and runs away into the forest.", "- a second item"],
     "a list item's indented continuation joins the item; the next item starts a line"),
    (["    The quick brown fox jumps over the", "lazy dog and runs away into the forest."],
     ["    The quick brown fox jumps over the lazy dog and runs away into the forest."],
     "a paragraph's first line may be indented more than its continuation"),
    (["The quick brown fox jumps over the lazy", "", "", "", "Next paragraph."],
     ["The quick brown fox jumps over the lazy", "", "Next paragraph."],
     "blank lines are paragraph breaks, and a run of them is one break"),
    (["trailing spaces go   ", "", "x"], ["trailing spaces go", "", "x"], "trailing whitespace is dropped"),
]

KEPT = [
    (["Dear Sir,", "I write to you about the dog."], ["Dear Sir,", "I write to you about the dog."],
     "a short line is a deliberate break: salutations, addresses, the end of a paragraph"),
    (["The quick brown fox jumps over the lazy", "- a list item follows here"],
     ["The quick brown fox jumps over the lazy", "- a list item follows here"], "a list item starts a line"),
    (["The quick brown fox jumps over the lazy", "2) the second step of the recipe"],
     ["The quick brown fox jumps over the lazy", "2) the second step of the recipe"], "numbered items too"),
    (["The quick brown fox jumps over the lazy", "(iv) the fourth condition holds"],
     ["The quick brown fox jumps over the lazy", "(iv) the fourth condition holds"], "roman-numbered items too"),
    (["# A heading that is quite long indeed", "Body text of the section begins here."],
     ["# A heading that is quite long indeed", "Body text of the section begins here."],
     "a Markdown heading is its own line"),
    (["The quick brown fox ran over the hill.", "Methods and Results"],
     ["The quick brown fox ran over the hill.", "Methods and Results"],
     "a short capitalised line without closing punctuation after a sentence end is a heading"),
    (["```", "def f(the_quick_brown_fox_jumps_over):", "    return lazy_dog", "```"],
     ["```", "def f(the_quick_brown_fox_jumps_over):", "    return lazy_dog", "```"],
     "fenced code is kept verbatim"),
    (["| name | value of the setting here |", "| ---- | ------------------------- |", "| a    | b |"],
     ["| name | value of the setting here |", "| ---- | ------------------------- |", "| a    | b |"],
     "Markdown table rows are kept"),
    (["Country     Population     Capital city", "Austria     8.9            Vienna"],
     ["Country     Population     Capital city", "Austria     8.9            Vienna"],
     "column gaps mark a table (or aligned code): kept"),
    (["The quick brown fox jumps over the lazy", "    indented verse line follows", "    and another"],
     ["The quick brown fox jumps over the lazy", "    indented verse line follows", "    and another"],
     "a change of indentation (verse, a quoted letter, code) is a break"),
    (VERSE, VERSE,
     "three or more lines that all start with a capital are verse (or a list of names)"),
    (["> The quick brown fox jumps over the lazy", "> dog and runs away into the forest."],
     ["> The quick brown fox jumps over the lazy", "> dog and runs away into the forest."],
     "block quotes are kept line by line"),
    (["The quick brown fox jumps over the lazy  ", "dog, after a Markdown hard break."],
     ["The quick brown fox jumps over the lazy", "dog, after a Markdown hard break."],
     "two trailing spaces are a Markdown hard break (HTML <br>)"),
    (["Title", "====="], ["Title", "====="], "a setext underline is not text to join"),
    (["The famous French writer and thinker Jean-", "Paul Sartre wrote it."],
     ["The famous French writer and thinker Jean-Paul Sartre wrote it."],
     "a line-end hyphen before a capital is the author's: joined with the hyphen kept"),
    (["Lines 10 to 12 of the table, pages 10-", "12 and the rest."],
     ["Lines 10 to 12 of the table, pages 10- 12 and the rest."],
     "a hyphen after a digit is no split word: a full line joins with a space"),
    (["An em dash at the end of the line --", "then more text follows here."],
     ["An em dash at the end of the line -- then more text follows here."],
     "a double hyphen is punctuation, never a split word; the full line joins with a space"),
]
# fmt: on


@pytest.mark.parametrize(("lines", "expected", "why"), JOINED + KEPT)
def test_reflow(lines, expected, why):
    assert reflow_lines(lines, W) == expected, why


def test_text_that_is_not_hard_wrapped_is_not_joined():
    # One paragraph per line, lengths spread widely: no wrap width, nothing joined but hyphens.
    lines = ["A" * 300 + " end.", "Second paragraph, short.", "x " * 149 + "x", "A short one."]
    assert wrap_width(lines) is None
    assert reflow_lines(lines, None) == lines


def test_wrap_width_of_hard_wrapped_text():
    lines = ["word " * 13 + "end", "word " * 12 + "ends", "word " * 13 + "x", "last line."]
    assert 65 <= wrap_width(lines) <= len(lines[0])  # 90th percentile of the lengths


def _pages(bodies: list[list[str]], top: str | None, numbers: bool) -> list[list[str]]:
    out = []
    for i, body in enumerate(bodies):
        page = ([top] if top else []) + body + ([str(i + 1)] if numbers else [])
        out.append(page)
    return out


BODIES = [
    ["Alice was beginning to get very tired", "of sitting by her sister on the bank,", "and of having nothing to do."],
    [
        "Once or twice she had peeped into the",
        "book her sister was reading, but it had",
        "no pictures or conversations in it.",
    ],
    [
        "So she was considering in her own mind",
        "whether the pleasure of making a",
        "daisy-chain would be worth the trouble.",
    ],
    [
        "There was nothing so very remarkable in",
        "that; nor did Alice think it so very",
        "much out of the way to hear the Rabbit.",
    ],
    [
        "In another moment down went Alice after",
        "it, never once considering how in the",
        "world she was to get out again.",
    ],
]


def test_running_header_and_page_numbers_are_dropped():
    pages = _pages(BODIES, "Journal of Toy Examples, Vol. 3", numbers=True)
    assert strip_furniture(pages) == BODIES


def test_header_with_page_label_is_dropped():
    # "12 1.1. TOPOLOGISCHE RÄUME": the number follows the page order, the text changes by chapter.
    pages = [[f"{i + 11} CHAPTER {'ONE' if i < 3 else 'TWO'}", *body] for i, body in enumerate(BODIES)]
    assert strip_furniture(pages) == BODIES


def test_a_line_with_the_page_number_that_appears_once_is_kept():
    """Issue 51: GeoTopo's contents page is printed page 1, and its first line "1 Topologische
    Grundbegriffe 2" starts with that number: it was dropped as a header. A running header is on
    several pages (numbers masked); a bare number always is."""
    pages = [["Contents", "1 Getting started 2", "2 The next steps 5"]]
    pages += [[f"{i + 2} CHAPTER ONE", *body] for i, body in enumerate(BODIES)]
    out = strip_furniture(pages)
    assert out[0] == pages[0] and out[1:] == BODIES


def test_furniture_needs_three_pages_and_never_empties_a_page():
    two = _pages(BODIES[:2], "Same title", numbers=True)
    assert strip_furniture(two) == two, "with two pages nothing repeats"
    labels = [["Background"], ["Background"], ["Background"], ["Background"]]
    assert strip_furniture(labels) == labels, "a page that is only the repeated line keeps it"


def test_a_line_repeated_in_the_body_is_kept():
    pages = [["Top", "Lorem ipsum.", "Middle line", "More text.", "Bottom"] for _ in range(4)]
    assert all("Middle line" in p for p in strip_furniture(pages)), "only the first/last two lines are edges"


def test_page_map_is_exact_after_reflow_and_page_joins():
    raw = [
        "Running Head\nThe quick brown fox jumps over the lazy\ndog and the story goes on and on with adip-\n1",
        "Running Head\niscing elit and more words to fill it up.\n\nNew paragraph here.\n2",
        "Running Head\nA page that starts a new paragraph here.\n3",
    ]
    text, starts = normalize_pages(raw, paged=True)
    assert "Running Head" not in text
    assert "adipiscing elit" in text, "a word split across the page break is joined"
    assert text[starts[1] :].startswith("iscing elit"), "page 2 starts where its text starts"
    assert text[starts[2] - len(PAGE_SEPARATOR) : starts[2]] == PAGE_SEPARATOR
    assert text[starts[2] :].startswith("A page that starts"), "a capital after a page break starts a paragraph"


def test_rules_version_1_is_the_old_text():
    raw = ["line one\nline two adip-\niscing\n", "page two"]
    text, starts = normalize_pages(raw, paged=True, rules=1)
    assert text == "line one\nline two adip-\niscing\n" + PAGE_SEPARATOR + "page two"
    assert starts == [0, len(raw[0]) + len(PAGE_SEPARATOR)]
    with pytest.raises(ValueError, match="unknown text rules"):
        normalize_pages(raw, paged=True, rules=99)


def test_geotopos_contents_page_keeps_its_first_entry(cases):
    """The case of issue 51, on GeoTopo's first 12 pages: the contents page keeps "1 Topologische
    Grundbegriffe 2", and the running headers of the pages after it ("4 1.1. TOPOLOGISCHE RÄUME") go."""
    from ingest.extract import extract
    from tests.ingest.samples import first_pages

    text = extract(first_pages(cases / "pdf/sample-files/009-pdflatex-geotopo/GeoTopo-komprimiert.pdf", 12)).text
    assert "Inhaltsverzeichnis\n1 Topologische Grundbegriffe 2\n1.1 Topologische Räume" in text, text[:2000]
    assert "1.1. TOPOLOGISCHE RÄUME" not in text


PROSE = [f"{'word ' * 12}line {i} of a paragraph wrapped at the page's own width" for i in range(9)] + ["end."]
FORMULAS = ["x = 1", "(i) U ∈ T", "y2 = f(x)", "[", "i∈I", "Ui ∈ T", "Lemma 2", "q.e.d."] * 3


def test_a_wrapped_page_among_formula_pages_is_reflowed_by_itself():
    """The whole does not look wrapped (short formula lines outnumber prose), so each printed page is
    measured alone: the prose page is one paragraph, the formula pages keep every line."""
    pages = [FORMULAS, PROSE, FORMULAS]
    assert wrap_width([line for page in pages for line in [*page, ""]]) is None
    text, _ = normalize_pages(["\n".join(p) for p in pages], paged=True)
    assert " ".join(PROSE) in text
    assert "\n".join(FORMULAS[:8]) in text


def test_a_page_with_few_lines_is_not_measured_alone():
    short = PROSE[:4]  # 3 lines that go on: too few to tell a wrapped page from short paragraphs
    text, _ = normalize_pages(["\n".join(p) for p in (FORMULAS, short, FORMULAS)], paged=True)
    assert "\n".join(short) in text


def test_geotopos_preface_is_reflowed_though_the_script_is_mostly_formulas(cases):
    """The new-user trial's quote "Herrlich für einige Korrekturvorschläge und einen" was a printed line:
    GeoTopo as a whole does not pass the wrap test, its preface page does."""
    from ingest.extract import extract
    from tests.ingest.samples import first_pages

    text = extract(first_pages(cases / "pdf/sample-files/009-pdflatex-geotopo/GeoTopo-komprimiert.pdf", 12)).text
    assert "für einige Korrekturvorschläge und einen gut strukturierten Tafelanschrieb danken" in text
    assert "Es beinhaltet die Mitschriften aus der Vorlesung von Prof. Dr. Herrlich" in text
