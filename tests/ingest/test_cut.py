"""A part of an upload by the labels printed on its pages (ingest/cut.py; issue 39 item 5: `--pages`
counted PDF pages while the README said "pages as printed"; GeoTopo's pages are labelled i, ii, iii,
1, 2, ..., so `--pages 1-6` gave its first six PDF pages)."""

from __future__ import annotations

import io

import pytest

from ingest import pdf
from ingest.cut import Cut, OutsideDocument, apply, label_runs
from ingest.extract import extract
from ingest.locate import Locator
from tests.ingest.samples import pdf as text_pdf

GEOTOPO = "pdf/sample-files/009-pdflatex-geotopo/GeoTopo-komprimiert.pdf"
PAGES = ["Preface one.", "Preface two.", "Preface three.", "Chapter one.", "Chapter two.", "Chapter three."]


def labelled_pdf() -> bytes:
    """Six pages labelled i, ii, iii, 1, 2, 3 (a book's front matter, then its body), made here."""
    from pypdf import PdfWriter

    writer = PdfWriter(clone_from=io.BytesIO(text_pdf(PAGES)))
    writer.set_page_label(0, 2, style="/r")
    writer.set_page_label(3, 5, style="/D", start=1)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_a_pdf_s_printed_labels_are_kept_where_they_differ_from_its_page_numbers(cases):
    extracted = extract(labelled_pdf())
    assert extracted.page_labels == ["i", "ii", "iii", "1", "2", "3"]
    assert extract(text_pdf(PAGES)).page_labels is None  # numbered 1..6: nothing to keep
    _, labels = pdf._open((cases / GEOTOPO).read_bytes(), None)  # the real book
    assert labels[:5] == ["i", "ii", "iii", "1", "2"] and label_runs(labels).startswith("i–iii, 1–")


def test_pages_by_label_a_range_with_a_roman_end_or_with_labels_set():
    extracted = extract(labelled_pdf())
    part = apply(extracted, Cut.parse("ii-2"))
    assert part.first_page == 2 and part.cut == "pages=2-5"  # stored by PDF page numbers
    assert part.text.startswith("Preface two.") and part.text.endswith("Chapter two.")
    printed = apply(extracted, Cut.parse("1-2", labels=True))  # printed 1-2 are PDF pages 4-5
    assert printed.first_page == 4 and printed.text == "Chapter one.\n\nChapter two."
    assert apply(extracted, Cut.parse("1-2")).text == "Preface one.\n\nPreface two."  # numbers: PDF pages
    assert Cut.parse("ii-2").spec == "labels=ii-2" and Cut.from_spec("labels=ii-2") == Cut.parse("ii-2")


def test_an_unknown_label_names_the_labels_the_pdf_has():
    with pytest.raises(OutsideDocument, match=r"no page labelled 'v'.*labelled i–iii, 1–3"):
        apply(extract(labelled_pdf()), Cut.parse("v-2"))
    with pytest.raises(OutsideDocument, match="no printed labels: write it as pages=1-"):
        apply(extract(text_pdf(PAGES)), Cut.parse("ii-3"))
    assert apply(extract(text_pdf(PAGES)), Cut.parse("2-3", labels=True)).first_page == 2  # numbers are its labels
    with pytest.raises(ValueError, match="pages=ii-3"):
        Cut.parse("a-b-c")


def test_citations_name_the_printed_label_and_the_pdf_page_where_they_differ():
    extracted = extract(labelled_pdf())
    where = Locator(extracted.text, "pdf", extracted.page_starts, 1, extracted.page_labels).where
    at = extracted.text.index
    assert where(at("Preface two."), at("Preface two.") + 5) == "p. ii (PDF p. 2)"
    assert where(at("Preface three."), at("Chapter one.") + 5) == "pp. iii–1 (PDF pp. 3–4)"
    plain = extract(text_pdf(PAGES))
    assert Locator(plain.text, "pdf", plain.page_starts, 1, plain.page_labels).where(0, 5) is None  # as before
