"""DOCX, EPUB, XLSX/XLSM, ODS and PPTX: ZIP containers of XML, told apart by their parts (the sniffs of
ingest/formats.py look at :func:`zip_names` and :func:`mimetype`) and checked for bombs before they
are read (DOCX: ingest/docx.py, EPUB: ingest/epub.py, XLSX and ODS: ingest/sheets.py, PPTX:
ingest/slides.py).

:func:`check_container` refuses a ZIP bomb (too many members, too many bytes once inflated, or a
member that inflates more than :data:`MAX_RATIO` times) and XML entity declarations (the "billion
laughs" expansion, external entities). Both fail as UnreadableDocument (HTTP 422); the worker's
memory limit stays the last line.

**XML entities, in one place and whatever precedes them.** Every member is read through (inflated
in :data:`CHUNK_BYTES` pieces, never held whole), whatever its name and whatever its first bytes: the
readers find parts through relationships and manifests, which may name any file (issue 27), and
the parsers behind them (mammoth, python-pptx's lxml, calamine, defusedxml) do not agree on what may
precede a DOCTYPE (100 spaces before it got entities past a check of the first 64 bytes: issue 49).
An entity can only be declared with the keyword ``<!ENTITY`` written in the part's own encoding (a
document's DTD is never loaded from elsewhere: no reader here loads external DTDs), so a member is
refused when that keyword appears in it as UTF-8 or any ASCII-compatible encoding, UTF-16 or UTF-32
(either byte order), or in the encoding its XML declaration names (decoded: in UTF-7 ``+ADw-`` is
``<``, and EBCDIC is not ASCII at all); a declared encoding Python does not know is refused too
(OOXML, ODF and EPUB allow UTF-8 and UTF-16 only). A refused part is named, so nothing is silently
lost: the entities are neither expanded nor dropped. A DOCTYPE without entities (an EPUB's XHTML
DOCTYPE) is read as before.
"""

from __future__ import annotations

import codecs
import io
import re
import zipfile
import zlib

from ingest.errors import UnreadableDocument

MAX_MEMBERS = 10_000
MAX_INFLATED_BYTES = 256 * 1024**2  # all members together, as declared (zipfile never reads past it)
MAX_RATIO = 200  # inflated / compressed, for members over RATIO_FLOOR bytes; DOCX XML is ~10-30
RATIO_FLOOR = 1024**2
PROLOG_BYTES = 64 * 1024
CHUNK_BYTES = 1024**2  # a member is searched for entity declarations this much at a time
ENTITY = "<!ENTITY"
#: The keyword in UTF-8 (and every ASCII-compatible encoding), UTF-16 and UTF-32, both byte orders.
_ENTITY_BYTES = tuple(ENTITY.encode(c) for c in ("utf-8", "utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"))
_OVERLAP = max(len(m) for m in _ENTITY_BYTES) - 1
#: The encoding an XML declaration names (in the member's first KiB, NUL bytes taken out for UTF-16).
_DECLARED = re.compile(
    rb"""^(?:\xef\xbb\xbf|\xff\xfe|\xfe\xff)?\s*<\?xml\b[^>]{0,200}?encoding\s*=\s*["']([A-Za-z0-9._:-]{1,40})["']"""
)
#: What zipfile raises for a damaged member: a bad CRC or header, a truncated stream, an encrypted
#: member (RuntimeError) or an unsupported compression method (NotImplementedError).
ZIP_ERRORS = (zipfile.BadZipFile, OSError, ValueError, EOFError, RuntimeError, NotImplementedError, zlib.error)


def zip_names(data: bytes) -> frozenset[str]:
    """The member names of a ZIP (its kind is told by them: ingest/formats.py); UnreadableDocument for a broken one."""
    try:
        return frozenset(zipfile.ZipFile(io.BytesIO(data)).namelist())
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise UnreadableDocument(f"the file is a broken ZIP archive ({exc}); re-save or re-export it") from exc


ODS_MIMETYPE = "application/vnd.oasis.opendocument.spreadsheet"


def mimetype(data: bytes) -> str:
    """The ``mimetype`` member of an OpenDocument (or EPUB) ZIP, at most 100 bytes of it."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)).open("mimetype") as f:
            return f.read(100).decode("ascii", "replace").strip()
    except ZIP_ERRORS:
        return ""


def ods_content(data: bytes) -> bool:
    """An OpenDocument without a ``mimetype`` member whose content holds a spreadsheet body."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)).open("content.xml") as f:
            return b"office:spreadsheet" in f.read(PROLOG_BYTES)
    except ZIP_ERRORS:
        return False


def check_container(data: bytes) -> None:
    """Raise UnreadableDocument for a ZIP bomb or XML entity declarations (module docstring)."""
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
        if m.is_dir():
            continue
        try:
            why = entity_declarations(archive, m)
        except ZIP_ERRORS as exc:
            raise UnreadableDocument(f"the archive member {m.filename!r} is damaged ({exc}); re-save it") from exc
        if why is not None:
            raise UnreadableDocument(
                f"the archive member {m.filename!r} declares XML entities ({why}), which docqa neither expands (an "
                "entity-expansion bomb?) nor drops; re-save the document without them"
            )


def entity_declarations(archive: zipfile.ZipFile, member: zipfile.ZipInfo) -> str | None:
    """What in ``member`` declares (or may declare) XML entities, or None (module docstring). Reads the
    member in CHUNK_BYTES pieces; raises what zipfile raises for a damaged one (ZIP_ERRORS)."""
    with archive.open(member) as f:
        head = f.read(CHUNK_BYTES)
        decoder = None
        declared = _DECLARED.search(head[:1024].replace(b"\0", b""))
        if declared is not None:
            name = declared.group(1).decode("ascii")
            try:
                info = codecs.lookup(name)
            except LookupError:
                return f"an encoding docqa cannot check, {name!r}"
            if not info.name.startswith(("utf-8", "utf-16", "utf-32", "ascii")):  # UTF-7's "+ADw-" is "<" too
                decoder = codecs.getincrementaldecoder(info.name)(errors="replace")
        tail, text_tail, chunk = b"", "", head
        while chunk:
            window = tail + chunk
            if any(m in window for m in _ENTITY_BYTES):
                return f"{ENTITY} in the part's bytes"
            if decoder is not None:
                text = text_tail + decoder.decode(chunk)
                if ENTITY in text:
                    return f"{ENTITY} in its declared encoding, {declared.group(1).decode('ascii')}"
                text_tail = text[-len(ENTITY) :]
            tail = window[-_OVERLAP:]
            chunk = f.read(CHUNK_BYTES)
    return None
