"""docqa as an MCP server (the Model Context Protocol, on the official SDK ``mcp``: its ``MCPServer``):
the tools and resources, written against docqa's own HTTP API, so that both transports are one
implementation:

* ``docqa mcp`` (server/tools/cli.py) runs them over stdio, as desktop assistants and editors start an
  MCP server, calling the docqa server at ``--url`` / DOCQA_URL with its API key;
* the running server serves them itself at ``/mcp`` (streamable HTTP, server/api/mcp_http.py), behind
  the same API key as every route, calling its own service layer in-process (server/api/mcp_local.py:
  the functions the routes call, not HTTP again).

The tools see docqa through the few calls of :class:`DocqaApi` (its documents, a document and its text,
the collections, a question, an upload), which both backends answer with the routes' JSON.

Tools: ``list_documents``, ``list_collections``, ``ingest_file`` (a path over stdio, where the
assistant and the file are on one machine; the file's bytes as base64 over HTTP, where a path would
name the server's files), ``ask`` (a document or a collection; the answer with its citations as
structured content, each with a ``ref``), and ``get_passage`` (the quoted text of a ``ref``, with what
stands around it). Every ready document is also a resource, ``docqa://documents/<id>``: its text.

An API error becomes the tool's error result (``isError``) with docqa's own type and message ("
document_not_found: no document with id 'x'; list them with the list_documents tool": the routes a
message names for HTTP clients are named as the tools that do the same, :func:`in_tool_words`), and
an unknown resource an MCP error; nothing a client sends crashes the server. An answer's citations
name their document (``document_name``), as ``get_passage`` does.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
from collections.abc import Awaitable
from pathlib import Path
from typing import Protocol, TypeVar

import httpx
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.types import Resource
from pydantic import BaseModel, Field

from ingest import formats
from ingest.locate import Locator
from server.engine.events import read_so_far

RESOURCE = "docqa://documents/{document_id}"
INGEST_TIMEOUT_S = 3600.0  # longest ingest_file waits for a document to be ready
POLL_S = 0.5
CONTEXT_CHARS = 200  # get_passage: characters of the text before and after the quote
#: A document or collection id as docqa makes them (16 hex digits), with room for other stores' ids; an
#: argument that is not one never reaches a URL path (a newline or "../" in it did).
ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
T = TypeVar("T")
REF = re.compile(r"(?P<id>[A-Za-z0-9_-]{1,64}):(?P<start>[0-9]{1,12})-(?P<end>[0-9]{1,12})")


class DocumentInfo(BaseModel):
    id: str
    name: str
    status: str  # ingesting | ready | failed
    kind: str
    pages: int
    tokens: int
    error: str | None = None
    source_path: str | None = None  # a watched folder's file it was read from
    read_at: float | None = None


class Documents(BaseModel):
    documents: list[DocumentInfo]


class CollectionInfo(BaseModel):
    id: str
    name: str
    status: str
    document_ids: list[str]


class Collections(BaseModel):
    collections: list[CollectionInfo]


class Citation(BaseModel):
    ref: str = Field(description="give it to get_passage for the quoted text in its context")
    document_id: str
    document_name: str | None = None
    start: int  # character offsets into the document's text, [start, end)
    end: int
    page: int
    page_end: int
    where: str | None = None  # a spreadsheet's cell ("Sheet2!B7") or a slide ("slide 3 notes")
    text: str


class Answer(BaseModel):
    answer: str
    citations: list[Citation]
    finish_reason: str
    read_so_far: str | None = Field(
        default=None,
        description="set when the document was still being read: the answer comes from the part read so far",
    )


class Passage(BaseModel):
    ref: str
    document_id: str
    document_name: str
    start: int
    end: int
    page: int
    where: str | None = None
    text: str  # exactly the cited characters
    before: str  # up to CONTEXT_CHARS characters before them
    after: str


class ApiError(Exception):
    """An error answer of the docqa API (``type``: server/config/errors.py STATUS), or no server."""


#: The routes an API error message names for HTTP clients, and the tools an MCP client has for them.
_TOOL_WORDS = [
    (re.compile(r"GET /v1/documents(?![/\w])"), "the list_documents tool"),
    (re.compile(r"GET /v1/collections(?![/\w])"), "the list_collections tool"),
    (re.compile(r"GET /v1/models(?![/\w])"), "the list_documents tool"),
    (re.compile(r"POST /v1/documents(?![/\w])"), "the ingest_file tool"),
    (re.compile(r" ?\(POST /v1/documents/[^)\s]*/reingest\)"), ""),
]


def in_tool_words(message: str) -> str:
    """``message`` with the HTTP routes it names replaced by the MCP tools that do the same ("list them
    with GET /v1/documents" -> "list them with the list_documents tool"): an assistant has no routes."""
    for pattern, words in _TOOL_WORDS:
        message = pattern.sub(words, message)
    return message


class Api(Protocol):
    """What the tools call: each returns what its route returns (its JSON), or raises :class:`ApiError`."""

    async def documents(self) -> list[dict]: ...
    async def document(self, doc_id: str) -> dict: ...
    async def text(self, doc_id: str) -> dict: ...
    async def collections(self) -> list[dict]: ...
    async def ask(self, question: str, max_tokens: int, document_id: str | None, collection_id: str | None) -> dict: ...
    async def upload(self, name: str, data: bytes) -> dict: ...


class DocqaApi:
    """docqa's HTTP API for the tools: ``client`` has the server's base URL and its key. Each call
    returns what the route returns (its JSON), or raises :class:`ApiError` (``type: message``);
    server/api/mcp_local.py answers the same calls in-process."""

    def __init__(self, client: httpx.AsyncClient, where: str) -> None:
        self.client, self.where = client, where

    async def call(self, method: str, path: str, **kwargs) -> dict:
        try:
            r = await self.client.request(method, path, **kwargs)
        except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:  # the ids are checked first; never a traceback
            raise ApiError(f"the request path {path!r} is not valid ({exc})") from None
        except httpx.TransportError as exc:
            raise ApiError(
                f"no docqa server answers at {self.where} ({type(exc).__name__}); start one with `docqa serve`, "
                "or give `docqa mcp --url`"
            ) from None
        if r.status_code >= 400:
            try:
                error = r.json()["error"]
                raise ApiError(f"{error['type']}: {in_tool_words(error['message'])}")
            except (ValueError, KeyError, TypeError):
                raise ApiError(f"HTTP {r.status_code}: {r.text[:300]}") from None
        return r.json() if r.content else {}

    async def documents(self) -> list[dict]:
        return (await self.call("GET", "/v1/documents"))["documents"]

    async def document(self, doc_id: str) -> dict:
        return await self.call("GET", f"/v1/documents/{doc_id}")

    async def text(self, doc_id: str) -> dict:
        """The document's text and its page map (``text``, ``pages``)."""
        return await self.call("GET", f"/v1/documents/{doc_id}/text")

    async def collections(self) -> list[dict]:
        return (await self.call("GET", "/v1/collections"))["collections"]

    async def ask(self, question: str, max_tokens: int, document_id: str | None, collection_id: str | None) -> dict:
        """A question to a document (``document_id``) or else a collection, answered whole."""
        path = f"/v1/documents/{document_id}" if document_id else f"/v1/collections/{collection_id}"
        return await self.call("POST", f"{path}/answers", json={"question": question, "max_tokens": max_tokens})

    async def upload(self, name: str, data: bytes) -> dict:
        """The file uploaded: the document's ``id``, ``name``, ``status``."""
        return await self.call("POST", "/v1/documents", files={"file": (name, data)})


def build(api: Api, read_paths: bool) -> MCPServer:
    """The MCP server over ``api`` (over HTTP to a docqa server, or the app's services in-process:
    server/api/mcp_local.py).
    ``read_paths``: ``ingest_file`` may read a path (stdio: the assistant's own machine)."""

    class DocqaMCP(MCPServer):
        async def list_resources(self) -> list[Resource]:
            """The static resources, and every ready document (its text)."""
            listed = await super().list_resources()
            try:
                docs = await api.documents()
            except ApiError:
                return listed
            return listed + [
                Resource(
                    uri=RESOURCE.format(document_id=d["id"]),
                    name=d["name"],
                    mime_type="text/plain",
                    description=f"{d['kind']}, {d['pages']} page(s), {d['tokens']} tokens",
                )  # fmt: skip
                for d in docs
                if d["status"] == "ready"
            ]

    server = DocqaMCP(
        "docqa",
        instructions=(
            "Ask questions about documents on this machine; each answer quotes them, and its citations name the "
            "page (a spreadsheet's cell, a slide). list_documents first, then ask with a document_id or a "
            "collection_id; get_passage shows a citation in its context."
        ),
    )

    async def calling(reply: Awaitable[T]) -> T:
        try:
            return await reply
        except ApiError as exc:
            raise ToolError(str(exc)) from None

    @server.tool(description="The documents on the docqa server: id, name, status, kind, size, and the watched file.")
    async def list_documents() -> Documents:
        docs = await calling(api.documents())
        return Documents(documents=[DocumentInfo(**_fields(DocumentInfo, d)) for d in docs])

    @server.tool(description="The collections (documents asked together): id, name, status, their documents.")
    async def list_collections() -> Collections:
        found = await calling(api.collections())
        ids = {c["id"]: [d["id"] for d in c["documents"]] for c in found}
        return Collections(
            collections=[
                CollectionInfo(id=c["id"], name=c["name"], status=c["status"], document_ids=ids[c["id"]]) for c in found
            ]
        )

    @server.tool(
        description=(
            f"Read a file into docqa ({formats.names()}: {' '.join(formats.suffixes())}) and wait until it can be "
            "asked about. Give `path` (a file on this machine) or `content_base64` with `name`."
        )
    )
    async def ingest_file(
        path: str | None = None, content_base64: str | None = None, name: str | None = None, wait: bool = True
    ) -> DocumentInfo:
        if (path is None) == (content_base64 is None):
            raise ToolError("give either path or content_base64 (with name)")
        if path is not None:
            if not read_paths:
                raise ToolError("this server does not read paths over HTTP: send the file's bytes as content_base64")
            try:
                data = await asyncio.to_thread(Path(path).expanduser().read_bytes)
            except OSError as exc:
                raise ToolError(f"cannot read {path}: {exc.strerror}") from None
            name = name or Path(path).name
        else:
            try:
                data = base64.b64decode(content_base64 or "", validate=True)
            except (binascii.Error, ValueError):
                raise ToolError("content_base64 is not base64") from None
        created = await calling(api.upload(name or "document", data))
        doc = await calling(api.document(created["id"]))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + INGEST_TIMEOUT_S
        while wait and doc["status"] == "ingesting" and loop.time() < deadline:
            await asyncio.sleep(POLL_S)
            doc = await calling(api.document(created["id"]))
        return DocumentInfo(**_fields(DocumentInfo, doc))

    @server.tool(
        description=(
            "Ask a question about one document (document_id) or a collection (collection_id). Returns the answer "
            "and the passages it quotes (page, cell or slide, and a ref for get_passage)."
        )
    )
    async def ask(
        question: str, document_id: str | None = None, collection_id: str | None = None, max_tokens: int = 256
    ) -> Answer:
        if (document_id is None) == (collection_id is None):
            raise ToolError("give either document_id or collection_id")
        _check_id("document_id", document_id)
        _check_id("collection_id", collection_id)
        reply = await calling(api.ask(question, max_tokens, document_id, collection_id))
        names: dict[str, str] = {}  # a single document's citations come without its name: asked once
        for c in reply["citations"]:
            doc_id = c.get("document_id") or document_id
            if c.get("document_name"):
                names.setdefault(doc_id, c["document_name"])
            elif doc_id not in names:
                names[doc_id] = (await calling(api.document(doc_id)))["name"]
        citations = [
            Citation(ref=f"{c.get('document_id') or document_id}:{c['start']}-{c['end']}",
                     document_id=c.get("document_id") or document_id,
                     **(_fields(Citation, c, "document_id", "document_name")
                        | {"document_name": names[c.get("document_id") or document_id]}))
            for c in reply["citations"]
        ]  # fmt: skip
        read = read_so_far(reply["partial"]) if reply.get("partial") else None
        return Answer(
            answer=reply["answer"], citations=citations, finish_reason=reply["stats"]["finish_reason"], read_so_far=read
        )

    @server.tool(description="The text a citation quotes (its `ref` from ask), with what stands before and after it.")
    async def get_passage(ref: str, context_chars: int = CONTEXT_CHARS) -> Passage:
        found = REF.fullmatch(ref)
        if found is None:
            raise ToolError(f"{ref!r} is not a citation ref (<document id>:<start>-<end>, as ask returns it)")
        doc_id, start, end = found["id"], int(found["start"]), int(found["end"])
        doc = await calling(api.document(doc_id))
        body = await calling(api.text(doc_id))
        text, pages = body["text"], body["pages"]
        if not 0 <= start < end <= len(text):
            raise ToolError(f"{ref!r} lies outside the document's {len(text)} characters")
        starts = [p["start"] for p in pages]
        first = pages[0]["page"] if pages else 1
        page = next((p["page"] for p in reversed(pages) if p["start"] <= start), first)
        context = max(0, min(context_chars, 5000))
        return Passage(
            ref=ref, document_id=doc_id, document_name=doc["name"], start=start, end=end, page=page,
            where=Locator(text, doc["kind"], starts or [0], first).where(start, end), text=text[start:end],
            before=text[max(0, start - context) : start], after=text[end : end + context],
        )  # fmt: skip

    @server.resource(RESOURCE, mime_type="text/plain", description="A document's extracted text")
    async def document_text(document_id: str) -> str:
        if ID.fullmatch(document_id) is None:
            raise ResourceNotFoundError(f"{document_id[:80]!r} is not a document id")
        try:
            return (await api.text(document_id))["text"]
        except ApiError as exc:
            raise ResourceNotFoundError(str(exc)) from None

    return server


def _check_id(argument: str, value: str | None) -> None:
    """ToolError unless ``value`` (None: not given) looks like an id of docqa's (:data:`ID`)."""
    if value is not None and ID.fullmatch(value) is None:
        raise ToolError(
            f"{argument} {value[:80]!r} is not an id: letters, digits, '-' and '_' only (as list_documents and "
            "list_collections give them)"
        )


def _fields(model: type[BaseModel], values: dict, *without: str) -> dict:
    """The items of ``values`` that ``model`` has fields for (the API returns more)."""
    return {k: v for k, v in values.items() if k in model.model_fields and k not in without}
