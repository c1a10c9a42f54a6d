"""What a new user met on the page in issue 39 ("The first hour, round three"), each at 390 px (one
column) and 1366 px (three panels): a quote button that left the highlight below the screen's edge
(item 4), a busy machine shown as a broken one (item 6, with issue 36 item 7: the reading's rate and
time left), names cut to "google-doc-…" and "Ask — G…" (item 8), and an upload queued behind questions
shown as "preparing 0 %" (item 12)."""

from __future__ import annotations

import re

import pytest

from tests.web.pages import PDF, chunk, sse
from tests.web.test_page_ux import STATS, STREAM, _own_text

SIZES = [(390, 844), (1366, 768)]
IDS = [f"{w}x{h}" for w, h in SIZES]
DOC_URL = re.compile(r".*/v1/documents/[0-9a-f]{16}$")


def _answer_with(page, citations: list[dict], stats: dict) -> None:
    end = chunk({}, "stop", citations=citations, docqa=stats)
    body = sse(chunk({"content": "The misfits, quoted."}), end, "data: [DONE]")
    page.route("**/v1/chat/completions", lambda route: route.fulfill(status=200, headers=STREAM, body=body))


@pytest.mark.parametrize(("width", "height"), SIZES, ids=IDS)
@pytest.mark.parametrize("view", ["text", "pdf"])
def test_a_quote_button_brings_the_highlight_into_view(open_page, cases, width, height, view):
    """Item 4: at 390 px the page did not scroll, and the highlight was below the screen's edge."""
    p = open_page(width, height)
    page = p.page
    doc_id = p.upload(cases / PDF)
    if view == "pdf":
        page.click("#show-pdf")
        page.wait_for_selector("#pdf-view .pdf-page[data-page='1'].drawn", timeout=30_000)
    text = p.document_text(doc_id)
    start = text.index("The misfits.")
    cite = {"start": start, "end": start + 12, "page": 1, "page_end": 1, "source": "lookup", "text": "The misfits."}
    _answer_with(page, [cite], STATS)
    p.ask("Quote it.")
    page.evaluate("window.scrollTo(0, 0)")  # as a person reading the answer at the top would be
    page.locator("#thread .turn:last-child .turn-cites").click()
    mark = page.locator("#pdf-view mark.pdf-cite.focused" if view == "pdf" else "#viewer mark.cite.focused").first
    mark.wait_for(timeout=30_000)
    page.wait_for_timeout(300)
    box = mark.bounding_box()
    assert box and 0 <= box["y"] and box["y"] + box["height"] <= height, (view, box)  # on screen, not scrolled by hand
    p.screenshot(f"first-hour-quote-{view}-{width}.png")
    assert p.problems == []


@pytest.mark.parametrize(("width", "height"), SIZES, ids=IDS)
def test_long_names_are_shown_whole(open_page, cases, width, height):
    """Item 8: the list showed "google-doc-…" and "girl-in-his-mi…" at 1366 px, the heading "Ask — G…" at 390."""
    p = open_page(width, height)
    page = p.page
    name = f"girl-in-his-mind-by-robert-f-young-{width}.txt"  # a name of its own at each width
    p.upload(name=name, data=_own_text(cases, f"long names at {width}"))
    page.wait_for_selector("#doc-list li.doc.selected.status-ready .pick")  # ready: its checkbox takes room too
    item = page.locator("#doc-list li.doc.selected .doc-name")
    heading = page.locator("#qa-title")
    for what, node in (("the list", item), ("the Ask heading", heading)):
        clipped = node.evaluate("(el) => el.scrollHeight > el.clientHeight + 1 || el.scrollWidth > el.clientWidth + 1")
        assert not clipped, f"{what} cuts the name at {width} px: {node.inner_text()!r}"
    assert item.inner_text() == name and name in page.inner_text("#selected-name")
    assert heading.bounding_box()["height"] < 70  # three lines at most, beside its buttons
    h2, button = heading.bounding_box(), page.locator("#new-conversation").bounding_box()
    assert abs(h2["y"] + h2["height"] / 2 - (button["y"] + button["height"] / 2)) < 4  # still on one line with them
    p.screenshot(f"first-hour-names-{width}.png")
    assert p.problems == []


@pytest.mark.parametrize(("width", "height"), SIZES, ids=IDS)
def test_a_reading_says_it_waits_its_rate_and_a_busy_machine(open_page, cases, width, height):
    """Items 6 and 12: the reading as the server reports it (server/engine/reading.py): waiting its
    turn behind questions, then its rate and the time left, and a busy machine named, never "0.0 tok/s";
    and an answer's stats say when the machine was busy."""
    p = open_page(width, height)
    page = p.page
    p.upload(cases / PDF)
    name = f"queued-behind-questions-{width}.txt"
    reading = {"waiting": True, "ahead": 2, "documents_ahead": 0, "tokens_done": 0, "tokens_total": 900,
               "tokens_per_s": None, "seconds_left": None, "busy": None}  # fmt: skip

    def preparing(route):
        response = route.fetch()
        body = response.json()
        if body.get("name") == name:
            body.update(status="ingesting", progress=reading["tokens_done"] / 900, reading=dict(reading))
        route.fulfill(response=response, json=body)

    page.route(DOC_URL, preparing)
    page.set_input_files("#file", files=[{"name": name, "mimeType": "text/plain", "buffer": _own_text(cases, name)}])
    page.click("#upload")
    meta = page.locator("#doc-list li.doc.selected .doc-meta")
    page.wait_for_selector("#doc-list li.doc.selected.status-ingesting")
    page.wait_for_function(
        "document.querySelector('#doc-list li.doc.selected .doc-meta').textContent.includes('waiting')",
        timeout=20_000,
    )
    assert meta.inner_text().startswith("waiting its turn (2 questions are being answered first)"), meta.inner_text()
    reading.update(waiting=False, ahead=0, tokens_done=360, tokens_per_s=38.2, seconds_left=14.1)
    page.wait_for_function(
        "document.querySelector('#doc-list li.doc.selected .doc-meta').textContent.includes('tok/s')", timeout=20_000
    )
    assert meta.inner_text().startswith("preparing 40% · 38 tok/s · about 15 s left"), meta.inner_text()
    reading.update(tokens_per_s=0.4, seconds_left=1320.0, busy="load average 8.2 on 2 cores")
    page.wait_for_function(
        "document.querySelector('#doc-list li.doc.selected .doc-meta').textContent.includes('busy')", timeout=20_000
    )
    assert "0.4 tok/s · about 22 min left · machine busy (load average 8.2 on 2 cores)" in meta.inner_text()
    # The Ask heading has one short state, not the list's whole line a second time (issue 51).
    assert page.inner_text("#selected-name") == f"— {name}"
    assert page.inner_text("#selected-state") == "preparing 40% · about 22 min left"
    p.screenshot(f"first-hour-reading-{width}.png")
    page.unroute(DOC_URL)

    # An answer on a busy machine: the stats say so, in a row of their own.
    page.click(f"#doc-list li.doc:has-text('{PDF.rsplit('/', 1)[-1]}')")
    _answer_with(page, [], {**STATS, "decode_tokens_per_s": 0.1, "busy": "load average 8.2 on 2 cores"})
    p.ask("Anything.")
    assert p.stat("busy") == "load average 8.2 on 2 cores: these times are slower than usual"
    p.assert_in_view(page.locator("#stats dd[data-stat='busy']"), "the busy machine's note")


@pytest.mark.parametrize(("width", "height"), SIZES, ids=IDS)
def test_a_queued_reading_shows_its_place_and_wait_in_one_line_that_fits(open_page, cases, width, height):
    """Issue 51: while a document waited, the Ask heading was cut mid-parenthesis ("(waiting its turn (4
    documents are read first) · machine busy (load…"), and the same status was on screen three times.
    Now the list has the whole line, with the place in the queue and the expected wait; under the
    heading, one short state that fits; the upload's note says it once."""
    p = open_page(width, height)
    page = p.page
    name = f"queued-behind-documents-{width}.txt"
    reading = {"waiting": True, "paused": False, "ahead": 0, "position": 5, "documents_ahead": 4, "tokens_done": 0,
               "tokens_total": 520, "tokens_per_s": 41.0, "seconds_to_start": 640.0, "seconds_left": 652.7,
               "busy": "load average 8.2 on 2 cores"}  # fmt: skip

    def queued(route):
        response = route.fetch()
        body = response.json()
        if body.get("name") == name:
            body.update(status="ingesting", progress=reading["tokens_done"] / 520, reading=dict(reading))
        route.fulfill(response=response, json=body)

    page.route(DOC_URL, queued)
    page.set_input_files("#file", files=[{"name": name, "mimeType": "text/plain", "buffer": _own_text(cases, name)}])
    page.click("#upload")
    page.wait_for_selector("#doc-list li.doc.selected.status-ingesting")
    meta = page.locator("#doc-list li.doc.selected .doc-meta")
    page.wait_for_function(
        "document.querySelector('#doc-list li.doc.selected .doc-meta').textContent.includes('min left')",
        timeout=20_000,
    )
    assert meta.inner_text().startswith(
        "waiting its turn (4 documents are read first) · about 11 min left · machine busy (load average 8.2 on 2 cores)"
    ), meta.inner_text()
    assert page.inner_text("#selected-name") == f"— {name}"
    state = page.locator("#selected-state")
    assert state.inner_text() == "waiting: 5th in line · about 11 min left"
    for node in (page.locator("#qa-title"), state):
        assert not node.evaluate("(el) => el.scrollHeight > el.clientHeight + 1 || el.scrollWidth > el.clientWidth + 1")
    assert state.bounding_box()["height"] < 24, "one line"
    shown = page.inner_text("body")
    assert shown.count("4 documents are read first") == 1 and shown.count("11 min left") == 2, shown
    reading.update(paused=True, position=2, documents_ahead=1, tokens_done=208, seconds_left=300.0)
    page.wait_for_function(
        "document.querySelector('#doc-list li.doc.selected .doc-meta').textContent.includes('paused')", timeout=20_000
    )
    assert meta.inner_text().startswith("paused at 40% (a shorter document is read first) · about 5 min left")
    assert state.inner_text() == "paused at 40% · about 5 min left"
    p.screenshot(f"first-hour-queue-{width}.png")
    page.unroute(DOC_URL)


TWO_PARTS = [
    {"index": i, "pages": [1, 1], "start": 0, "end": 10, "tokens": 200, "part": i + 1, "parts": 2,
     "label": f"part {i + 1} of 2"}
    for i in range(2)
]  # fmt: skip


@pytest.mark.parametrize(("width", "height"), SIZES, ids=IDS)
def test_a_document_to_read_again_says_why_and_re_reads_on_a_click(open_page, cases, width, height):
    """Items 9 and 11: a document read for a larger context says why it must be read again, and its
    Re-read button reads it again (POST .../reingest, then its progress); one split for a smaller
    context than today's says its parts now fit whole, with the same button."""
    p = open_page(width, height)
    page = p.page
    name = f"read-for-a-larger-context-{width}.txt"
    doc_id = p.upload(name=name, data=_own_text(cases, name))
    why = "its saved state holds 6,534 tokens, more than the 3,072 a document may hold now"
    state = {"unfit": True, "split": False, "reingested": 0}

    def marked(route):
        response = route.fetch()
        body = response.json()
        for doc in body.get("documents", [body]):
            if doc.get("id") == doc_id and doc.get("status") == "ready":
                if state["unfit"]:
                    doc["needs_reingest"] = why
                if state["split"]:
                    doc["segments"] = TWO_PARTS
        route.fulfill(response=response, json=body)

    def reingest(route):
        state["reingested"] += 1
        state["unfit"] = False
        route.continue_()

    page.route(re.compile(r".*/v1/documents(/[0-9a-f]{16})?$"), marked)
    page.route(re.compile(r".*/v1/documents/[0-9a-f]{16}/reingest$"), reingest)
    page.reload()
    p.wait_selected_ready(name)
    item = page.locator("#doc-list li.doc.selected")
    assert f"Must be read again before it can be asked: {why}." in item.inner_text()
    assert "must be read again" in item.locator(".doc-meta").inner_text()
    p.assert_in_view(item.locator("button.reread"), "the Re-read button")
    item.locator("button.reread").click()
    page.wait_for_function(
        "(id) => { const li = document.querySelector(`#doc-list li.doc[data-id='${id}']`);"
        " return li && li.classList.contains('status-ready') && !li.querySelector('.doc-reread'); }",
        arg=doc_id,
        timeout=120_000,
    )
    assert state["reingested"] == 1

    state["split"] = True  # two parts of 400 tokens in all, where 3,072 fit: split for a smaller context
    page.reload()
    p.wait_selected_ready(name)
    note = page.locator("#doc-list li.doc.selected .doc-split")
    assert note.inner_text().startswith("In 2 parts, split when the server read fewer tokens at once"), (
        note.inner_text()
    )
    assert "now fit in one piece" in note.inner_text() and "more than the" not in note.inner_text()
    p.assert_in_view(page.locator("#doc-list li.doc.selected button.reread"), "the Re-read button of a split document")
    p.screenshot(f"first-hour-reread-{width}.png")
    page.unroute(re.compile(r".*/v1/documents(/[0-9a-f]{16})?$"))
