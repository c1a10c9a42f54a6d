"""The page's files (server/api/app.py ``PageFiles``): revalidated on every load, so a new server never
shows an earlier one's scripts, and the page's refusal of a file names every format the API reads
(issue 39 item 2: the page said "docqa reads .pdf, .txt and .md files", the words of an earlier
docqa's script, where the file field lists DOCX, EPUB and HTML too and the API's own message is right)."""

from __future__ import annotations

import re

from ingest.formats import SUFFIXES
from testkit.live import ROOT


def test_the_page_and_its_scripts_are_revalidated_on_every_load(client):
    for path in ("/", "/static/js/messages.js", "/static/js/app.js", "/static/style.css"):
        r = client.get(path)
        assert r.status_code == 200 and r.headers["cache-control"] == "no-cache", (path, r.headers)
    etag = client.get("/static/js/messages.js").headers["etag"]
    again = client.get("/static/js/messages.js", headers={"if-none-match": etag})
    assert again.status_code == 304 and again.headers["cache-control"] == "no-cache"  # cheap when unchanged


def test_the_page_s_refusal_names_every_format_its_file_field_accepts():
    page = (ROOT / "web/index.html").read_text()
    accepted = re.search(r'id="file"[^>]*accept="([^"]+)"', page).group(1).split(",")
    assert sorted(accepted) == sorted(SUFFIXES)  # the field lists what a watched folder reads
    sentence = re.search(r"unsupported_type: '([^']+)'", (ROOT / "web/js/messages.js").read_text()).group(1)
    said = {s for s in SUFFIXES if s in sentence} | {
        s for s, word in ((".pdf", "PDF"), (".epub", "EPUB"), (".html", "HTML")) if word in sentence
    }
    variants = {".htm", ".xhtml", ".markdown"}  # other names of HTML and Markdown
    assert set(SUFFIXES) - variants - said == set(), sentence
