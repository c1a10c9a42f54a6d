"""DOCX and EPUB: ZIP containers of XML, checked for bombs, then read by mammoth and ebooklib.

* DOCX: mammoth (https://github.com/mwilliamson/python-mammoth) maps Word's semantic styles to
  HTML (Heading N to ``<hN>``, list paragraphs to ``<ul>``/``<ol>``, tables to ``<table>``,
  footnotes to a list at the end); ``ingest/markup.py`` turns that into Markdown-like text. Images
  are not decoded (only their alt text is kept). One page: a DOCX has no fixed pages.
* EPUB: ebooklib (https://github.com/aerkalov/ebooklib) reads the package and its spine; each spine
  document with text (a chapter, usually) becomes one page of the page map.

Before either library sees the bytes, :func:`check_container` refuses a ZIP bomb (too many members,
too many bytes once inflated, or a member that inflates more than :data:`MAX_RATIO` times) and XML
entity declarations in any XML member (the "billion laughs" expansion, external entities), using
defusedxml. Both fail as UnreadableDocument (HTTP 422); the worker's memory limit stays the last line.
"""

from __future__ import annotations

import io
import zipfile
from xml.etree.ElementTree import ParseError

from ingest.errors import UnreadableDocument, UnsupportedType
from ingest.markup import decode_html, html_to_text

MAX_MEMBERS = 10_000
MAX_INFLATED_BYTES = 256 * 1024**2  # all members together, as declared (zipfile never reads past it)
MAX_RATIO = 200  # inflated / compressed, for members over RATIO_FLOOR bytes; DOCX XML is ~10-30
RATIO_FLOOR = 1024**2
_XML_SUFFIXES = (".xml", ".rels", ".opf", ".ncx", ".xhtml", ".html", ".htm", ".svg", ".smil")


def container_kind(data: bytes) -> str:
    """``"docx"`` or ``"epub"`` for a ZIP with the parts that make one; UnsupportedType otherwise."""
    try:
        names = set(zipfile.ZipFile(io.BytesIO(data)).namelist())
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise UnreadableDocument(f"the file is a broken ZIP archive ({exc}); re-save or re-export it") from exc
    if "word/document.xml" in names:
        return "docx"
    if "META-INF/container.xml" in names:
        return "epub"
    what = "a spreadsheet (XLSX)" if "xl/workbook.xml" in names else "a ZIP archive"
    if "ppt/presentation.xml" in names:
        what = "a presentation (PPTX)"
    elif "content.xml" in names:
        what = "an OpenDocument file (ODT/ODS)"
    raise UnsupportedType(
        f"the file is {what}, not a document docqa reads; upload a PDF, DOCX, EPUB, HTML, .txt or .md file"
    )


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
        if not m.filename.lower().endswith(_XML_SUFFIXES):
            continue
        try:
            fromstring(archive.read(m), forbid_dtd=False, forbid_entities=True, forbid_external=True)
        except DefusedXmlException as exc:
            raise UnreadableDocument(
                f"the archive member {m.filename!r} declares XML entities ({type(exc).__name__}), which docqa "
                "does not expand (an entity-expansion bomb?); re-save the document"
            ) from exc
        except ParseError:
            pass  # malformed XML (or HTML entities in XHTML): the reading library decides
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
            raise UnreadableDocument(f"the archive member {m.filename!r} is damaged ({exc}); re-save it") from exc


def docx_pages(data: bytes) -> list[str]:
    """The text of a DOCX as one Markdown-like page. Raises UnreadableDocument."""
    import mammoth

    check_container(data)
    no_images = mammoth.images.img_element(lambda image: {"alt": image.alt_text or ""})
    try:
        result = mammoth.convert_to_html(io.BytesIO(data), convert_image=no_images)
    except Exception as exc:  # mammoth raises KeyError/ValueError/... for broken parts: all "unreadable"
        raise UnreadableDocument(
            f"the DOCX could not be read ({type(exc).__name__}: {exc}); open and re-save it in a word processor"
        ) from exc
    return [html_to_text(result.value)]


def epub_pages(data: bytes) -> list[str]:
    """The text of each spine document of an EPUB that has any (chapters, in reading order).
    Raises UnreadableDocument."""
    import ebooklib
    from ebooklib import epub

    check_container(data)
    try:
        book = epub.read_epub(io.BytesIO(data), options={"ignore_ncx": True})
        pages = []
        for idref, _linear in book.spine:
            item = book.get_item_with_id(idref)
            if item is None or item.get_type() != ebooklib.ITEM_DOCUMENT:
                continue
            text = html_to_text(decode_html(item.get_content())[0])
            if text.strip():
                pages.append(text)
    except Exception as exc:  # ebooklib raises EpubException, KeyError, lxml errors, ...: all "unreadable"
        raise UnreadableDocument(
            f"the EPUB could not be read ({type(exc).__name__}: {exc}); re-export it from its editor"
        ) from exc
    return pages
