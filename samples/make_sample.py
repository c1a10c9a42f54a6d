"""Write samples/harbour-guide.docx, the small Word document a new user can try docqa on (README, quick
start): the text below, as a DOCX made with the standard library only (a ZIP of the four OOXML parts
Word needs: ECMA-376 Part 1, the content types, the package relationship, the document and its heading
styles). The ZIP's timestamps are fixed, so the same text always makes the same bytes:
tests/test_samples.py checks that the committed file is this script's output.

Run ``python samples/make_sample.py`` after changing the text. The text is written for this repository
(a made-up harbour town); nothing in it is copied from elsewhere.
"""

from __future__ import annotations

import io
import sys
import zipfile
from pathlib import Path
from xml.sax.saxutils import escape

OUT = Path(__file__).resolve().parent / "harbour-guide.docx"

#: (style, text): "Title", "Heading1" or "" (a plain paragraph).
TEXT: list[tuple[str, str]] = [
    ("Title", "Kelby Harbour: a visitor's guide"),
    (
        "",
        "Kelby is a small fishing town on a sheltered bay. This guide covers the lighthouse, the ferry, "
        "the harbour museum and where to eat. It is a sample document for trying docqa: ask it anything below.",
    ),
    ("Heading1", "The lighthouse"),
    (
        "",
        "The lighthouse on Gull Point was built in 1871 from granite quarried on the island of Morrow. "
        "Its light can be seen 18 nautical miles out to sea and flashes white twice every ten seconds. "
        "The last resident keeper, Ada Thorne, kept the light from 1952 until it was automated in 1989.",
    ),
    (
        "",
        "Visitors can climb the 112 steps to the lantern gallery from April to October, between 10:00 and 16:00. "
        "Children under eight must be carried or stay below.",
    ),
    ("Heading1", "The ferry to Morrow"),
    (
        "",
        "The ferry Saint Brendan leaves Pier 2 for Morrow at 07:40 and 16:15 every day, and also at 12:30 on "
        "Saturdays in summer. The crossing takes 35 minutes. A return ticket costs 9 euros for adults and "
        "4 euros for children; bicycles travel free, dogs must be kept on a lead.",
    ),
    (
        "",
        "In a storm warning the harbour master cancels the crossings; the notice is posted at the ticket office "
        "by 06:30.",
    ),
    ("Heading1", "The harbour museum"),
    (
        "",
        "The museum in the old net loft shows the town's fishing boats, a working foghorn and the logbooks of "
        "the lighthouse. It is open from Tuesday to Sunday, 10:00 to 17:00, and closed on Mondays. Entry is "
        "5 euros; on the first Sunday of each month it is free.",
    ),
    ("Heading1", "Where to eat"),
    (
        "",
        "The Tide Table on the quay serves fish caught the same morning; its smoked mackerel is the town's "
        "best-known dish. The Lantern Café by the lighthouse gate sells soup and cakes until 15:00.",
    ),
]

_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_PKG_REL = "http://schemas.openxmlformats.org/package/2006/relationships"
_MAIN = "application/vnd.openxmlformats-officedocument.wordprocessingml"

PARTS = {
    "[Content_Types].xml": (
        '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
        '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
        '<Default Extension="xml" ContentType="application/xml"/>'
        f'<Override PartName="/word/document.xml" ContentType="{_MAIN}.document.main+xml"/>'
        f'<Override PartName="/word/styles.xml" ContentType="{_MAIN}.styles+xml"/></Types>'
    ),
    "_rels/.rels": (
        f'<Relationships xmlns="{_PKG_REL}"><Relationship Id="rId1" Target="word/document.xml" '
        f'Type="{_REL}/officeDocument"/></Relationships>'
    ),
    "word/_rels/document.xml.rels": (
        f'<Relationships xmlns="{_PKG_REL}"><Relationship Id="rId1" Target="styles.xml" '
        f'Type="{_REL}/styles"/></Relationships>'
    ),
    "word/styles.xml": (
        f'<w:styles xmlns:w="{_W}">'
        '<w:style w:type="paragraph" w:styleId="Title"><w:name w:val="Title"/></w:style>'
        '<w:style w:type="paragraph" w:styleId="Heading1"><w:name w:val="heading 1"/></w:style></w:styles>'
    ),
}


def document_xml(text: list[tuple[str, str]]) -> str:
    """The body: one ``w:p`` per (style, text), with its style."""
    paragraphs = []
    for style, words in text:
        props = f'<w:pPr><w:pStyle w:val="{style}"/></w:pPr>' if style else ""
        paragraphs.append(f'<w:p>{props}<w:r><w:t xml:space="preserve">{escape(words)}</w:t></w:r></w:p>')
    return f'<w:document xmlns:w="{_W}"><w:body>{"".join(paragraphs)}</w:body></w:document>'


def docx_bytes(text: list[tuple[str, str]] = TEXT) -> bytes:
    """The DOCX, byte for byte the same for the same text."""
    out = io.BytesIO()
    parts = {**PARTS, "word/document.xml": document_xml(text)}
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name in ("[Content_Types].xml", "_rels/.rels", "word/document.xml", "word/_rels/document.xml.rels",
                     "word/styles.xml"):  # fmt: skip
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n' + parts[name])
    return out.getvalue()


if __name__ == "__main__":
    OUT.write_bytes(docx_bytes())
    sys.stderr.write(f"wrote {OUT} ({OUT.stat().st_size:,} bytes)\n")
