"""The page's files (server/api/app.py ``PageFiles``): revalidated on every load, so a new server never
shows an earlier one's scripts (issue 39 item 2: the page said "docqa reads .pdf, .txt and .md files",
the words of an earlier docqa's script); and the formats its file field and refusals name are the
server's own (GET /v1/formats, from the one table in ingest/formats.py: issue 50)."""

from __future__ import annotations

import re

from ingest.formats import kinds
from testkit.live import ROOT
from tests.conftest import wait_ready
from tests.ingest.toy_format import MAGIC, toy_format  # noqa: F401  (a fixture)


def test_the_page_and_its_scripts_are_revalidated_on_every_load(client):
    for path in ("/", "/static/js/messages.js", "/static/js/app.js", "/static/style.css"):
        r = client.get(path)
        assert r.status_code == 200 and r.headers["cache-control"] == "no-cache", (path, r.headers)
    etag = client.get("/static/js/messages.js").headers["etag"]
    again = client.get("/static/js/messages.js", headers={"if-none-match": etag})
    assert again.status_code == 304 and again.headers["cache-control"] == "no-cache"  # cheap when unchanged


def test_the_page_lists_no_format_of_its_own():
    """The page's file field and its refusal sentence are filled from GET /v1/formats (web/js/app.js
    loadFormats): no suffix or format name is written in the page or its scripts."""
    page = (ROOT / "web/index.html").read_text()
    assert re.search(r'id="file"[^>]*>', page) and "accept=" not in re.search(r'id="file"[^>]*>', page).group(0)
    for source in ("web/index.html", "web/js/messages.js", "web/js/app.js"):
        text = (ROOT / source).read_text()
        assert not [word for word in (".docx", ".xlsx", ".pptx", ".epub", "PowerPoint", "DOCX") if word in text], source


def test_a_format_added_in_one_row_is_uploaded_listed_and_named_to_mcp(toy_format, client):  # noqa: F811
    """Issue 50: one row (and its reader) is a format: an upload of it is read, GET /v1/formats (the
    page's list, public like /health) lists it, its file is served as its media type, and the MCP
    tool that reads files names it."""
    listed = client.get("/v1/formats").json()
    assert listed["formats"][0] == {
        "kind": "toy", "label": "Toy", "suffixes": [".toy"], "media_type": "application/x-docqa-toy"
    }  # fmt: skip
    assert [f["kind"] for f in listed["formats"]] == list(kinds()) and "Toy" in listed["accepted"]
    data = MAGIC + b"The toy format's first page.\fIts second page says hello."
    r = client.post("/v1/documents", files={"file": ("notes", data)})
    assert r.status_code in (200, 202), r.text
    doc = wait_ready(client, r.json()["id"])
    assert (doc["status"], doc["kind"], doc["pages"]) == ("ready", "toy", 2), doc
    served = client.get(f"/v1/documents/{doc['id']}/file")
    assert served.content == data and served.headers["content-type"] == "application/x-docqa-toy"
    assert 'filename="notes.toy"' in served.headers["content-disposition"]
    assert "Toy" in _mcp_tool_text("ingest_file") and ".toy" in _mcp_tool_text("ingest_file")


def _mcp_tool_text(name: str) -> str:
    import asyncio

    import httpx

    from server.api.mcp_tools import DocqaApi, build

    server = build(DocqaApi(httpx.AsyncClient(base_url="http://127.0.0.1:9"), "nowhere"), read_paths=False)
    return next(t.description for t in asyncio.run(server.list_tools()) if t.name == name)
