"""The documents' settings (server/config/documents.py): OCR's (issue 30 item 2) from the environment."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ingest.ocr import OcrSettings
from server.config.settings import Settings


def test_ocr_settings_come_from_the_environment(monkeypatch):
    assert Settings().ocr_settings() == OcrSettings("auto", "eng", 60.0)
    monkeypatch.setenv("DOCQA_OCR", "force")
    monkeypatch.setenv("DOCQA_OCR_LANGUAGES", "eng+deu")
    monkeypatch.setenv("DOCQA_OCR_PAGE_TIMEOUT_S", "20")
    assert Settings().ocr_settings() == OcrSettings("force", "eng+deu", 20.0)


BAD = [("DOCQA_OCR", "sometimes"), ("DOCQA_OCR_LANGUAGES", "eng,deu"), ("DOCQA_OCR_LANGUAGES", ""),
       ("DOCQA_OCR_PAGE_TIMEOUT_S", "0")]  # fmt: skip


@pytest.mark.parametrize(("name", "value"), BAD)
def test_bad_ocr_settings_are_refused_at_start(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError, match=name.removeprefix("DOCQA_").lower()):
        Settings()
