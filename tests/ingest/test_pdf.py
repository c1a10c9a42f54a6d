"""A PDF's pages (ingest/pdf.py): the text layer where there is one, OCR where there is none (issue
30 item 2), on scans made here (testkit/scans.py); the page numbers of a mixed PDF; what happens
when Tesseract is missing."""

from __future__ import annotations

import pytest

from ingest.errors import NoTextLayer, OcrUnavailable
from ingest.extract import extract
from ingest.ocr import OcrSettings
from ingest.pdf import OCR_NOTE, OPENED, OcrJob
from testkit.scans import CARD, card_pdf, mixed_pdf
from tests.ingest.samples import pdf

ENGLISH = "The lighthouse keeper counted forty ships in the harbour before the storm arrived at midnight."
GERMAN = (
    "Die Kündigungsfrist beträgt drei Monate. Größere Veränderungen bedürfen der Zustimmung beider "
    "Parteien. Die Straßenreinigung gehört zu den Nebenkosten."
)


def _auto(languages: str = "eng", **kw) -> OcrJob:
    return OcrJob(OcrSettings("auto", languages), **kw)


def test_a_scanned_english_page_is_read_by_ocr(tesseract):
    got = extract(card_pdf([ENGLISH]), ocr=_auto())
    assert "lighthouse keeper counted forty ships in the harbour" in got.text
    assert got.ocr_pages == [1]
    assert got.warnings == [{"page": 1, "message": OCR_NOTE}]


def test_a_german_scan_is_read_with_its_language_pack(tesseract):
    got = extract(card_pdf([GERMAN]), ocr=_auto("deu"))
    for word in ("Kündigungsfrist", "beträgt", "Größere", "Veränderungen", "bedürfen", "Straßenreinigung"):
        assert word in got.text, got.text


def test_a_mixed_pdf_keeps_its_page_numbers(tesseract):
    data = mixed_pdf(
        [("text", "Alpha is typed."), ("scan", "Bravo was scanned."), ("text", "Charlie is typed."), ("scan", ENGLISH)],
        pdf,
        inches=CARD,
    )
    got = extract(data, ocr=_auto())
    assert got.pages == 4 and got.ocr_pages == [2, 4]
    for word, page in (("Alpha", 1), ("Bravo", 2), ("Charlie", 3), ("lighthouse", 4)):
        assert got.page_of(got.text.index(word)) == page
    assert [w["page"] for w in got.warnings] == [2, 4]


def test_auto_leaves_text_pages_alone_and_force_reads_them_too(tesseract):
    data = pdf(["Delta is typed on the first page.", "Echo is typed on the second page."])
    assert extract(data, ocr=_auto()).ocr_pages == []
    forced = extract(data, ocr=OcrJob(OcrSettings("force")))
    assert forced.ocr_pages == [1, 2] and "Echo is typed on the second page." in forced.text


def test_a_page_of_garbage_text_goes_to_ocr(tesseract):
    """The existing garbage check (control characters where a font has no text mapping) sends a page to
    OCR; here nothing is drawn either, so OCR finds no words and the page says so."""
    data = pdf(["India is typed.", "\x01\x02\x03\x04" * 8])
    assert "unreadable characters" in extract(data).warnings[0]["message"]  # without OCR: flagged only
    got = extract(data, ocr=_auto())
    assert got.ocr_pages == [2] and got.text.strip() == "India is typed."
    assert got.warnings == [{"page": 2, "message": "no usable text layer, and OCR found no words there"}]


def test_off_refuses_a_scan_as_before(tesseract):
    with pytest.raises(NoTextLayer, match="no extractable text.*OCR is off") as refused:
        extract(card_pdf([ENGLISH]), ocr=OcrJob(OcrSettings("off")))
    assert not isinstance(refused.value, OcrUnavailable)


def test_ocr_reads_only_the_pages_asked_for(tesseract):
    got = extract(card_pdf(["Page one.", "Page two.", "Page three."]), ocr=_auto(pages=(2, 2)))
    assert got.ocr_pages == [2] and "Page two." in got.text and "Page one" not in got.text


def test_ocr_stops_past_the_character_limit(tesseract):
    got = extract(card_pdf([ENGLISH, ENGLISH, ENGLISH]), ocr=_auto(max_chars=50))
    assert got.ocr_pages == [1]
    assert [w["page"] for w in got.warnings if "more text than fits" in w["message"]] == [2, 3]


def test_progress_is_reported_page_by_page(tesseract):
    heard = []
    extract(card_pdf(["One.", "Two."]), ocr=_auto(progress=lambda done, total: heard.append((done, total))))
    assert heard == [(OPENED, 2), (0, 2), (1, 2), (2, 2)]  # opened with 2 pages, then OCR page by page


def test_without_tesseract_a_scan_gets_install_advice(scans, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH without tesseract: as on a machine without it
    with pytest.raises(OcrUnavailable, match="apt-get install tesseract-ocr tesseract-ocr-deu"):
        extract(card_pdf(["Anything."]), ocr=_auto("eng+deu"))


def test_without_tesseract_a_mixed_pdf_keeps_its_text_pages(scans, tmp_path, monkeypatch):
    data = mixed_pdf([("text", "Foxtrot is typed."), ("scan", "Golf was scanned.")], pdf, inches=CARD)
    monkeypatch.setenv("PATH", str(tmp_path))
    for mode in ("auto", "force"):
        got = extract(data, ocr=OcrJob(OcrSettings(mode)))
        assert got.text.strip() == "Foxtrot is typed." and got.pages == 2 and got.ocr_pages == []
        assert [w["page"] for w in got.warnings] == [2] and "apt-get install tesseract-ocr" in got.warnings[0][
            "message"
        ]
    assert extract(pdf(["Hotel is typed."]), ocr=_auto()).warnings == []  # a text PDF: nothing changes


def test_a_missing_language_pack_refuses_acard_pdf(tesseract):
    with pytest.raises(OcrUnavailable, match="no language pack for zzz.*apt-get install tesseract-ocr-zzz"):
        extract(card_pdf(["Anything."]), ocr=_auto("eng+zzz"))


def test_a_page_without_words_says_so(tesseract, cases):
    data = (cases / "pdf/sample-files/007-imagemagick-images/imagemagick-images.pdf").read_bytes()  # PDF-34
    got = extract(data, ocr=_auto())
    assert got.pages == 6 and "Background" in got.text
    assert all("OCR found no words" in w["message"] for w in got.warnings if w["page"] in got.ocr_pages)


def test_a_decompression_bomb_is_refused_not_rendered_for_ocr(tesseract, cases):
    # pypdf refuses the page over its decompression limits; OCR must not hand it to PDFium (no such
    # limit) instead: it was 202 and a 256 MiB inflate in the worker after OCR came in.
    from ingest.errors import UnreadablePdf

    data = (cases / "synthetic/flate-bomb-256MiB.pdf").read_bytes()
    with pytest.raises(UnreadablePdf, match="could not be read"):
        extract(data, ocr=_auto())
