"""OCR of one page (ingest/ocr.py): PDFium's bitmap as Tesseract reads it, on scans made here
(testkit/scans.py) whose words are known; what is missing and how to install it."""

from __future__ import annotations

import re

import pytest

from ingest.ocr import OcrSettings, PageOcr, install_command, unavailable
from testkit.scans import card_pdf, scanned_pdf

ENGLISH = (
    "The tenant shall pay the rent on the first working day of each month. Notice of termination must "
    "be given in writing three months in advance. I agree to these terms."
)


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def test_a_page_is_rendered_at_300_dpi_as_grey_pgm(tesseract):
    with PageOcr(scanned_pdf(["A page."], dpi=150), None, OcrSettings("auto")) as pages:
        pgm = pages.render(0)
    head, width, height, depth = pgm.split(b"\n", 3)[0], *pgm.split(b"\n")[1].split(), pgm.split(b"\n")[2]
    assert head == b"P5" and depth == b"255"
    assert (int(width), int(height)) == (round(8.27 * 300), round(11.69 * 300))  # A4 at 300 dpi, whatever the scan's
    assert len(pgm) == len(b"P5\n%s %s\n255\n" % (width, height)) + int(width) * int(height)


def test_an_english_page_is_read_word_for_word(tesseract):
    with PageOcr(card_pdf([ENGLISH]), None, OcrSettings("auto", "eng")) as pages:
        read = pages.read(0)
    assert _words(read) == _words(ENGLISH)  # the capital I too: "|" is out of Tesseract's alphabet


def test_a_noisy_scan_is_still_read(tesseract):
    with PageOcr(card_pdf([ENGLISH], noisy=True), None, OcrSettings("auto", "eng")) as pages:
        read = _words(pages.read(0))
    expected = _words(ENGLISH)
    assert sum(w in read for w in expected) >= 0.9 * len(expected)


def test_install_command_names_debian_packs():
    assert install_command("eng") == "apt-get install tesseract-ocr"
    assert install_command("eng+deu+chi_sim") == "apt-get install tesseract-ocr tesseract-ocr-deu tesseract-ocr-chi-sim"


def test_tesseract_missing_from_path_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH without tesseract: as on a machine without it
    why = unavailable("eng+deu")
    assert why is not None and "not installed" in why
    assert "apt-get install tesseract-ocr tesseract-ocr-deu" in why


def test_a_missing_language_pack_is_named(tesseract):
    why = unavailable("eng+zzz")  # no such pack is installed anywhere
    assert why is not None and "no language pack for zzz" in why and "apt-get install tesseract-ocr-zzz" in why
    assert unavailable(tesseract) is None


@pytest.mark.parametrize(("mode", "languages"), [("sometimes", "eng"), ("auto", "eng deu"), ("auto", "")])
def test_settings_are_checked(mode, languages):
    with pytest.raises(ValueError):
        OcrSettings(mode, languages)
