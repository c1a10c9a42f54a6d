"""EPUB: the package's spine, read from the ZIP by the rules of the EPUB spec (OCF 3.3 §4.2.6,
``META-INF/container.xml`` names the package document; EPUB 3.3 §5, the package's ``manifest``
lists the files and the ``spine`` their reading order).

Each spine item that is HTML (``application/xhtml+xml``, or ``text/html`` as older tools declare it,
or no or another type on a file named ``.xhtml``/``.html``/``.htm``) and has text becomes one page
(except the navigation document, ``properties="nav"``: a table of contents, not text, as before),
through the same HTML path as an HTML upload (ingest/markup.py). This used to be ebooklib, which
lists only ``application/xhtml+xml`` items as documents (a ``text/html`` book came out empty) and
refuses a whole book when any manifest item is missing from the ZIP (ebooklib issue 281); only the
spine is read here, so a missing stylesheet or image costs nothing, and a missing or unreadable
chapter is skipped with a warning. The package XML goes through defusedxml (no entity expansion);
the ZIP has passed ingest/containers.py ``check_container`` before.
"""

from __future__ import annotations

import posixpath
import zipfile
from urllib.parse import unquote, urlsplit
from xml.etree.ElementTree import Element, ParseError

from ingest.containers import ZIP_ERRORS
from ingest.errors import UnreadableDocument
from ingest.markup import decode_html, html_to_text

CONTAINER = "META-INF/container.xml"
HTML_TYPES = ("application/xhtml+xml", "text/html")
HTML_SUFFIXES = (".xhtml", ".html", ".htm")
MAX_SPINE = 10_000  # as ingest/containers.py MAX_MEMBERS: a spine cannot name more documents than that


def _local(tag: object) -> str:
    """An element's name without its namespace ("{ns}item" -> "item"); "" for comments and the like."""
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _children(parent: Element | None, name: str) -> list[Element]:
    return [] if parent is None else [e for e in parent if _local(e.tag) == name]


def _child(parent: Element | None, name: str) -> Element | None:
    found = _children(parent, name)
    return found[0] if found else None


def _xml(archive: zipfile.ZipFile, name: str, what: str) -> Element:
    from defusedxml.ElementTree import fromstring

    try:
        return fromstring(archive.read(name), forbid_dtd=False, forbid_entities=True, forbid_external=True)
    except KeyError:
        raise UnreadableDocument(f"the EPUB has no {what} ({name}); re-export it from its editor") from None
    except ZIP_ERRORS as exc:
        raise UnreadableDocument(f"the EPUB's {what} ({name}) is damaged ({exc}); re-export it") from exc
    except ParseError as exc:
        raise UnreadableDocument(f"the EPUB's {what} ({name}) is not well-formed XML ({exc}); re-export it") from exc


def package_path(archive: zipfile.ZipFile) -> str:
    """The ZIP path of the package document (the first ``rootfile`` of ``META-INF/container.xml``).
    Raises UnreadableDocument."""
    root = _xml(archive, CONTAINER, "container file")
    for rootfiles in _children(root, "rootfiles"):
        for rootfile in _children(rootfiles, "rootfile"):
            path = rootfile.get("full-path")
            if path:
                return path
    raise UnreadableDocument(f"the EPUB's {CONTAINER} names no package document; re-export it from its editor")


def spine_items(archive: zipfile.ZipFile) -> list[tuple[str, str]]:
    """``(ZIP path, media type)`` of each spine item, in reading order (``linear="no"`` items too: they
    are part of the book). Idrefs the manifest lacks, and the navigation document, are left out.
    Raises UnreadableDocument."""
    opf = package_path(archive)
    package = _xml(archive, opf, "package document")
    base = posixpath.dirname(opf)
    manifest: dict[str, tuple[str, str]] = {}
    for item in _children(_child(package, "manifest"), "item"):
        href, item_id = item.get("href"), item.get("id")
        if href and item_id and "nav" not in (item.get("properties") or "").split():
            path = posixpath.normpath(posixpath.join(base, unquote(urlsplit(href).path)))
            manifest[item_id] = (path, (item.get("media-type") or "").strip().lower())
    spine = _child(package, "spine")
    if spine is None:
        raise UnreadableDocument(f"the EPUB's package document ({opf}) has no spine; re-export it from its editor")
    refs = [r.get("idref", "") for r in _children(spine, "itemref")][:MAX_SPINE]
    return [manifest[r] for r in refs if r in manifest]


def is_html(path: str, media_type: str) -> bool:
    return media_type in HTML_TYPES or path.lower().endswith(HTML_SUFFIXES)


def epub_pages(data: bytes) -> tuple[list[str], list[dict]]:
    """The text of each HTML spine document that has any (chapters, in reading order), and a warning
    for each spine document that is missing from the ZIP or could not be read (skipped). Raises
    UnreadableDocument for a book without a readable package; EmptyDocument is the caller's (no
    pages)."""
    import io

    archive = zipfile.ZipFile(io.BytesIO(data))
    pages: list[str] = []
    warnings: list[dict] = []

    def warn(message: str) -> None:
        warnings.append({"page": len(pages) + 1, "message": message})  # where the chapter would have been

    for path, media_type in spine_items(archive):
        if not is_html(path, media_type):
            continue  # an image or SVG page in the spine: no text to read
        try:
            content = archive.read(path)
        except KeyError:
            warn(f"the chapter {path} is listed in the EPUB but missing from the file; it is skipped")
            continue
        except ZIP_ERRORS as exc:
            warn(f"the chapter {path} is damaged in the file ({exc}); it is skipped")
            continue
        text = html_to_text(decode_html(content)[0])
        if text.strip():
            pages.append(text)
    if pages:
        last = len(pages)
        for w in warnings:
            w["page"] = min(w["page"], last)  # a chapter missing at the end: the last page that was read
    return pages, warnings
