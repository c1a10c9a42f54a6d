"""EPUB spines as older tools and damaged copies have them (issue 27): ``text/html`` chapters are
read, a manifest item missing from the ZIP costs at most its own chapter, and a book with no readable
chapter is EmptyDocument (422), never a 500."""

from __future__ import annotations

import pytest

from ingest.errors import EmptyDocument, UnreadableDocument
from ingest.extract import extract
from tests.ingest.samples import chapter, epub, with_members

XHTML, HTML = "application/xhtml+xml", "text/html"


def test_chapters_declared_text_html_are_read():
    # karpathy/reader3 PR 18: ebooklib lists only application/xhtml+xml items as documents.
    book = epub([
        ("one.html", HTML, chapter("One", "The lighthouse keeper counted ships.", xhtml=False)),
        ("two.html", HTML, chapter("Two", "Nobody came back from the reef.", xhtml=False)),
    ])  # fmt: skip
    result = extract(book)
    assert result.kind == "epub" and result.pages == 2 and not result.warnings
    assert "lighthouse keeper" in result.text and result.page_of(result.text.index("the reef")) == 2


def test_one_text_html_chapter_among_xhtml_ones_keeps_its_place():
    book = epub([
        ("a.xhtml", XHTML, chapter("A", "First chapter text.")),
        ("b.html", HTML, chapter("B", "Second chapter, declared as HTML.", xhtml=False)),
        ("c.xhtml", XHTML, chapter("C", "Third chapter text.")),
    ])  # fmt: skip
    result = extract(book)
    assert result.pages == 3
    assert result.page_of(result.text.index("declared as HTML")) == 2


def test_missing_stylesheet_and_image_are_no_reason_to_refuse():
    # ebooklib issue 281: one manifest item missing from the ZIP refused the whole book (KeyError).
    book = epub([
        ("style.css", "text/css", None),
        ("cover.jpg", "image/jpeg", None),
        ("a.xhtml", XHTML, chapter("A", "Every chapter is readable.")),
    ])  # fmt: skip
    result = extract(book)
    assert "Every chapter is readable." in result.text and not result.warnings


def test_a_missing_chapter_is_skipped_with_a_warning():
    book = epub([
        ("a.xhtml", XHTML, chapter("A", "Chapter one is here.")),
        ("b.xhtml", XHTML, None),
        ("c.xhtml", XHTML, chapter("C", "Chapter three is here.")),
    ])  # fmt: skip
    result = extract(book)
    assert result.pages == 2 and "Chapter three is here." in result.text
    assert len(result.warnings) == 1 and "OEBPS/b.xhtml" in result.warnings[0]["message"]
    assert result.warnings[0]["page"] == 2, "where the missing chapter would have been"


def test_a_book_whose_chapters_are_all_missing_is_empty_with_the_reason():
    book = epub([("a.xhtml", XHTML, None)])
    with pytest.raises(EmptyDocument, match="missing from the file"):
        extract(book)


@pytest.mark.parametrize(
    "items",
    [
        [],  # an empty spine: normalize_pages([]) raised ValueError (a 500)
        [("cover.jpg", "image/jpeg", b"\xff\xd8\xff\xe0")],  # only an image page
        [("a.xhtml", XHTML, "<html><body>   </body></html>")],  # a chapter without text
        # The only chapter is an XHTML page holding an image, as most covers are: it became a
        # document whose whole text was its <title> ("# Cover").
        [
            (
                "cover.xhtml",
                XHTML,
                '<?xml version="1.0"?><html xmlns="http://www.w3.org/1999/xhtml"><head><title>Cover</title></head>'
                '<body><div><img src="cover.jpg" alt=""/></div></body></html>',
            )
        ],
    ],
)
def test_a_book_with_no_pages_is_empty_document(items):
    spine = [h for h, _, _ in items]
    with pytest.raises(EmptyDocument):
        extract(epub(items, spine=spine))


def test_a_cover_page_adds_no_title_page_to_a_book():
    cover = '<html><head><title>Cover</title></head><body><img src="c.jpg" alt=""/></body></html>'
    book = epub([("cover.xhtml", XHTML, cover), ("a.xhtml", XHTML, chapter("One", "The first chapter."))])
    result = extract(book)
    assert result.pages == 1 and "Cover" not in result.text and "The first chapter." in result.text


def test_hrefs_are_relative_to_the_package_and_url_encoded():
    book = epub([("Text/chapter%201.xhtml", XHTML, None)], opf_dir="book")
    book = with_members(book, {"book/Text/chapter 1.xhtml": chapter("One", "Spaces in file names are common.")})
    assert "Spaces in file names" in extract(book).text


@pytest.mark.parametrize(
    ("container", "words"),
    [
        (b"<container", "not well-formed"),
        (b'<container><rootfiles><rootfile full-path="nowhere.opf"/></rootfiles></container>', "no package document"),
        (b"<container><rootfiles/></container>", "names no package document"),
    ],
)
def test_a_broken_package_is_unreadable_with_the_reason(container, words):
    book = with_members(epub([("a.xhtml", XHTML, chapter("A", "text"))]), {"META-INF/container.xml": container})
    with pytest.raises(UnreadableDocument, match=words):
        extract(book)


def test_the_navigation_document_is_not_a_page_even_in_the_spine():
    # As ebooklib did (documents ingested before keep their page numbers on reingest).
    import io
    import zipfile

    toc = "<html><body><h1>Contents</h1><ol><li><a href='a.xhtml'>A</a></li></ol></body></html>"
    book = epub([("nav.xhtml", XHTML, toc), ("a.xhtml", XHTML, chapter("A", "Chapter text."))])
    assert extract(book).pages == 2, "a page with text, while it is not the nav document"
    opf = zipfile.ZipFile(io.BytesIO(book)).read("OEBPS/content.opf")
    opf = opf.replace(b'href="nav.xhtml"', b'properties="nav" href="nav.xhtml"')
    assert extract(with_members(book, {"OEBPS/content.opf": opf})).pages == 1
