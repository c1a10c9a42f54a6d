"""DOCX, EPUB and HTML extraction on the real sample files in tests/ingest/files (see SOURCES.md
there), text encodings, NUL bytes, and the ZIP/XML bombs that must fail inside the worker."""

from __future__ import annotations

import codecs
import io
import zipfile
from pathlib import Path

import pytest

from ingest.encoding import decode_text
from ingest.errors import EmptyDocument, UnreadableDocument, UnsupportedType
from ingest.extract import extract, sniff
from ingest.folder import counts
from ingest.formats import FORMATS, accepted, suffixes
from ingest.worker import ExtractionWorker
from testkit.office import docx_with, zip_of
from tests.ingest.toy_format import MAGIC, toy_format  # noqa: F401  (a fixture)

FILES = Path(__file__).resolve().parent / "files"


def _read(name: str) -> bytes:
    return (FILES / name).read_bytes()


def test_docx_keeps_headings_and_paragraphs_without_markup():
    result = extract(_read("alice-ch1.docx"))
    assert result.kind == "docx" and result.pages == 1 and result.encoding is None
    assert result.text.startswith("# CHAPTER I. Down the Rabbit-Hole\n\nAlice was beginning to get very tired")
    # One paragraph is one line; the italics of "_very_" in the source leave no markers behind.
    assert "\nThere was nothing so very remarkable in that; nor did Alice think it so very much out of" in result.text
    assert "*" not in result.text and "_very_" not in result.text


def test_docx_table_becomes_rows_and_lists_survive():
    text = extract(_read("settings-table.docx")).text
    assert "| variable | default | meaning |" in text
    assert "| DOCQA_N_CTX | 32768 | context tokens (document + question + answer) |" in text
    assert "\n1. Pick the context size first: it bounds the longest document.\n2. Then the threads:" in text
    assert "\n- A quantized V cache needs flash attention.\n- Unknown settings" in text
    assert "## Context and threads" in text and "prefix DOCQA_." in text, "no Markdown escapes in the text"


def test_epub_pages_are_spine_documents_in_reading_order():
    result = extract(_read("alice-ch1-2.epub"))
    assert result.kind == "epub" and result.pages == 3  # title page, chapter I, chapter II
    chapters = [result.text[s:] for s in result.page_starts[1:]]
    assert chapters[0].startswith("# CHAPTER I. Down the Rabbit-Hole")
    assert chapters[1].startswith("# CHAPTER II. The Pool of Tears")
    assert result.page_of(result.text.index("Curiouser and curiouser!")) == 3
    # The poem keeps its lines (HTML <br>), the prose around it is one line per paragraph.
    assert "How doth the little crocodile\n" in result.text and "Improve his shining tail,\n" in result.text


def test_html_main_content_only():
    data = _read("rustdoc-how-to-write-documentation.html")
    assert sniff(data) == "html"
    result = extract(data)
    assert result.kind == "html" and result.encoding == "utf-8"
    assert result.text.startswith("# How to write documentation\n\nGood documentation is not natural.")
    for chrome in ("localStorage", "Keyboard shortcuts", "default_dark_theme", "Press"):
        assert chrome not in result.text, f"{chrome!r} is page chrome, not content"
    # Source line breaks inside a paragraph are spaces; code blocks stay fenced and verbatim.
    assert "There are opposing goals that make writing good documentation difficult." in result.text
    assert '```\n/// documentation\n///\n/// <div class="warning">A big warning!</div>' in result.text


def test_html_meta_charset_is_honoured():
    page = '<!DOCTYPE html><html><head><meta charset="windows-1252"><title>T</title></head>'
    data = (page + "<body><h1>Menu</h1><p>Café crème, 3 €.</p></body></html>").encode("cp1252")
    result = extract(data)
    assert result.encoding == "windows-1252"
    assert result.text == "# Menu\n\nCafé crème, 3 €."


def test_hard_wrapped_markdown_is_reflowed_into_paragraphs():
    raw = _read("around-the-world-opening.md").decode()
    result = extract(_read("around-the-world-opening.md"))
    assert result.kind == "text" and result.encoding == "utf-8"
    assert result.text.startswith("# Around the World in Eighty Days\n\n## Chapter I\n\nMr. Phileas Fogg lived,")
    paragraphs = result.text.split("\n\n")
    assert len(paragraphs) == raw.count("\n\n") + 1, "every paragraph break is kept"
    assert all("\n" not in p for p in paragraphs), "and every paragraph is one line"
    assert " ".join(raw.split()) == " ".join(result.text.split()), "only line breaks changed"


def test_markdown_with_leading_html_is_still_text():
    assert sniff(b'<div align="center">logo</div>\n\n# Title\n\nBody.') == "text"
    assert sniff(b"<?xml version='1.0'?>\n<!DOCTYPE html>\n<html><body>x</body></html>") == "html"


# (bytes, codec the detector must choose, why)
ENCODED = [
    (b"CAF\xc9 CR\xc8ME", "cp1252", "short upper-case Latin-1: charset-normalizer alone reads it as Cyrillic"),
    ("Le café crème était très bon, à côté de la forêt. Noël, naïve, garçon.".encode("cp1252"), "cp1252", "French"),
    ("Ärger über Öl: Grüße aus München – „Zitat“ kostet 5 €.".encode("cp1252"), "cp1252", "German, 1252 quotes/€"),
    (codecs.BOM_UTF16_BE + "Grüße, 世界".encode("utf-16-be"), "utf-16", "UTF-16 BE with a BOM"),
    (codecs.BOM_UTF32_LE + "Grüße, 世界".encode("utf-32-le"), "utf-32", "UTF-32 LE BOM (starts like UTF-16 LE's)"),
    (codecs.BOM_UTF8 + "Grüße".encode(), "utf-8-sig", "UTF-8 with a BOM"),
    ("Grüße, 世界".encode(), "utf-8", "UTF-8 without a BOM"),
    (
        "今日はいい天気ですね。私は東京に住んでいます。日本語の文章を書いています。".encode("shift_jis"),
        "cp932",
        "Shift_JIS",
    ),
    ("这是一个简单的中文句子，用于测试编码检测。我们今天去公园散步。".encode("gb18030"), "gb18030", "GB18030"),
    ("這是一個簡單的中文句子，用於測試編碼檢測。我們今天去公園散步。".encode("big5"), "big5", "Big5"),
    (
        "이것은 인코딩 감지를 위한 간단한 한국어 문장입니다. 우리는 오늘 공원에 갑니다.".encode("euc_kr"),
        "cp949",
        "EUC-KR",
    ),
]


@pytest.mark.parametrize(("data", "encoding", "why"), ENCODED)
def test_encodings(data, encoding, why):
    decoded = decode_text(data)
    assert decoded.encoding == encoding, why
    assert "\ufffd" not in decoded.text and decoded.text == data.decode(encoding), why


def test_latin1_upload_keeps_its_accents():
    result = extract(b"CAF\xc9 CR\xc8ME\n")
    assert result.text == "CAFÉ CRÈME" and result.encoding == "cp1252"


def test_stray_nul_bytes_are_dropped_not_refused():
    data = "Grüße aus München.\n".encode() * 50
    data = data[:100] + b"\x00" + data[100:400] + b"\x00\x00" + data[400:]
    decoded = decode_text(data)
    assert decoded.dropped_nuls == 3 and decoded.encoding == "utf-8"
    assert extract(data).text == extract(data.replace(b"\x00", b"")).text


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\x00" * 1000 + b"some text", "mostly NUL bytes"),
        ("plain text without a BOM".encode("utf-16-le") * 20, "UTF-16 without a BOM: every other byte is NUL"),
        (bytes(range(256)) * 16, "every byte value, like compressed or random data"),
    ],
)
def test_mostly_control_bytes_is_refused_with_the_reason(data, why):
    with pytest.raises(UnsupportedType, match=r"binary data \(\d+ % of its first \d+ bytes are NUL or control"):
        extract(data)


def _docx_with(document_xml: bytes) -> bytes:
    """The sample DOCX with its word/document.xml replaced."""
    return docx_with(_read("alice-ch1.docx"), document_xml)


LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
<!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">]>
<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">
<w:body><w:p><w:r><w:t>&lol4;</w:t></w:r></w:p></w:body></w:document>"""


@pytest.fixture(scope="module")
def worker():
    w = ExtractionWorker(timeout_s=30, memory_bytes=512 * 1024**2)
    yield w
    w.close()


def test_a_row_added_is_a_format_read_in_the_worker_named_and_watched(worker, toy_format):  # noqa: F811
    data = MAGIC + "Première page.\fSecond page.".encode()
    assert sniff(data) == "toy" and sniff(b"plain words") == "text"
    read = worker.extract(data)  # the worker reads by the table the server sent it
    assert read.kind == "toy" and read.pages == 2 and read.text.startswith("Première page.")
    assert "Toy" in accepted() and ".toy" in accepted() and ".toy" in suffixes()
    with pytest.raises(UnsupportedType, match=r"upload a Toy, PDF, .* text file \(\.toy \.pdf "):
        extract(b"\x89PNG\r\n")
    assert counts(Path("/w"), Path("/w/notes.toy")) and not counts(Path("/w"), Path("/w/notes.toy2"))


def test_every_row_s_sniff_and_reader_pickle_for_the_worker():
    import pickle

    sent = pickle.loads(pickle.dumps(FORMATS))
    assert [f.kind for f in sent] == [f.kind for f in FORMATS]
    assert sniff(_read("settings-table.docx"), sent) == "docx"
    assert extract(_read("alice-ch1.docx"), formats=sent).kind == "docx"


def test_zip_bomb_fails_in_the_worker(worker):
    # 64 MiB of one byte deflates ~1000:1; a real bomb nests or repeats this to petabytes.
    bomb = _docx_with(b"<" + b"A" * (64 * 1024**2))
    with pytest.raises(UnreadableDocument, match="ZIP bomb"):
        worker.extract(bomb)
    assert worker.extract(_read("settings-table.docx")).kind == "docx", "the worker still works afterwards"


def test_xml_entity_bomb_fails_in_the_worker(worker):
    with pytest.raises(UnreadableDocument, match="declares XML entities"):
        worker.extract(_docx_with(LAUGHS))
    epub = zipfile.ZipFile(io.BytesIO(_read("alice-ch1-2.epub")))
    members = {n: epub.read(n) for n in epub.namelist()}
    members["META-INF/container.xml"] = LAUGHS
    with pytest.raises(UnreadableDocument, match="declares XML entities"):
        worker.extract(zip_of(members))


@pytest.mark.parametrize(
    ("members", "error", "words"),
    [
        ({"xl/workbook.xml": b"<x/>"}, UnreadableDocument, "spreadsheet could not be opened"),
        (
            {"mimetype": b"application/vnd.oasis.opendocument.text", "content.xml": b"<x/>"},
            UnsupportedType,
            r"OpenDocument file \(application/vnd.oasis.opendocument.text\)",
        ),  # fmt: skip
        ({"readme.txt": b"hello"}, UnsupportedType, "a ZIP archive"),
        ({"word/document.xml": b"<not closed"}, UnreadableDocument, "DOCX could not be read"),
        ({"META-INF/container.xml": b"<container/>"}, UnreadableDocument, "names no package document"),
    ],
)
def test_other_zips_are_named_or_unreadable(members, error, words):
    with pytest.raises(error, match=words):
        extract(zip_of(members))


def test_truncated_zip_is_unreadable():
    with pytest.raises(UnreadableDocument, match="broken ZIP"):
        extract(_read("alice-ch1.docx")[:5000])


def test_html_without_text_is_empty():
    with pytest.raises(EmptyDocument):
        extract(b"<!DOCTYPE html><html><head><script>var x = 1;</script></head><body></body></html>")


def test_an_internal_dtd_subset_leaves_no_text():
    # Issue 27: lxml ended the doctype at the first ">" and "]>" was left as text.
    html = b'<!DOCTYPE html [\n<!ENTITY lol "lol">\n<!ELEMENT p ANY>\n]>\n<html><body><p>Only this [sic].</p></body>'
    assert extract(html).text == "Only this [sic]."


def test_entity_declarations_are_refused_in_any_member_that_is_xml():
    # Issue 27: the pre-check looked only at members with XML suffixes; a part can have any name.
    epub = zipfile.ZipFile(io.BytesIO(_read("alice-ch1-2.epub")))
    members = {n: epub.read(n) for n in epub.namelist()}
    members["EPUB/text/extra.part"] = LAUGHS
    with pytest.raises(UnreadableDocument, match="extra.part.*declares XML entities"):
        extract(zip_of(members))
    members["EPUB/text/extra.part"] = b"\xef\xbb\xbf" + LAUGHS  # a BOM first
    with pytest.raises(UnreadableDocument, match="declares XML entities"):
        extract(zip_of(members))
    members["EPUB/text/extra.part"] = b"GIF89a" + LAUGHS  # whatever precedes it (issue 49): refused too
    with pytest.raises(UnreadableDocument, match="declares XML entities"):
        extract(zip_of(members))
    del members["EPUB/text/extra.part"]
    assert extract(zip_of(members)).pages == 3


SUBSET = '<!DOCTYPE w:document [<!ENTITY x "EXPANDED">]>'


@pytest.mark.parametrize(
    "prolog, encoding",
    [
        (" " * 100 + SUBSET, "utf-8"),  # issue 49: 100 spaces got past a check of the first 64 bytes
        ("\n\t " * 5000 + SUBSET, "utf-8"),  # a prolog longer than any window read first
        (SUBSET, "utf-16-le"),  # UTF-16 without a byte-order mark
        (SUBSET, "utf-32-be"),
        ('<?xml version="1.0" encoding="UTF-7"?>' + SUBSET.replace("<!", "+ADwAIQ-"), "ascii"),  # "<!" in UTF-7
        ('<?xml version="1.0" encoding="cp500"?>', "ascii"),  # EBCDIC: the subset follows in cp500
        ('<?xml version="1.0" encoding="x-made-up"?>', "ascii"),  # an encoding that cannot be checked
    ],
)
def test_entity_declarations_are_refused_whatever_precedes_them(prolog, encoding):
    """A DOCX whose document part declares an entity after a padded, re-encoded or oddly declared
    prolog is refused with the part named, never expanded (2.5 KB became 101,605 characters) nor read
    with the entity's text silently lost."""
    body = '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body><w:p><w:r>'
    body += "<w:t>Before &x; after.</w:t></w:r></w:p></w:body></w:document>"
    data = prolog.encode(encoding)
    if "cp500" in prolog:
        data += (SUBSET + body).encode("cp500")
    else:
        data += body.encode(encoding)
    with pytest.raises(UnreadableDocument, match=r"word/document.xml.*declares XML entities"):
        extract(_docx_with(data))


def test_a_doctype_without_entities_is_read():
    body = b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body><w:p><w:r>'
    body += b"<w:t>A plain paragraph.</w:t></w:r></w:p></w:body></w:document>"
    assert "A plain paragraph." in extract(_docx_with(b"<!DOCTYPE w:document>" + body)).text


def test_a_damaged_member_is_unreadable_not_a_zlib_error():
    # Found by tests/ingest/test_fuzz.py: zlib.error escaped as a 500.
    data = bytearray(_read("alice-ch1.docx"))
    start = data.index(b"word/document.xml") + 40
    data[start : start + 64] = bytes(64)
    with pytest.raises(UnreadableDocument):
        extract(bytes(data))
