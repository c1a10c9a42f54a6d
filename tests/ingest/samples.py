"""Small EPUB and DOCX files built in the tests, each shaped like what a real tool writes: the
packaging parts a reader needs and nothing else (the files in tests/ingest/files are whole books)."""

from __future__ import annotations

import io
import zipfile

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
R = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
AF_CHUNK = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/aFChunk"


def zip_of(members: dict[str, bytes | str], stored: tuple[str, ...] = ("mimetype",)) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, body in members.items():
            data = body.encode() if isinstance(body, str) else body
            z.writestr(name, data, compress_type=zipfile.ZIP_STORED if name in stored else zipfile.ZIP_DEFLATED)
    return buf.getvalue()


def chapter(title: str, *paragraphs: str, xhtml: bool = True) -> str:
    body = f"<h1>{title}</h1>" + "".join(f"<p>{p}</p>" for p in paragraphs)
    if xhtml:
        return (
            '<?xml version="1.0" encoding="utf-8"?>\n<html xmlns="http://www.w3.org/1999/xhtml">'
            f"<head><title>{title}</title></head><body>{body}</body></html>"
        )
    return f"<!DOCTYPE html>\n<html><head><title>{title}</title></head><body>{body}</body></html>"


def epub(
    items: list[tuple[str, str, str | bytes | None]],
    spine: list[str] | None = None,
    opf_dir: str = "OEBPS",
) -> bytes:
    """An EPUB whose manifest lists ``items`` as (href, media type, content); content None: listed but
    not in the ZIP. The spine is ``spine`` (hrefs), by default every HTML item in order."""
    ids = {href: f"item{i}" for i, (href, _, _) in enumerate(items)}
    manifest = "".join(f'<item id="{ids[h]}" href="{h}" media-type="{t}"/>' for h, t, _ in items)
    order = spine if spine is not None else [h for h, t, _ in items if "html" in t]
    refs = "".join(f'<itemref idref="{ids[h]}"/>' for h in order)
    opf = (
        '<?xml version="1.0" encoding="utf-8"?>\n<package xmlns="http://www.idpf.org/2007/opf" version="2.0" '
        'unique-identifier="id"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>T</dc:title>'
        f'<dc:identifier id="id">x</dc:identifier></metadata><manifest>{manifest}</manifest>'
        f"<spine>{refs}</spine></package>"
    )
    container = (
        '<?xml version="1.0"?>\n<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
        f'<rootfiles><rootfile full-path="{opf_dir}/content.opf" media-type="application/oebps-package+xml"/>'
        "</rootfiles></container>"
    )
    members: dict[str, bytes | str] = {
        "mimetype": "application/epub+zip",
        "META-INF/container.xml": container,
        f"{opf_dir}/content.opf": opf,
    }
    for href, _, content in items:
        if content is not None:
            members[f"{opf_dir}/{href}"] = content
    return zip_of(members)


def paragraph(text: str) -> str:
    return f'<w:p><w:r><w:t xml:space="preserve">{text}</w:t></w:r></w:p>'


def docx(body: str, parts: dict[str, bytes | str] | None = None, rels: dict[str, str] | None = None) -> bytes:
    """A DOCX whose body is ``body`` (WordprocessingML), with extra ``parts`` (paths under word/) and
    the main part's relationships ``rels`` ({id: target}, as altChunks)."""
    document = (
        f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<w:document xmlns:w="{W}" xmlns:r="{R}">'
        f"<w:body>{body}</w:body></w:document>"
    )
    relationships = "".join(
        f'<Relationship Id="{i}" Type="{AF_CHUNK}" Target="{target}"/>' for i, target in (rels or {}).items()
    )
    members: dict[str, bytes | str] = {
        "[Content_Types].xml": (
            '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
            '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
            '<Default Extension="xml" ContentType="application/xml"/>'
            '<Default Extension="htm" ContentType="text/html"/><Default Extension="mht" ContentType="message/rfc822"/>'
            '<Override PartName="/word/document.xml" '
            'ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>'
        ),
        "_rels/.rels": (
            '<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
            '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
            'officeDocument" Target="word/document.xml"/></Relationships>'
        ),
        "word/document.xml": document,
        "word/_rels/document.xml.rels": (
            '<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
            f"{relationships}</Relationships>"
        ),
    }
    for name, content in (parts or {}).items():
        members[f"word/{name}"] = content
    return zip_of(members, stored=())


def mht(html: str, charset: str = "utf-8") -> bytes:
    """An MHT file (MIME HTML, RFC 2557) holding ``html``, quoted-printable, as Word writes them."""
    import quopri

    body = quopri.encodestring(html.encode(charset)).decode("ascii")
    return (
        'MIME-Version: 1.0\r\nContent-Type: multipart/related; boundary="----=_NextPart_01"\r\n\r\n'
        "------=_NextPart_01\r\nContent-Location: file:///C:/chunk.htm\r\n"
        f'Content-Transfer-Encoding: quoted-printable\r\nContent-Type: text/html; charset="{charset}"\r\n\r\n'
        f"{body}\r\n------=_NextPart_01--\r\n"
    ).encode("ascii")


def with_members(data: bytes, replace: dict[str, bytes | str | None]) -> bytes:
    """The ZIP ``data`` with members replaced, added, or (None) removed."""
    src = zipfile.ZipFile(io.BytesIO(data))
    members: dict[str, bytes | str] = {n: src.read(n) for n in src.namelist()}
    for name, body in replace.items():
        if body is None:
            members.pop(name, None)
        else:
            members[name] = body
    return zip_of(members)


def pdf(pages: list[str], compress: bool = True) -> bytes:
    """A PDF of Helvetica text pages (one line each), with a correct xref table; the content streams
    flate-compressed when ``compress`` (so damage reaches the decompressor too)."""
    import zlib

    n = len(pages)
    font = 3 + 2 * n
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    objects.append(b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % (3 + i) for i in range(n)), n))
    for i in range(n):
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 %d 0 R >> >> "
            b"/Contents %d 0 R >>" % (font, 3 + n + i)
        )
    for text in pages:
        stream = b"BT /F1 12 Tf 72 720 Td (%s) Tj ET" % text.encode("latin-1")
        if compress:
            stream = zlib.compress(stream)
            objects.append(b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (len(stream), stream))
        else:
            objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    return pdf_file(objects)


def ruled_table_pdf(rows: list[list[str]], before: str, after: str) -> bytes:
    """A one-page PDF: the line ``before``, then ``rows`` as a table with ruling lines (cells 120 x 20
    points, text drawn cell by cell, as word processors draw tables), then the line ``after``."""
    x0, top, w, h = 72, 680, 120, 20
    bottom, right = top - h * len(rows), x0 + w * max(len(r) for r in rows)
    ops = [b"0.5 w"]
    ops += [b"%d %d m %d %d l S" % (x0, top - h * k, right, top - h * k) for k in range(len(rows) + 1)]
    ops += [b"%d %d m %d %d l S" % (x0 + w * k, top, x0 + w * k, bottom) for k in range(len(rows[0]) + 1)]
    ops.append(b"BT /F1 12 Tf 72 720 Td (%s) Tj ET" % before.encode("latin-1"))
    for r, row in enumerate(rows):
        for c, cell in enumerate(row):
            at = (x0 + w * c + 4, top - h * (r + 1) + 6)
            ops.append(b"BT /F1 10 Tf %d %d Td (%s) Tj ET" % (*at, cell.encode("latin-1")))
    ops.append(b"BT /F1 12 Tf 72 %d Td (%s) Tj ET" % (bottom - 40, after.encode("latin-1")))
    return page_pdf(b"\n".join(ops))


def page_pdf(stream: bytes) -> bytes:
    """A one-page PDF (US Letter, Helvetica as /F1) whose content stream is ``stream``."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 5 0 R >> >> "
        b"/Contents 4 0 R >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    return pdf_file(objects)


def pdf_file(objects: list[bytes]) -> bytes:
    """A PDF of ``objects`` (numbered from 1; the first is the catalog) with a correct xref table."""
    out, offsets = [b"%PDF-1.4\n"], []
    for i, body in enumerate(objects, start=1):
        offsets.append(sum(len(p) for p in out))
        out.append(b"%d 0 obj\n%s\nendobj\n" % (i, body))
    xref = sum(len(p) for p in out)
    out.append(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    out += [b"%010d 00000 n \n" % o for o in offsets]
    out.append(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return b"".join(out)


def first_pages(path, n: int) -> bytes:
    """The first ``n`` pages of the PDF at ``path``, written again by pypdf: a shorter real PDF of the
    same kind, for tests that need one that is slow to read or over the budget but not a whole book."""
    import pypdf

    writer = pypdf.PdfWriter()
    for page in pypdf.PdfReader(path).pages[:n]:
        writer.add_page(page)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()
