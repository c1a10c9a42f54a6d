"""The page's words and states: errors for people, the API key, switching to a document that is still
being prepared, document warnings, long names, slow uploads."""

from __future__ import annotations

import re

import pytest

from ingest.pdf import OCR_NOTE
from tests.ingest.samples import first_pages
from tests.web.pages import API_KEY, OWN_STATS, PDF, QUOTE

LOCKED = "pdf/sample-files/005-libreoffice-writer-password/libreoffice-writer-password.pdf"  # ENC-01
LOCKED_PASSWORD = "openpassword"
NOT_A_PDF = "synthetic/png-renamed-to.pdf"  # BRK-06
TOO_LONG = "text/gutenberg/around-the-world-in-80-days-pg103.txt"  # LONG-01, ~90k tokens
LONG_PDF = "pdf/sample-files/009-pdflatex-geotopo/GeoTopo-komprimiert.pdf"  # PDF-11, 117 pages, ~57k tokens
AGREEMENT = "synthetic/agreement-880-tokens.txt"
ALICE = "text/gutenberg/alice-in-wonderland-pg11.txt"  # 165 KiB


def _upload_error(p, path):
    p.page.set_input_files("#file", str(path))
    p.page.click("#upload")
    message = p.page.locator("#upload-status .error-message")
    message.wait_for(timeout=60_000)
    return message


def test_upload_errors_are_sentences_for_people(open_page, cases):
    p = open_page(1024, 768)
    page = p.page

    locked = _upload_error(p, cases / LOCKED)
    assert locked.locator(".error-sentence").inner_text() == (
        "This PDF is locked with a password. Type the password in the “PDF password” field and upload it again."
    )
    assert page.evaluate("document.activeElement.id") == "password"
    assert "needed" in page.get_attribute("#password", "class")
    assert "form field" not in locked.inner_text()  # the API's wording is folded away...
    locked.locator("summary").click()
    assert "send its password in the `password` form field" in locked.locator("code").inner_text()  # ...unchanged
    page.fill("#password", LOCKED_PASSWORD)
    p.upload(cases / LOCKED)  # the same file again, now with its password
    # The text is fetched once the document is selected ready: wait for it, not for the list alone.
    page.wait_for_function("document.querySelector('#viewer').textContent.includes('Lorem ipsum')")
    assert "needed" not in (page.get_attribute("#password", "class") or "")

    not_pdf = _upload_error(p, cases / NOT_A_PDF)
    assert not_pdf.locator(".error-sentence").inner_text() == (
        "docqa cannot read this kind of file. It reads PDF, Word, Excel, PowerPoint, OpenDocument spreadsheet, "
        "EPUB, HTML, CSV/TSV and text files."  # the labels of ingest/formats.py's table, from GET /v1/formats
    )
    too_long = _upload_error(p, cases / TOO_LONG)
    # n_ctx 8192 minus the 1024-token answer reserve, from GET /health.
    assert too_long.locator(".error-sentence").inner_text() == (
        "This document is too long for this server (at most 3,072 tokens, about 2,304 words). "
        "Split it into smaller parts and upload them one by one."
    )
    too_long.locator("summary").click()
    assert "DOCQA_N_CTX" in too_long.locator("code").inner_text()
    # The only failures were the three refused uploads (and the console's note of each).
    assert all(re.search(r"\b(413|415|422)\b", line) for line in p.problems), p.problems


def test_api_key_field(open_page, cases):
    p = open_page(1024, 768, key=None)
    page = p.page
    page.wait_for_selector("#key-status.error")
    assert page.inner_text("#key-status") == "This server needs an API key."
    assert page.evaluate("document.activeElement.id") == "api-key"
    assert "No documents yet" not in page.inner_text("#doc-list"), "never claimed before the list is read"
    # the list says so too once its own request is refused (the key status may come first, from another)
    page.wait_for_selector("#doc-list:has-text('This server needs an API key.')")

    page.fill("#api-key", "not-the-key")
    page.press("#api-key", "Enter")
    page.wait_for_selector("#key-status:has-text('the one entered was not accepted')")

    sent: list[tuple[str, str, str | None]] = []
    page.on("request", lambda r: "/v1/" in r.url and sent.append((r.method, r.url, r.headers.get("authorization"))))
    page.fill("#api-key", API_KEY)
    page.press("#api-key", "Enter")
    page.wait_for_selector("#doc-list li:not(:has(.error-message))")
    assert page.inner_text("#key-status") == ""
    p.upload(cases / PDF)  # XMLHttpRequest upload
    p.ask(QUOTE, max_tokens=8)  # streamed fetch
    assert page.get_attribute("#thread .turn:last-child", "class") == "turn done"
    kinds = {(method, re.sub(r"/[0-9a-f]{16}", "/{id}", url.split("/v1/", 1)[1])) for method, url, _ in sent}
    assert {
        ("GET", "documents"),
        ("POST", "documents"),
        ("GET", "documents/{id}"),
        ("POST", "chat/completions"),
    } <= kinds
    assert {auth for _, _, auth in sent} == {f"Bearer {API_KEY}"}

    # Kept for this tab (sessionStorage): a reload needs no new key.
    assert page.evaluate("sessionStorage.getItem('docqa.apiKey')") == API_KEY
    page.reload()
    page.wait_for_selector("#doc-list li.doc")
    assert page.input_value("#api-key") == API_KEY
    assert page.inner_text("#key-status") == ""
    assert all(" 401 " in line or "401 (Unauthorized)" in line for line in p.problems), p.problems


def test_new_upload_replaces_the_previous_document_everywhere(open_page, cases):
    """While a new upload is prepared, no panel shows the previous document's text, answer or stats."""
    p = open_page(1280, 720)
    page = p.page
    p.upload(cases / PDF)
    p.ask(QUOTE, max_tokens=32)
    page.locator("#viewer mark.cite").first.wait_for()
    assert page.locator(OWN_STATS).count() == 10

    name = "Agreement between the Crazy Ones appreciation society and its members, signed copy (final).txt"
    held = {"ingesting": True}  # report the new document as 40% prepared until released

    def hold(route):
        response = route.fetch()
        body = response.json()
        if held["ingesting"] and body.get("name") == name:
            body.update(status="ingesting", progress=0.4, reading=None)  # the real reading may be busy
        route.fulfill(response=response, json=body)

    page.route(re.compile(r".*/v1/documents/[0-9a-f]{16}$"), hold)
    page.set_input_files(
        "#file", files=[{"name": name, "mimeType": "text/plain", "buffer": (cases / AGREEMENT).read_bytes()}]
    )
    page.click("#upload")
    page.wait_for_selector("#doc-list li.doc.selected.status-ingesting")

    assert page.inner_text("#selected-name") == f"— {name}" and page.inner_text("#selected-state") == "preparing 40%"
    assert page.get_attribute("#viewer-name", "title") == name
    # Its own text, as soon as it is extracted (issue 51: "Its text appears here when it is ready"
    # although the text was there), never the previous document's.
    page.wait_for_function("document.querySelector('#viewer').textContent.includes('Storage agreement.')")
    viewer = page.inner_text("#viewer")
    assert "misfits" not in viewer.lower() and "Clause 1. market forest lantern" in viewer
    assert page.locator("#thread .turn").count() == 0
    # 40 % read: it may be asked already, and is answered from the part read (issue 52)
    assert "You can ask already: an answer comes from the part read so far" in page.inner_text("#thread")
    assert page.locator("#stats dd").count() == 0
    assert page.locator("#citations li").count() == 0
    assert not page.is_disabled("#ask")
    # A long name wraps in the list (up to four lines: issue 39 item 8), and is whole in its tooltip.
    shown = page.locator("#doc-list li.doc.selected .doc-name")
    assert shown.get_attribute("title") == name
    assert shown.evaluate("(el) => el.scrollWidth <= el.clientWidth && el.clientHeight > 40")

    held["ingesting"] = False
    page.wait_for_selector("#doc-list li.doc.selected.status-ready")
    page.wait_for_function("document.querySelector('#viewer').textContent.startsWith('Storage agreement.')")
    # Back to the first document: its conversation, statistics and highlight are kept.
    page.click("#doc-list li.doc:has-text('crazyones.pdf')")
    assert page.locator("#thread .turn.done").count() == 1
    assert page.locator(OWN_STATS).count() == 10
    page.locator("#viewer mark.cite").first.wait_for()
    assert p.problems == []


def test_document_warnings_are_shown(open_page, cases):
    """`warnings` ([{page, message}]) is a field the API may add to documents; the page lists them."""
    p = open_page(390, 844)
    page = p.page
    doc_id = p.upload(cases / PDF)
    warning = {"page": 1, "message": "some characters have no Unicode mapping and may be wrong"}

    def with_warning(route):
        response = route.fetch()
        body = response.json()
        for doc in body["documents"]:
            if doc["id"] == doc_id:
                doc["warnings"] = [warning]
        route.fulfill(response=response, json=body)

    page.route(re.compile(r".*/v1/documents$"), with_warning)
    page.reload()
    item = page.locator(f"#doc-list li.doc[data-id='{doc_id}'] .doc-warnings li")
    p.assert_in_view(item, "the document's warning")
    assert item.inner_text() == "Page 1: some characters have no Unicode mapping and may be wrong"
    assert p.problems == []


def test_pages_read_by_ocr_are_noted_as_one_line(open_page, tesseract):
    """Issue 30: a PDF with two scanned pages among typed ones, through the real server (DOCQA_OCR
    defaults to auto): the document says which pages were read by OCR, in one line, and its text
    holds the scanned words."""
    from testkit.scans import CARD, mixed_pdf
    from tests.ingest.samples import pdf

    data = mixed_pdf(
        [("text", "Typed page one."), ("scan", "Scanned page two."), ("scan", "Scanned page three."), ("text", "4.")],
        pdf,
        inches=CARD,
    )
    p = open_page(390, 844)
    doc_id = p.upload(name="mixed-scan.pdf", data=data)
    item = p.page.locator(f"#doc-list li.doc[data-id='{doc_id}'] .doc-warnings li")
    p.assert_in_view(item, "the OCR note")
    assert item.inner_text() == f"Pages 2–3: {OCR_NOTE}"
    p.page.wait_for_function("document.querySelector('#viewer').textContent.includes('Scanned page three.')")
    assert p.problems == []


def test_slow_upload_shows_progress_and_the_favicon_loads(open_page, cases):
    p = open_page(390, 844)
    page = p.page
    assert page.evaluate("fetch(document.querySelector('link[rel=icon]').href).then((r) => r.status)") == 200
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    # 150 kB/s up: the 165 KiB file takes about a second to send.
    cdp.send(
        "Network.emulateNetworkConditions",
        {"offline": False, "latency": 20, "downloadThroughput": -1, "uploadThroughput": 150_000},
    )
    p.record_texts("#upload-status", "__uploads")
    _upload_error(p, cases / ALICE)  # too long for n_ctx 8192: the server refuses it after reading it
    texts = page.evaluate("window.__uploads")
    percents = [
        int(m.group(1)) for t in texts if (m := re.fullmatch(r"Uploading alice-in-wonderland-pg11\.txt: (\d+)%", t))
    ]
    assert any(0 < pct < 100 for pct in percents), texts
    assert "Reading alice-in-wonderland-pg11.txt…" in texts
    assert page.is_enabled("#upload")


@pytest.mark.slow  # ~14-20 s; the 413 and its pages that fit are checked by the CLI (test_cli.py) and test_parts.py
def test_a_document_longer_than_the_context_offers_its_leading_pages(open_page, cases, tmp_path):
    """A PDF over the budget (GeoTopo's first 30 pages, ~15k tokens against 3,072; the whole book
    took 8 s to read, twice): the error offers the pages that fit, and one click ingests them; the
    part keeps its name and page numbers."""
    p = open_page(1024, 768)
    page = p.page
    long_pdf = tmp_path / "GeoTopo-komprimiert.pdf"
    long_pdf.write_bytes(first_pages(cases / LONG_PDF, 30))
    too_long = _upload_error(p, long_pdf)
    offer = too_long.locator("button.offer")
    label = offer.inner_text()
    assert re.fullmatch(r"Ingest pages 1–\d+", label), label
    last = int(label.rsplit("–", 1)[1])
    p.assert_in_view(offer, "the offer to ingest the pages that fit")
    offer.click()
    p.wait_selected_ready(f"GeoTopo-komprimiert.pdf (pages 1-{last})", timeout_ms=180_000)
    assert f"{last} pages" in page.inner_text("#doc-list li.doc.selected .doc-meta")
    assert page.locator("#viewer .page-marker").last.inner_text() == f"Page {last}"
    assert all(re.search(r"\b413\b", line) for line in p.problems), p.problems


def test_the_read_so_far_line_is_the_servers(open_page):
    """The page words an answer from the part read (or a collection's answer that leaves out documents
    still being read) as the server does for the CLI and the OpenAI route (server/engine/events.py)."""
    from server.engine.events import read_so_far

    page = open_page().page
    unread = [{"document_id": "a" * 16, "document_name": "lease.pdf", "share": 0.4}]
    for partial in (
        {"read_through": {"page": 12, "char": 40_100}, "share": 0.4, "pages": {"first": 1, "last": 30}},
        {"read_through": {"page": 1, "char": 900}, "share": 0.25, "pages": {"first": 1, "last": 1}},
        {"read_through": None, "share": 0.7, "pages": None, "unread": unread},
    ):
        shown = page.evaluate("async (p) => (await import('/static/js/chat.js')).readSoFar(p)", partial)
        assert shown == read_so_far(partial)
