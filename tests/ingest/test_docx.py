"""DOCX ``w:altChunk`` parts (issue 27; mammoth.js issues 71 and 424): HTML and MHT chunks are read
in their place in the body; a chunk that cannot be read is skipped with a warning."""

from __future__ import annotations

import pytest

from ingest.errors import EmptyDocument
from ingest.extract import extract
from tests.ingest.samples import docx, mht, paragraph

CHUNK_HTML = (
    "<!DOCTYPE html><html><head><title>Report</title></head><body><h2>Findings</h2>"
    "<p>The pump failed at 03:10 because the seal was worn.</p><ul><li>replace the seal</li></ul></body></html>"
)


def test_a_document_that_is_one_html_chunk_is_read():
    # html-docx-js writes the whole document this way: mammoth alone gave EmptyDocument (422).
    result = extract(docx('<w:altChunk r:id="htmlChunk"/>', {"afchunk.htm": CHUNK_HTML}, {"htmlChunk": "afchunk.htm"}))
    assert result.kind == "docx" and not result.warnings
    assert "## Findings" in result.text and "because the seal was worn." in result.text
    assert "- replace the seal" in result.text


def test_an_mht_chunk_is_read_through_its_html_part():
    html = "<html><body><p>Caf\u00e9 opening hours: nine to five, Monday to Saturday.</p></body></html>"
    result = extract(docx('<w:altChunk r:id="c1"/>', {"chunk.mht": mht(html)}, {"c1": "chunk.mht"}))
    assert "Caf\u00e9 opening hours: nine to five" in result.text


def test_chunks_keep_their_place_between_paragraphs():
    body = (
        paragraph("Before the chunk.")
        + '<w:altChunk r:id="c1"><w:altChunkPr/></w:altChunk>'
        + paragraph("After the chunk.")
    )
    text = extract(docx(body, {"c.htm": CHUNK_HTML}, {"c1": "c.htm"})).text
    assert text.index("Before the chunk.") < text.index("seal was worn") < text.index("After the chunk.")
    assert "docqa" not in text, "no marker is left"


def test_a_missing_chunk_is_skipped_with_a_warning_and_the_rest_is_read():
    body = paragraph("The body text is still here.") + '<w:altChunk r:id="gone"/>'
    result = extract(docx(body, {}, {"gone": "missing.htm"}))
    assert "The body text is still here." in result.text
    assert len(result.warnings) == 1 and "word/missing.htm" in result.warnings[0]["message"]


def test_an_rtf_chunk_is_named_in_the_warning():
    body = paragraph("Text.") + '<w:altChunk r:id="r"/>'
    result = extract(docx(body, {"x.rtf": rb"{\rtf1\ansi hello}"}, {"r": "x.rtf"}))
    assert "RTF" in result.warnings[0]["message"] and "Text." in result.text


def test_a_document_with_only_an_unreadable_chunk_is_empty_with_the_reason():
    with pytest.raises(EmptyDocument, match="missing from the file"):
        extract(docx('<w:altChunk r:id="gone"/>', {}, {"gone": "missing.htm"}))


def test_a_plain_text_chunk_is_read():
    result = extract(docx('<w:altChunk r:id="t"/>', {"notes.txt": "Plain notes in a chunk."}, {"t": "notes.txt"}))
    assert "Plain notes in a chunk." in result.text
