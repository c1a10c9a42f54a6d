"""DOCX: mammoth (https://github.com/mwilliamson/python-mammoth) for the document, plus its
``w:altChunk`` parts, which mammoth does not read (mammoth.js issues 71 and 424).

mammoth maps Word's semantic styles to HTML (Heading N to ``<hN>``, list paragraphs to ``<ul>``/
``<ol>``, tables to ``<table>``, footnotes to a list at the end); ingest/markup.py turns that into
Markdown-like text. Images are not decoded (only their alt text is kept). One page: a DOCX has no
fixed pages.

An ``altChunk`` (ECMA-376 Part 1 §17.17.2.1) imports another file's content at its place in the
body: html-docx-js and several exporters write the whole document as one HTML or MHT chunk. Each
chunk's ``w:altChunk`` element is replaced by a paragraph holding a unique marker before mammoth
runs, and the marker's line in the text by the chunk's text afterwards, so the chunk keeps its place.

A DrawingML text box (``w:drawing`` → ``wp:anchor`` or ``wp:inline`` → ``wps:txbx`` →
``w:txbxContent``, ECMA-376 Part 1 §20.4 and [MS-ODRAWXML] 2.3.10) is read by mammoth for its
pictures only, so its text was dropped without a warning (microsoft/markitdown pull request 2514 is
the same class); the same box with a VML fallback (``mc:AlternateContent`` → ``mc:Fallback`` →
``w:pict`` → ``v:textbox``) is read, since mammoth takes the fallback. So before mammoth runs, each
``w:txbxContent`` of a drawing that has no such fallback is copied into a ``w:pict`` right after the
drawing, which mammoth reads as it reads a VML box: its paragraphs after the paragraph holding it.
A chunk is read by what its bytes are: MHT (a MIME ``multipart/related`` message, RFC 2557: its
HTML part), HTML or XHTML (the HTML path of an HTML upload), or plain text; an RTF or DOCX chunk,
or one that is missing, is skipped with a warning.
"""

from __future__ import annotations

import email
import email.policy
import io
import posixpath
import re
import secrets
import zipfile
from xml.etree.ElementTree import ParseError

from ingest.containers import ZIP_ERRORS
from ingest.encoding import decode_text
from ingest.errors import DocumentError, UnreadableDocument
from ingest.markup import decode_html, html_to_text

MAIN = "word/document.xml"
_OFFICE_DOCUMENT = "/officeDocument"
_ALT_CHUNK = re.compile(rb"<(?P<p>[\w.-]+:)?altChunk\b(?P<attrs>[^>]*?)(?:/>|>.*?</(?P=p)altChunk>)", re.S)
_ID = re.compile(rb"""(?:[\w.-]+:)?id\s*=\s*["']([^"']+)["']""")


def docx_pages(data: bytes) -> tuple[list[str], list[dict]]:
    """The text of a DOCX as one Markdown-like page, and a warning for each ``altChunk`` that could not
    be read (skipped). The ZIP has passed ingest/containers.py ``check_container``. Raises
    UnreadableDocument."""
    import mammoth

    archive = zipfile.ZipFile(io.BytesIO(data))
    marked, chunks, warnings = _replace_alt_chunks(archive)
    boxed = _text_boxes(marked if marked is not None else _read_main(archive))
    if boxed is not None or marked is not None:
        data = _with_member(archive, _main_part(archive), boxed if boxed is not None else marked)
    no_images = mammoth.images.img_element(lambda image: {"alt": image.alt_text or ""})
    try:
        result = mammoth.convert_to_html(io.BytesIO(data), convert_image=no_images)
    except Exception as exc:  # mammoth raises KeyError/ValueError/... for broken parts: all "unreadable"
        raise UnreadableDocument(
            f"the DOCX could not be read ({type(exc).__name__}: {exc}); open and re-save it in a word processor"
        ) from exc
    text = html_to_text(result.value)
    for marker, chunk_text in chunks.items():
        if marker in text:
            text = re.sub(rf"(?m)^[ \t]*{marker}[ \t]*$", lambda _, t=chunk_text: t, text)
            text = text.replace(marker, chunk_text)  # inside a line (a table cell): in place
        elif chunk_text:
            text += "\n\n" + chunk_text
    return [text], warnings


def _read_main(archive: zipfile.ZipFile) -> bytes | None:
    try:
        return archive.read(_main_part(archive))
    except (KeyError, *ZIP_ERRORS):
        return None  # mammoth says what is missing or broken


_W = (
    "http://schemas.openxmlformats.org/wordprocessingml/2006/main",
    "http://purl.oclc.org/ooxml/wordprocessingml/main",
)
_MC = "{http://schemas.openxmlformats.org/markup-compatibility/2006}"


def _text_boxes(xml: bytes | None) -> bytes | None:
    """The main part with a ``w:pict`` holding a copy of each DrawingML text box's ``w:txbxContent``
    after its ``w:drawing`` (module docstring); None when there is none to copy (or the part is not
    well-formed XML: mammoth says so)."""
    if xml is None or b"txbxContent" not in xml or b"drawing" not in xml:
        return None
    import copy

    from lxml import etree

    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)
    try:
        root = etree.fromstring(xml, parser)
    except etree.XMLSyntaxError:
        return None
    copied = False
    for drawing in list(root.iter(*(f"{{{ns}}}drawing" for ns in _W))):
        if _has_fallback(drawing):
            continue
        boxes = [e for e in drawing.iter() if isinstance(e.tag, str) and e.tag.endswith("}txbxContent")]
        if boxes:
            pict = etree.Element(drawing.tag.rsplit("}", 1)[0] + "}pict")
            pict.extend(copy.deepcopy(box) for box in boxes)
            drawing.addnext(pict)
            copied = True
    return etree.tostring(root, xml_declaration=True, encoding="UTF-8", standalone=True) if copied else None


def _has_fallback(element) -> bool:
    """Whether ``element`` lies in an ``mc:Choice`` whose ``mc:AlternateContent`` has an
    ``mc:Fallback``, which mammoth reads instead."""
    for ancestor in element.iterancestors(f"{_MC}Choice"):
        parent = ancestor.getparent()
        if parent is not None and parent.find(f"{_MC}Fallback") is not None:
            return True
    return False


def _main_part(archive: zipfile.ZipFile) -> str:
    """The main document part, as the package relationships name it (``word/document.xml`` always, in
    practice)."""
    for rel in _relationships(archive, "_rels/.rels"):
        if rel["type"].endswith(_OFFICE_DOCUMENT) and rel["target"]:
            return rel["target"].lstrip("/")
    return MAIN


def _relationships(archive: zipfile.ZipFile, path: str) -> list[dict[str, str]]:
    from defusedxml.ElementTree import fromstring

    try:
        root = fromstring(archive.read(path), forbid_dtd=False, forbid_entities=True, forbid_external=True)
    except (KeyError, ParseError, *ZIP_ERRORS):
        return []
    return [
        {
            "id": e.get("Id", ""),
            "type": e.get("Type", ""),
            "target": e.get("Target", ""),
            "external": e.get("TargetMode", "") == "External",
        }
        for e in root
        if str(e.tag).endswith("Relationship")
    ]


def _replace_alt_chunks(archive: zipfile.ZipFile) -> tuple[bytes | None, dict[str, str], list[dict]]:
    """``(the main part with a marker paragraph for each altChunk, {marker: chunk text}, warnings)``;
    ``(None, {}, [])`` for a document without altChunks."""
    main = _main_part(archive)
    try:
        xml = archive.read(main)
    except (KeyError, *ZIP_ERRORS):
        return None, {}, []  # mammoth says what is missing or broken
    if b"altChunk" not in xml:
        return None, {}, []
    base = posixpath.dirname(main)
    rels_path = posixpath.join(base, "_rels", posixpath.basename(main) + ".rels")
    targets = {r["id"]: r for r in _relationships(archive, rels_path)}  # aFChunk, as written; any type read
    nonce = secrets.token_hex(6)
    chunks: dict[str, str] = {}
    warnings: list[dict] = []

    def substitute(m: re.Match[bytes]) -> bytes:
        prefix = m.group("p") or b""
        found = _ID.search(m.group("attrs"))
        rel = targets.get(found.group(1).decode("utf-8", "replace")) if found else None
        text, problem = _chunk_text(archive, base, rel)
        if problem:
            warnings.append({"page": 1, "message": f"an embedded part of the document {problem}; it is skipped"})
        marker = f"docqa{nonce}chunk{len(chunks)}"
        chunks[marker] = text
        p = prefix.decode()
        return f"<{p}p><{p}r><{p}t>{marker}</{p}t></{p}r></{p}p>".encode()

    marked = _ALT_CHUNK.sub(substitute, xml)
    return marked, chunks, warnings


def _chunk_text(archive: zipfile.ZipFile, base: str, rel: dict[str, str] | None) -> tuple[str, str | None]:
    """(text, None) for a readable chunk, ("", why it was skipped) otherwise."""
    if rel is None:
        return "", "(an altChunk) has no relationship to its content"
    if rel["external"]:
        return "", f"(an altChunk) is an external file ({rel['target']}), which docqa does not fetch"
    target = rel["target"]
    path = target.lstrip("/") if target.startswith("/") else posixpath.normpath(posixpath.join(base, target))
    try:
        raw = archive.read(path)
    except KeyError:
        return "", f"({path}) is missing from the file"
    except ZIP_ERRORS as exc:
        return "", f"({path}) is damaged ({exc})"
    return _read_chunk(raw, path)


def _read_chunk(raw: bytes, path: str) -> tuple[str, str | None]:
    head = raw[:2048].lstrip(b"\xef\xbb\xbf \t\r\n")
    if head.startswith(b"{\\rtf"):
        return "", f"({path}) is RTF, which docqa does not read"
    if head.startswith(b"PK\x03\x04"):
        return "", f"({path}) is a nested Office file, which docqa does not read"
    if re.match(rb"(?i)(mime-version|content-type|content-location|from|date|subject)\s*:", head):
        return _mht_text(raw, path)
    if head.startswith(b"<") or raw[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return html_to_text(decode_html(raw)[0]), None
    try:
        return decode_text(raw).text.strip(), None
    except DocumentError as exc:
        return "", f"({path}) is not text ({exc})"


def _mht_text(raw: bytes, path: str) -> tuple[str, str | None]:
    """The HTML part of an MHT (MIME HTML, RFC 2557) chunk as text; its text/plain part if it has no
    HTML."""
    message = email.message_from_bytes(raw, policy=email.policy.compat32)
    plain = None
    for part in message.walk():
        kind = part.get_content_type()
        if kind not in ("text/html", "application/xhtml+xml", "text/plain"):
            continue
        payload = part.get_payload(decode=True)
        if not isinstance(payload, bytes):
            continue
        if kind == "text/plain":
            plain = plain if plain is not None else (payload, part.get_content_charset())
            continue
        charset = part.get_content_charset()
        markup = _decode(payload, charset) if charset else decode_html(payload)[0]
        return html_to_text(markup), None
    if plain is not None:
        return _decode(*plain).strip(), None
    return "", f"({path}) is an MHT file without an HTML or text part"


def _decode(payload: bytes, charset: str | None) -> str:
    try:
        return payload.decode(charset or "utf-8", errors="replace")
    except LookupError:  # an unknown charset name
        return payload.decode("utf-8", errors="replace")


def _with_member(archive: zipfile.ZipFile, name: str, content: bytes) -> bytes:
    """The DOCX with member ``name`` replaced by ``content`` (in memory; the others copied as they are)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for info in archive.infolist():
            z.writestr(info, content if info.filename == name else archive.read(info))
    return out.getvalue()
