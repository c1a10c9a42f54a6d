"""The sample document a new user can try (samples/make_sample.py; issue 39 item 13: no DOCX or EPUB
sample, and no sample document in the repository at all)."""

from __future__ import annotations

import importlib.util

from ingest.extract import extract
from testkit.live import ROOT

SAMPLE = ROOT / "samples" / "harbour-guide.docx"


def _script():
    spec = importlib.util.spec_from_file_location("make_sample", ROOT / "samples" / "make_sample.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_sample_is_the_script_s_output():
    script = _script()
    assert SAMPLE.read_bytes() == script.docx_bytes(), "run `python samples/make_sample.py` and commit the result"
    assert script.docx_bytes() == script.docx_bytes()  # the same bytes every time: fixed ZIP timestamps


def test_docqa_reads_the_sample_as_a_word_document_with_its_headings():
    extracted = extract(SAMPLE.read_bytes())
    assert extracted.kind == "docx" and not extracted.warnings, extracted.warnings
    text = extracted.text
    assert "# The ferry to Morrow" in text and "# The harbour museum" in text
    assert "leaves Pier 2 for Morrow at 07:40 and 16:15 every day" in text
    assert 1_000 < len(text) < 4_000  # a few seconds' read even with the default model
