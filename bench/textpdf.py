"""A plain multi-page text PDF (Helvetica, WinAnsi), for benchmarks that need a PDF of known text."""

from __future__ import annotations

import textwrap


def _escape(line: str) -> bytes:
    raw = line.encode("cp1252", errors="replace")
    return raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")


def text_pdf(pages: list[str], width: int = 90) -> bytes:
    """One PDF page per string of ``pages``: paragraphs (blank-line separated) wrapped at ``width``
    characters, 10 pt on 13 pt leading, US Letter. Returns the file's bytes (correct xref table)."""
    n = len(pages)
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b""]
    font = 3
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    kids = []
    for text in pages:
        lines = []
        for para in text.split("\n\n"):
            lines += textwrap.wrap(" ".join(para.split()), width) + [""]
        body = b"BT /F1 10 Tf 13 TL 56 740 Td " + b" ".join(b"(%s) '" % _escape(x) for x in lines) + b" ET"
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(body), body))
        content = len(objects)
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 %d 0 R >> >> "
            b"/Contents %d 0 R >>" % (font, content)
        )
        kids.append(len(objects))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % k for k in kids), n)
    out, offsets = [b"%PDF-1.4\n"], []
    for i, body in enumerate(objects, start=1):
        offsets.append(sum(len(p) for p in out))
        out.append(b"%d 0 obj\n%s\nendobj\n" % (i, body))
    xref = sum(len(p) for p in out)
    out.append(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    out += [b"%010d 00000 n \n" % o for o in offsets]
    out.append(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return b"".join(out)
