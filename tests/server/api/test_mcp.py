"""docqa as an MCP server (server/api/mcp_tools.py, mcp_http.py; server/tools/mcp_stdio.py), driven by the
SDK's own client: over stdio, started as a desktop assistant starts it (the ``docqa`` command with
``mcp``), and over streamable HTTP on the running server behind its API key; a real question on the
embedded model, its citations read and looked up."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
from pathlib import Path

import httpx
import pytest

from testkit.live import ROOT, Live

KEY = "mcp-test-key"
LONG = "The warehouse in Leeds keeps the spare boiler parts on the second shelf from the left."
QUESTION = "Copy, word for word, the sentence that begins with 'The warehouse in Leeds keeps the spare'"


@pytest.fixture(scope="module")
def live(tmp_path_factory, gemma_path):
    server = Live(tmp_path_factory.mktemp("mcp") / "data", gemma_path, DOCQA_API_KEY=KEY).start()
    yield server
    server.stop()


def _structured(result) -> dict:
    assert not result.is_error, result.content
    return result.structured_content


async def _stdio_session(live: Live, notes: Path) -> dict:
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    # As an assistant's configuration starts it: the command, "mcp", and the server's URL and key in env.
    params = StdioServerParameters(
        command=str(Path(sys.executable).parent / "docqa"),
        args=["mcp"],
        env={"DOCQA_URL": f"http://127.0.0.1:{live.port}", "DOCQA_API_KEY": KEY, "PYTHONPATH": str(ROOT)},
        cwd=str(ROOT),
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = {t.name for t in (await session.list_tools()).tools}
        doc = _structured(await session.call_tool("ingest_file", {"path": str(notes)}))
        answer = _structured(
            await session.call_tool("ask", {"question": QUESTION, "document_id": doc["id"], "max_tokens": 40})
        )
        passage = (
            _structured(await session.call_tool("get_passage", {"ref": answer["citations"][0]["ref"]}))
            if answer["citations"]
            else None
        )
        listed = _structured(await session.call_tool("list_documents", {}))
        collections = _structured(await session.call_tool("list_collections", {}))
        missing = await session.call_tool("ask", {"question": "Who?", "document_id": "nosuchdoc"})
        bad_ref = await session.call_tool("get_passage", {"ref": "not a ref"})
        resources = (await session.list_resources()).resources
        text = (await session.read_resource(f"docqa://documents/{doc['id']}")).contents[0].text
        return dict(tools=tools, doc=doc, answer=answer, passage=passage, listed=listed, collections=collections,
                    missing=missing, bad_ref=bad_ref, resources=resources, text=text)  # fmt: skip


async def _http_session(live: Live, doc_id: str, notes: Path, ref: str | None) -> dict:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {KEY}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0)) as http,
        streamable_http_client(f"http://127.0.0.1:{live.port}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tools = {t.name for t in (await session.list_tools()).tools}
        answer = _structured(
            await session.call_tool("ask", {"question": QUESTION, "document_id": doc_id, "max_tokens": 40})
        )
        by_path = await session.call_tool("ingest_file", {"path": "/etc/hostname"})
        content = base64.b64encode(notes.read_bytes()).decode()
        doc = _structured(await session.call_tool("ingest_file", {"content_base64": content, "name": "notes.txt"}))
        passage = _structured(await session.call_tool("get_passage", {"ref": ref})) if ref else None
        listed = _structured(await session.call_tool("list_documents", {}))
        collections = _structured(await session.call_tool("list_collections", {}))
        missing = await session.call_tool("ask", {"question": "Who?", "document_id": "nosuchdoc"})
        empty = await session.call_tool("ask", {"question": "", "document_id": doc_id})
        resources = (await session.list_resources()).resources
        text = (await session.read_resource(f"docqa://documents/{doc_id}")).contents[0].text
        return dict(tools=tools, answer=answer, by_path=by_path, doc=doc, passage=passage, listed=listed,
                    collections=collections, missing=missing, empty=empty, resources=resources, text=text)  # fmt: skip


def test_an_mcp_session_over_stdio_and_over_http_gets_a_cited_answer(live, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text(f"Facilities notes.\n\n{LONG}\n\nThe office in York is closed on Mondays.\n")
    got = asyncio.run(_stdio_session(live, notes))
    assert got["tools"] >= {"list_documents", "list_collections", "ingest_file", "ask", "get_passage"}
    assert got["doc"]["status"] == "ready" and got["doc"]["name"] == "notes.txt"
    answer = got["answer"]
    assert "Leeds" in answer["answer"], answer
    cited = [c for c in answer["citations"] if "Leeds" in c["text"]]
    assert cited and all(c["document_id"] == got["doc"]["id"] and c["page"] == 1 for c in cited), answer
    assert all(c["document_name"] == "notes.txt" for c in answer["citations"]), "issue 51: it was null"
    passage = got["passage"]
    c = answer["citations"][0]
    assert passage["text"] == c["text"] and passage["document_name"] == "notes.txt"
    assert (passage["before"] + passage["text"] + passage["after"]) in got["text"]
    assert [d["id"] for d in got["listed"]["documents"]] == [got["doc"]["id"]] and got["collections"] == {
        "collections": []
    }
    # Tool errors are MCP tool errors carrying docqa's own type and message.
    assert (
        got["missing"].is_error
        and "document_not_found: no document with id 'nosuchdoc'" in got["missing"].content[0].text
    )
    missing = got["missing"].content[0].text  # issue 51: it named an HTTP route, not a tool
    assert "list them with the list_documents tool" in missing and "GET /v1" not in missing, missing
    assert got["bad_ref"].is_error and "not a citation ref" in got["bad_ref"].content[0].text
    assert [str(r.uri) for r in got["resources"]] == [f"docqa://documents/{got['doc']['id']}"]
    assert LONG in got["text"]

    ref = answer["citations"][0]["ref"] if answer["citations"] else None
    http = asyncio.run(_http_session(live, got["doc"]["id"], notes, ref))
    assert http["tools"] == got["tools"]
    assert any("Leeds" in c["text"] for c in http["answer"]["citations"]), http["answer"]
    assert all(c["document_name"] == "notes.txt" for c in http["answer"]["citations"])
    assert http["by_path"].is_error and "does not read paths over HTTP" in http["by_path"].content[0].text
    # Issue 50: /mcp calls the services in-process, not HTTP; each tool says what it said over HTTP.
    assert http["doc"] == got["doc"] and http["passage"] == passage
    assert http["listed"] == got["listed"] and http["collections"] == got["collections"]
    assert http["missing"].is_error and http["missing"].content[0].text == missing
    assert http["empty"].is_error and "invalid_request: question: " in http["empty"].content[0].text
    assert [str(r.uri) for r in http["resources"]] == [str(r.uri) for r in got["resources"]]
    assert http["text"] == got["text"]
    # The HTTP endpoint is behind the API key like every route.
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    r = httpx.post(
        f"http://127.0.0.1:{live.port}/mcp", json=body, headers={"accept": "application/json, text/event-stream"}
    )
    assert r.status_code == 401 and json.loads(r.text)["error"]["type"] == "unauthorized"
    assert os.environ.get("DOCQA_API_KEY") != KEY  # the key reached the stdio server through its env only


def test_error_messages_name_the_tools_not_the_routes():
    from server.api.mcp_tools import in_tool_words

    assert in_tool_words("no collection with id 'x'; list them with GET /v1/collections") == (
        "no collection with id 'x'; list them with the list_collections tool"
    )
    assert in_tool_words("no document with id 'a' (GET /v1/documents lists them)") == (
        "no document with id 'a' (the list_documents tool lists them)"
    )
    assert in_tool_words("read it with `docqa reingest a` (POST /v1/documents/a/reingest) or the page") == (
        "read it with `docqa reingest a` or the page"
    )
    assert in_tool_words("GET /v1/documents/abc/text failed") == "GET /v1/documents/abc/text failed"


async def _bad_arguments(live: Live) -> dict:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {KEY}"}
    calls = {
        "newline id": ("ask", {"question": "Who?", "document_id": "abc\ndef"}),
        "path id": ("ask", {"question": "Who?", "collection_id": "../documents"}),
        "newline ref": ("get_passage", {"ref": "abc\n:1-5"}),
        "trailing newline": ("get_passage", {"ref": "0123456789abcdef:1-5\n"}),
        "query in ref": ("get_passage", {"ref": "x?y=1:1-5"}),
        "unknown ref": ("get_passage", {"ref": "0123456789abcdef:1-5"}),
    }
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=120.0)) as http,
        streamable_http_client(f"http://127.0.0.1:{live.port}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        return {name: await session.call_tool(tool, args) for name, (tool, args) in calls.items()}


def test_mcp_arguments_are_checked_before_they_reach_a_path(live):
    """Issue 49: ids went into URL paths unchecked, and a ref with a newline gave an error without a
    reason (and a traceback in the log). Each is now a tool error that says what is wrong."""
    log_before = live.log.read_text(errors="replace")
    got = asyncio.run(_bad_arguments(live))
    messages = {name: result.content[0].text for name, result in got.items()}
    assert all(result.is_error for result in got.values()), messages
    assert "document_id 'abc\\ndef' is not an id" in messages["newline id"]
    assert "collection_id '../documents' is not an id" in messages["path id"]
    for name in ("newline ref", "trailing newline", "query in ref"):
        assert "is not a citation ref (<document id>:<start>-<end>" in messages[name], messages[name]
    assert "document_not_found" in messages["unknown ref"]
    assert "Traceback" not in live.log.read_text(errors="replace")[len(log_before) :]
