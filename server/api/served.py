"""``GET /v1/documents/{id}/file``: the stored upload as the HTTP response, with its content type by the
document's kind, ``Content-Disposition: inline`` and a file name made from the document's name (never
from the request), and headers that keep an uploaded file from acting as a page of this site.

What is served is the upload as it was sent, whole: a document that is a part of its upload
(``pages=5-9`` / ``chars=0-50000``) gets the whole file, since its page numbers are the file's own
(ingest/cut.py), so a citation's page is the page to open in it. The name loses the part suffix
("book.pdf (pages 5-9)" is served as "book.pdf").

* An HTML or text upload could hold script: every kind but PDF is served with ``Content-Security-Policy:
  sandbox`` (a unique origin, no script), and all with ``X-Content-Type-Options: nosniff``. A PDF opens
  in the browser's PDF viewer, which runs none of the file's script as this site.
* The bytes of an id never change (a re-ingest keeps them), so the ETag is the upload's sha256 and an
  ``If-None-Match`` that names it, weakly (``W/"<sha256>"``) or not, or is ``*``, gets a 304 (RFC 9110
  §13.1.2: If-None-Match uses the weak comparison, and ``*`` matches any current representation).
* The file is streamed from disk in 64 KiB chunks (Starlette's ``FileResponse``), with ``Range``,
  ``If-Range`` and 416 as it serves them (RFC 9110 §14), never read whole: 8 parallel reads of a 50 MB
  PDF used to take a server from 591 MB to 1,025 MB. It is opened before the response starts and read
  from that open file, so a DELETE meanwhile (its directory removed) does not cut a read short.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import BinaryIO
from urllib.parse import quote

import anyio
from fastapi import Response
from starlette.responses import FileResponse
from starlette.types import Receive, Scope, Send

from ingest import formats
from server.config.errors import DocumentFailed, DocumentIngesting
from store.docstore import INGESTING, DocRecord

_PART = re.compile(r" \((?:pages|characters) [^()]+\)$")  # server/service/uploads.py display_name
_UNSAFE = re.compile(r"[^A-Za-z0-9._ ()+-]")


def file_name(doc: DocRecord) -> str:
    """The name to save the upload as: the document's name without the part suffix, ending in one of
    its kind's suffixes (ingest/formats.py; "notes.md" keeps its own, a PDF named "scan" becomes "scan.pdf")."""
    name = _PART.sub("", doc.name).strip().strip(".") or "document"
    row = formats.row(doc.kind)
    if row is None or name.lower().endswith(row.suffixes):
        return name
    return name + row.suffixes[0]


def disposition(name: str) -> str:
    """``inline`` with an ASCII ``filename`` (anything else becomes ``_``) and the real name as an
    RFC 8187 ``filename*``."""
    ascii_name = _UNSAFE.sub("_", name)
    return f"inline; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name, safe='')}"


def media_type(doc: DocRecord, name: str) -> str:
    row = formats.row(doc.kind)
    media = row.media_type if row is not None else "application/octet-stream"
    if doc.kind == "text" and name.lower().endswith((".md", ".markdown")):
        media = "text/markdown"
    if media.startswith("text/"):
        media += f"; charset={doc.encoding or 'utf-8'}"
    return media


def matches(if_none_match: str | None, etag: str) -> bool:
    """Whether an ``If-None-Match`` header value matches the strong ``etag``: ``*``, or one of its
    entity tags compared weakly (``W/`` ignored; RFC 9110 §8.8.3.2, §13.1.2)."""
    if not if_none_match:
        return False
    tags = [t.strip() for t in if_none_match.split(",")]
    return "*" in tags or any(t.removeprefix("W/") == etag for t in tags)


class OpenedFile(FileResponse):
    """A FileResponse that reads from a file opened before it was made (``opened``, closed when the
    response is done) rather than opening its path again: the path may be gone by then (a DELETE)."""

    def __init__(self, opened: BinaryIO, **kwargs) -> None:
        self.opened = opened
        super().__init__(opened.name, stat_result=os.fstat(opened.fileno()), **kwargs)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.opened.close()

    @asynccontextmanager
    async def _open_file(self) -> AsyncIterator[anyio.AsyncFile[bytes]]:  # FileResponse opens its file here
        yield anyio.wrap_file(self.opened)


def served_file(doc: DocRecord, opened: BinaryIO | None, if_none_match: str | None = None) -> Response:
    """The response for ``doc``'s stored upload, ``opened`` for reading (None: not stored; closed by
    the response). Raises DocumentIngesting (409) while the upload is still being written,
    DocumentFailed (409) when it is gone."""
    if opened is None:
        if doc.status == INGESTING:
            raise DocumentIngesting(f"document {doc.id} is still being stored; ask for its file again in a moment")
        why = f" ({doc.error})" if doc.error else ""
        raise DocumentFailed(f"document {doc.id} has no stored file{why}; upload it again")
    name = file_name(doc)
    etag = f'"{doc.sha256}"'
    headers = {
        "Content-Disposition": disposition(name),
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "private, no-cache",
        "ETag": etag,
    }
    if doc.kind != "pdf":
        headers["Content-Security-Policy"] = "sandbox"
    if matches(if_none_match, etag):
        opened.close()
        return Response(status_code=304, headers={k: v for k, v in headers.items() if k != "Content-Disposition"})
    return OpenedFile(opened, media_type=media_type(doc, name), headers=headers)
