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


WP = "http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing"
A = "http://schemas.openxmlformats.org/drawingml/2006/main"
WPS = "http://schemas.microsoft.com/office/word/2010/wordprocessingShape"
MC = "http://schemas.openxmlformats.org/markup-compatibility/2006"
V = "urn:schemas-microsoft-com:vml"


def _text_box(text: str, anchored: bool) -> str:
    """A DrawingML text box (``w:drawing`` → ``wps:txbx`` → ``w:txbxContent``) as Word writes one,
    anchored to its paragraph or inline in it."""
    shape = (
        f'<a:graphic xmlns:a="{A}"><a:graphicData uri="{WPS}"><wps:wsp xmlns:wps="{WPS}">'
        '<wps:cNvSpPr txBox="1"/><wps:spPr/>'
        f"<wps:txbx><w:txbxContent>{paragraph(text)}</w:txbxContent></wps:txbx><wps:bodyPr/></wps:wsp>"
        "</a:graphicData></a:graphic>"
    )
    if anchored:
        return (
            f'<w:drawing><wp:anchor xmlns:wp="{WP}" distT="0" distB="0" distL="0" distR="0" simplePos="0" '
            'relativeHeight="1" behindDoc="0" locked="0" layoutInCell="1" allowOverlap="1"><wp:simplePos x="0" y="0"/>'
            '<wp:positionH relativeFrom="column"><wp:posOffset>0</wp:posOffset></wp:positionH>'
            '<wp:positionV relativeFrom="paragraph"><wp:posOffset>0</wp:posOffset></wp:positionV>'
            '<wp:extent cx="914400" cy="914400"/><wp:wrapSquare wrapText="bothSides"/>'
            f'<wp:docPr id="1" name="Text Box 1"/>{shape}</wp:anchor></w:drawing>'
        )
    return (
        f'<w:drawing><wp:inline xmlns:wp="{WP}"><wp:extent cx="914400" cy="914400"/>'
        f'<wp:docPr id="2" name="Text Box 2"/>{shape}</wp:inline></w:drawing>'
    )


@pytest.mark.parametrize("anchored", [True, False])
def test_text_in_a_drawingml_text_box_is_read(anchored):
    """mammoth reads a ``w:drawing`` for its pictures only, so a text box's text was dropped without a
    warning (microsoft/markitdown pull request 2514 is the same class); the same box with a VML
    fallback was read."""
    box = _text_box("The pump room key hangs behind the blue door.", anchored)
    body = paragraph("Notes from the site visit.") + f"<w:p><w:r><w:t>See the box.</w:t></w:r><w:r>{box}</w:r></w:p>"
    body += paragraph("End of the notes.")
    text = extract(docx(body)).text
    assert "The pump room key hangs behind the blue door." in text, text
    assert text.index("Notes from the site visit.") < text.index("pump room key") < text.index("End of the notes.")


def test_a_text_box_with_a_vml_fallback_is_read_once():
    choice = _text_box("Read me once, from either form.", anchored=True)
    fallback = (
        f'<w:pict><v:shape xmlns:v="{V}"><v:textbox><w:txbxContent>{paragraph("Read me once, from either form.")}'
        "</w:txbxContent></v:textbox></v:shape></w:pict>"
    )
    box = (
        f'<mc:AlternateContent xmlns:mc="{MC}"><mc:Choice Requires="wps">{choice}</mc:Choice>'
        f"<mc:Fallback>{fallback}</mc:Fallback></mc:AlternateContent>"
    )
    text = extract(docx(f"<w:p><w:r>{box}</w:r></w:p>" + paragraph("After."))).text
    assert text.count("Read me once, from either form.") == 1, text


def _cell(text: str, span: int = 1, merge: str | None = None) -> str:
    """A table cell: ``span`` columns wide (w:gridSpan), ``merge`` "restart"/"continue" down rows (w:vMerge)."""
    props = (f'<w:gridSpan w:val="{span}"/>' if span > 1 else "") + (
        '<w:vMerge w:val="restart"/>' if merge == "restart" else "<w:vMerge/>" if merge else ""
    )
    return f"<w:tc><w:tcPr>{props}</w:tcPr>{paragraph(text)}</w:tc>"


def test_merged_table_cells_are_in_every_column_and_row_they_cover():
    """Issue 51: a value spanning columns (Word's merged cells, mammoth's colspan) or rows (rowspan)
    is given to each cell it covers, so a question about France finds its continent and currency."""
    rows = [
        [_cell(""), _cell("Indonesia"), _cell("Germany"), _cell("France")],
        [_cell("Continent"), _cell("Asia"), _cell("Europe", span=2)],
        [_cell("Money", merge="restart"), _cell("Rupia"), _cell("EUR", span=2)],
        [_cell("", merge="continue"), _cell("IDR"), _cell("EUR", span=2)],
    ]
    body = "<w:tbl>" + "".join("<w:tr>" + "".join(r) + "</w:tr>" for r in rows) + "</w:tbl>"
    text = extract(docx(body)).text
    assert "| Continent | Asia | Europe | Europe |" in text, text
    assert "| Money | Rupia | EUR | EUR |" in text and "| Money | IDR | EUR | EUR |" in text, text
