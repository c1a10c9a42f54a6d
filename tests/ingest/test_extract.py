"""Extraction on real files from ../shared/cases, and the type/encoding rules on small inputs."""

from __future__ import annotations

import codecs
import re
import unicodedata

import pytest

from ingest.encoding import decode_text
from ingest.errors import EmptyDocument, NoTextLayer, PasswordRequired, UnreadablePdf, UnsupportedType, WrongPassword
from ingest.extract import PAGE_SEPARATOR, extract, sniff


def _case(cases, manifest, case_id):
    c = manifest[case_id]
    return (cases / c["path"]).read_bytes(), c


@pytest.mark.parametrize("case_id", ["PDF-01", "PDF-18", "PDF-24", "PDF-34"])
def test_text_contains(cases, manifest, case_id):
    data, c = _case(cases, manifest, case_id)
    assert c["value"] in extract(data).text


def test_ligatures_become_letters_after_nfkc(cases, manifest):
    data, c = _case(cases, manifest, "PDF-02")
    text = extract(data).text
    assert c["value"] in text
    assert "\ufb01" not in text and text == unicodedata.normalize("NFKC", text)


@pytest.mark.parametrize("case_id", ["PDF-06", "PDF-09", "PDF-22"])
def test_text_contains_all(cases, manifest, case_id):
    data, c = _case(cases, manifest, case_id)
    text = extract(data).text
    for snippet in c["value"]:
        assert snippet in text


def test_two_column_reading_order(cases, manifest):
    data, c = _case(cases, manifest, "PDF-04")
    text = re.sub(r"-\n", "", extract(data).text)  # de-hyphenate line breaks
    assert c["value"] in re.sub(r"\s+", " ", text)


def test_page_map_for_rotated_pages(cases, manifest):
    data, c = _case(cases, manifest, "PDF-07")
    result = extract(data)
    assert result.pages == 4
    ends = [*result.page_starts[1:], len(result.text) + len(PAGE_SEPARATOR)]
    for start, end in zip(result.page_starts, ends, strict=True):
        page = result.text[start : end - len(PAGE_SEPARATOR)]
        for snippet in c["value"]:
            assert snippet in page
    assert result.page_of(0) == 1 and result.page_of(len(result.text) - 1) == 4


def test_mostly_images_keeps_page_count(cases, manifest):
    data, _ = _case(cases, manifest, "PDF-34")
    assert extract(data).pages == 6


@pytest.mark.parametrize("case_id", ["PDF-21", "PDF-23", "BRK-01"])
def test_text_equals(cases, manifest, case_id):
    data, c = _case(cases, manifest, case_id)
    assert extract(data).text.strip() == c["value"]


def test_password_required_then_unlocked(cases, manifest):
    data, _ = _case(cases, manifest, "ENC-01")
    with pytest.raises(PasswordRequired, match="password"):
        extract(data)
    assert "Lorem ipsum" in extract(data, password="openpassword").text


def test_aes256_wrong_password_then_right(cases, manifest):
    data, _ = _case(cases, manifest, "ENC-02")
    with pytest.raises(WrongPassword, match="wrong"):
        extract(data, password="nope")
    assert "misfits" in extract(data, password="password").text


def test_rc4_with_password(cases, manifest):
    data, c = _case(cases, manifest, "ENC-03")
    assert c["value"] in extract(data, password="asdfzxcv").text


def test_permission_only_pdf_opens_without_password(cases, manifest):
    data, c = _case(cases, manifest, "ENC-05")
    assert c["value"] in extract(data).text


@pytest.mark.parametrize(
    ("case_id", "error"),
    [("BRK-04", UnreadablePdf), ("BRK-05", EmptyDocument), ("BRK-06", UnsupportedType), ("BRK-10", UnreadablePdf)],
)
def test_broken_files_raise_typed_errors(cases, manifest, case_id, error):
    data, _ = _case(cases, manifest, case_id)
    with pytest.raises(error):
        extract(data)


def test_no_xref_pdf_is_an_error_or_empty(cases, manifest):
    data, _ = _case(cases, manifest, "BRK-03")
    with pytest.raises((UnreadablePdf, NoTextLayer)):
        extract(data)


def test_scanned_pdf_says_no_text_layer(cases, manifest):
    data, _ = _case(cases, manifest, "PDF-30")
    with pytest.raises(NoTextLayer, match="no extractable text"):
        extract(data)


def test_utf8_bom_is_not_text(cases, manifest):
    data, c = _case(cases, manifest, "TXT-01")
    assert extract(data).text.startswith(c["value"])


def test_invalid_utf8_is_replaced(cases, manifest):
    data, _ = _case(cases, manifest, "TXT-05")
    text = extract(data).text
    assert "MARIGOLD" in text and "\ufffd" in text


def test_injection_text_is_kept_verbatim(cases, manifest):
    data, c = _case(cases, manifest, "INJ-01")
    text = extract(data).text
    assert "KX-5521" in text and "<|im_start|>" in text


def test_utf16_bom_is_honoured():
    raw = codecs.BOM_UTF16_LE + "Grüße, 世界".encode("utf-16-le")
    assert sniff(raw) == "text"
    assert decode_text(raw).text == "Grüße, 世界" and decode_text(raw).encoding == "utf-16"


def test_type_comes_from_bytes_not_name():
    assert sniff(b"hello %PDF-1.4 later") == "pdf"  # a header within the first KiB counts
    with pytest.raises(UnsupportedType, match="PNG"):
        sniff(b"\x89PNG\r\n\x1a\n....")
    with pytest.raises(UnsupportedType, match="binary"):
        sniff(bytes(range(256)) * 16)  # every byte value: ~10 % NUL and control bytes


def test_whitespace_only_text_is_empty():
    with pytest.raises(EmptyDocument):
        extract(b"  \n\t \x07 ")


def _pdf(objects: list[bytes]) -> bytes:
    """A minimal PDF with a correct xref table from numbered object bodies."""
    out, offsets = [b"%PDF-1.4\n"], []
    for i, body in enumerate(objects, start=1):
        offsets.append(sum(len(p) for p in out))
        out.append(b"%d 0 obj\n%s\nendobj\n" % (i, body))
    xref = sum(len(p) for p in out)
    out.append(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    out += [b"%010d 00000 n \n" % o for o in offsets]
    out.append(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return b"".join(out)


def test_page_tree_cycle_is_an_error_not_a_hang():
    from ingest.worker import ExtractionWorker

    # /Pages 2 lists itself as a kid: a cycle in the page tree.
    data = _pdf([b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [2 0 R] /Count 1 >>"])
    worker = ExtractionWorker(timeout_s=20, memory_bytes=512 * 1024**2)
    try:
        with pytest.raises((UnreadablePdf, NoTextLayer)):
            worker.extract(data)
    finally:
        worker.close()


def test_worker_timeout_and_memory_limit_become_unreadable_pdf(cases, manifest):
    from ingest.worker import ExtractionWorker

    bomb = (cases / manifest["BRK-10"]["path"]).read_bytes()
    worker = ExtractionWorker(timeout_s=20, memory_bytes=128 * 1024**2)
    try:
        with pytest.raises(UnreadablePdf):
            worker.extract(bomb)
        # The worker is still usable afterwards.
        assert "Lorem ipsum" in worker.extract((cases / manifest["PDF-01"]["path"]).read_bytes()).text
    finally:
        worker.close()


def _two_page_pdf(second_widths: bytes) -> bytes:
    """Two pages of Helvetica text; page 2's font has the widths array ``second_widths``."""
    good = b"[" + b" ".join([b"500"] * 95) + b"]"
    font = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /FirstChar 32 /LastChar 126 /Widths %s >>"
    page = (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 %d 0 R >> >> "
        b"/Contents %d 0 R >>"
    )
    text = [b"BT /F1 12 Tf 72 720 Td (Page %d says hello to the reader.) Tj ET" % n for n in (1, 2)]
    return _pdf(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R 4 0 R] /Count 2 >>",
            page % (5, 7),
            page % (6, 8),
            font % good,
            font % second_widths,
            *[b"<< /Length %d >>\nstream\n%s\nendstream" % (len(t), t) for t in text],
        ]
    )


def test_one_unreadable_page_is_a_warning_not_a_refusal():
    """A malformed widths array on page 2 (pypdf: "invalid literal for int()") used to discard the
    whole PDF; page 1 is kept, page 2 is left empty with a warning."""
    doc = extract(_two_page_pdf(b"[ 500 (x) /Name ]"))
    assert doc.pages == 2 and "Page 1 says hello" in doc.text and "Page 2" not in doc.text
    assert [w["page"] for w in doc.warnings] == [2] and "could not be read" in doc.warnings[0]["message"]
    assert extract(_two_page_pdf(b"[" + b" ".join([b"500"] * 95) + b"]")).warnings == []  # negative control


def test_a_pdf_with_no_readable_page_is_refused():
    bad = _pdf(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> "
            b"/Contents 5 0 R >>",
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /FirstChar 32 /LastChar 126 /Widths [ (x) ] >>",
            b"<< /Length 40 >>\nstream\nBT /F1 12 Tf 72 720 Td (Hello.) Tj ET\nendstream",
        ]
    )
    with pytest.raises(UnreadablePdf, match="could not be read"):
        extract(bad)


def test_a_garbled_page_is_flagged():
    from ingest.pdf import garbled as _garbled

    assert _garbled("\ufffd" * 30 + "ab")
    assert _garbled("\ue000\ue001\ue002" * 10)  # private-use glyph codes: a font without a text mapping
    assert not _garbled("An ordinary page of text, with a \ufffd or two \ufffd in it.")
    assert not _garbled("\ufffd\ufffd")  # too short to judge
