"""Office files made in tests: a ZIP container from its members, and a DOCX with its body replaced
(the XML-entity, damaged-part and shared-string cases of ingest/ and the upload route)."""

from __future__ import annotations

import io
import zipfile


def zip_of(members: dict[str, bytes]) -> bytes:
    """A deflated ZIP holding ``members`` (name -> bytes), in order."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, body in members.items():
            z.writestr(name, body)
    return buf.getvalue()


def docx_with(docx: bytes, document_xml: bytes) -> bytes:
    """The DOCX ``docx`` with its ``word/document.xml`` replaced by ``document_xml``."""
    src = zipfile.ZipFile(io.BytesIO(docx))
    return zip_of({**{n: src.read(n) for n in src.namelist()}, "word/document.xml": document_xml})
