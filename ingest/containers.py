"""DOCX, EPUB, XLSX/XLSM, ODS and PPTX: ZIP containers of XML, told apart by their parts and checked
for bombs before they are read (DOCX: ingest/docx.py, EPUB: ingest/epub.py, XLSX and ODS:
ingest/sheets.py, PPTX: ingest/slides.py).

:func:`check_container` refuses a ZIP bomb (too many members, too many bytes once inflated, or a
member that inflates more than :data:`MAX_RATIO` times) and XML entity declarations (the "billion
laughs" expansion, external entities), using defusedxml, in every member that is XML by its bytes
(an optional BOM or whitespace, then ``<``), whatever its name: the readers find parts through
relationships and manifests, which may name any file, so a suffix list would miss some (issue 27).
Both fail as UnreadableDocument (HTTP 422); the worker's memory limit stays the last line. A member
over :data:`PARSE_BYTES` (a spreadsheet's sheet of a million rows) is not parsed whole for that, which
would take gigabytes: entities can only be declared in a document type declaration, which must come
before the root element (XML 1.0 §2.8), so its prolog is read instead, and parsed by defusedxml only
when it has one.
"""

from __future__ import annotations

import io
import re
import zipfile
import zlib
from xml.etree.ElementTree import ParseError

from ingest.errors import UnreadableDocument, UnsupportedType
from ingest.formats import ACCEPTED

MAX_MEMBERS = 10_000
MAX_INFLATED_BYTES = 256 * 1024**2  # all members together, as declared (zipfile never reads past it)
MAX_RATIO = 200  # inflated / compressed, for members over RATIO_FLOOR bytes; DOCX XML is ~10-30
RATIO_FLOOR = 1024**2
_XML_START = re.compile(rb"^(\xef\xbb\xbf)?[ \t\r\n]*<|^(\xff\xfe|\xfe\xff)")  # UTF-8 (BOM), or UTF-16 with a BOM
SNIFF_BYTES = 64
PARSE_BYTES = 8 * 1024**2  # a larger member's prolog is checked for a DOCTYPE instead of a whole parse
PROLOG_BYTES = 64 * 1024
_ROOT_START = re.compile(rb"<[^?!]")  # the first element (after the XML declaration, comments, DOCTYPE)
#: What zipfile raises for a damaged member: a bad CRC or header, a truncated stream, an encrypted
#: member (RuntimeError) or an unsupported compression method (NotImplementedError).
ZIP_ERRORS = (zipfile.BadZipFile, OSError, ValueError, EOFError, RuntimeError, NotImplementedError, zlib.error)


def container_kind(data: bytes) -> str:
    """The kind (ingest/formats.py) of a ZIP with the parts that make one: ``docx``, ``epub``, ``xlsx``
    (also XLSM: the same parts), ``ods`` or ``pptx``; UnsupportedType otherwise."""
    try:
        names = set(zipfile.ZipFile(io.BytesIO(data)).namelist())
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise UnreadableDocument(f"the file is a broken ZIP archive ({exc}); re-save or re-export it") from exc
    if "word/document.xml" in names:
        return "docx"
    if "xl/workbook.xml" in names:
        return "xlsx"
    if "ppt/presentation.xml" in names:
        return "pptx"
    mimetype = _mimetype(data) if "mimetype" in names else ""
    if mimetype == ODS_MIMETYPE or (not mimetype and "content.xml" in names and _ods_content(data)):
        return "ods"
    if "META-INF/container.xml" in names and not mimetype.startswith("application/vnd.oasis."):
        return "epub"
    what = "a ZIP archive"
    if mimetype.startswith("application/vnd.oasis.opendocument") or "content.xml" in names:
        what = f"an OpenDocument file ({mimetype or 'not a spreadsheet'})"
    raise UnsupportedType(f"the file is {what}, not a document docqa reads; {ACCEPTED}")


ODS_MIMETYPE = "application/vnd.oasis.opendocument.spreadsheet"


def _mimetype(data: bytes) -> str:
    """The ``mimetype`` member of an OpenDocument (or EPUB) ZIP, at most 100 bytes of it."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)).open("mimetype") as f:
            return f.read(100).decode("ascii", "replace").strip()
    except ZIP_ERRORS:
        return ""


def _ods_content(data: bytes) -> bool:
    """An OpenDocument without a ``mimetype`` member whose content holds a spreadsheet body."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)).open("content.xml") as f:
            return b"office:spreadsheet" in f.read(PROLOG_BYTES)
    except ZIP_ERRORS:
        return False


def check_container(data: bytes) -> None:
    """Raise UnreadableDocument for a ZIP bomb or XML entity declarations (module docstring)."""
    from defusedxml import DefusedXmlException
    from defusedxml.ElementTree import fromstring

    archive = zipfile.ZipFile(io.BytesIO(data))
    members = archive.infolist()
    if len(members) > MAX_MEMBERS:
        raise UnreadableDocument(f"the archive has {len(members)} members (limit {MAX_MEMBERS}); a ZIP bomb?")
    inflated = sum(m.file_size for m in members)
    if inflated > MAX_INFLATED_BYTES:
        raise UnreadableDocument(
            f"the archive inflates to {inflated / 1024**2:.0f} MiB (limit {MAX_INFLATED_BYTES // 1024**2} MiB); "
            "a ZIP bomb? Upload a smaller document"
        )
    for m in members:
        if m.file_size > RATIO_FLOOR and m.file_size > MAX_RATIO * max(m.compress_size, 1):
            raise UnreadableDocument(
                f"the archive member {m.filename!r} inflates {m.file_size // max(m.compress_size, 1)} times "
                f"(limit {MAX_RATIO}); a ZIP bomb? Re-save the document"
            )
    for m in members:
        try:
            if m.is_dir() or not looks_like_xml(archive, m):
                continue
            if m.file_size > PARSE_BYTES and not _declares_doctype(archive, m):
                continue
            fromstring(archive.read(m), forbid_dtd=False, forbid_entities=True, forbid_external=True)
        except DefusedXmlException as exc:
            raise UnreadableDocument(
                f"the archive member {m.filename!r} declares XML entities ({type(exc).__name__}), which docqa "
                "does not expand (an entity-expansion bomb?); re-save the document"
            ) from exc
        except ParseError:
            pass  # malformed XML (or HTML entities in XHTML): the reading library decides
        except ZIP_ERRORS as exc:
            raise UnreadableDocument(f"the archive member {m.filename!r} is damaged ({exc}); re-save it") from exc


def _declares_doctype(archive: zipfile.ZipFile, member: zipfile.ZipInfo) -> bool:
    """The member's prolog (what comes before its first element, within PROLOG_BYTES) has a
    ``<!DOCTYPE``, in UTF-8 or (with a BOM) UTF-16; a prolog longer than that counts as one."""
    with archive.open(member) as f:
        head = f.read(PROLOG_BYTES)
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        head = head.decode("utf-16", errors="ignore").encode("utf-8")
    root = _ROOT_START.search(head)
    return b"<!DOCTYPE" in (head if root is None else head[: root.start()]).upper()


def looks_like_xml(archive: zipfile.ZipFile, member: zipfile.ZipInfo) -> bool:
    """The member's first bytes are those of an XML (or HTML) file; reads only :data:`SNIFF_BYTES`."""
    with archive.open(member) as f:
        return bool(_XML_START.match(f.read(SNIFF_BYTES)))
