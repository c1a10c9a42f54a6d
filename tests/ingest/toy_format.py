"""A toy format for the tests that add one row to ingest/formats.py FORMATS: ``TOYDOC`` on the first
line, then pages of UTF-8 text separated by form feeds. Its sniff and reader are module-level
functions, so the extraction worker unpickles the row the server sends it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ingest import formats
from ingest.formats import Format, Probe, Read
from ingest.pdf import OcrJob

MAGIC = b"TOYDOC\n"


def is_toy(p: Probe) -> bool:
    return p.data.startswith(MAGIC)


def read_toy(data: bytes, password: str | None, ocr: OcrJob | None) -> Read:
    return Read(data[len(MAGIC) :].decode("utf-8").split("\f"), "utf-8")


TOY = Format("toy", is_toy, read_toy, (".toy",), "application/x-docqa-toy", "Toy")


@pytest.fixture
def toy_format(monkeypatch: pytest.MonkeyPatch) -> Iterator[Format]:
    """FORMATS with the toy row first (before text, which takes any text), for one test."""
    monkeypatch.setattr(formats, "FORMATS", (TOY, *formats.FORMATS))
    yield TOY
