"""The page at four window sizes (two in make test), in a real browser against a real server: upload, ask, and see the
answer, its statistics and a highlighted citation, each one inside the viewport once scrolled to and
covered by nothing (Playwright visibility and bounding boxes, plus a hit test at the element)."""

from __future__ import annotations

import pytest

from tests.web.pages import OWN_STATS, PDF, QUOTE, document_tokens

SIZES = [(390, 844), (1024, 768), (1280, 720), (1920, 1080)]
ONE_COLUMN_BELOW = 900  # px: one scrolling column below, three panels from here
# The four sizes as parameters: make test runs the narrowest on each side of ONE_COLUMN_BELOW (where
# a layout wraps first), make test-slow the two wider ones too.
VIEWPORTS = [pytest.param(w, h, id=f"{w}x{h}", marks=pytest.mark.slow if w > 1024 else ()) for w, h in SIZES]


@pytest.mark.parametrize(("width", "height"), VIEWPORTS)
def test_upload_ask_and_see_everything(open_page, cases, width, height):
    p = open_page(width, height)
    page = p.page
    p.upload(cases / PDF)  # 202 and a prefill the first time, 200 (already uploaded) after that

    updates = "window.__answerUpdates"
    page.evaluate(
        f"""() => {{ {updates} = 0; new MutationObserver(() => {updates}++).observe(
              document.querySelector('#thread'), {{subtree: true, childList: true, characterData: true}}); }}"""
    )
    answer = p.ask(QUOTE, max_tokens=32)
    assert page.get_attribute("#thread .turn:last-child", "class") == "turn done"
    assert "misfits" in answer.lower(), answer
    assert page.evaluate(updates) > 3  # streamed, not delivered at once

    # Layout: one column that scrolls as a document, or three panels side by side filling the window.
    panels = [page.locator(s).bounding_box() for s in (".docs-panel", ".qa-panel", ".viewer-panel")]
    scroll_height = page.evaluate("document.scrollingElement.scrollHeight")
    if width < ONE_COLUMN_BELOW:
        assert all(abs(b["x"] - panels[0]["x"]) < 1 for b in panels), panels
        assert panels[0]["y"] + panels[0]["height"] <= panels[1]["y"] <= panels[2]["y"], panels
        assert scroll_height > height  # the page scrolls; panels are not squeezed into the screen
    else:
        assert all(abs(b["y"] - panels[0]["y"]) < 1 for b in panels), panels
        assert panels[0]["x"] + panels[0]["width"] <= panels[1]["x"] < panels[2]["x"], panels
        assert all(b["y"] + b["height"] <= height + 0.5 for b in panels), panels
        assert scroll_height <= height + 1
    assert page.evaluate("document.scrollingElement.scrollWidth") <= width  # no sideways scrolling

    # Everything a person needs, on screen after scrolling to it.
    doc = page.locator("#doc-list li.doc.selected")
    p.assert_in_view(doc, "the uploaded document")
    assert doc.bounding_box()["width"] > 150
    n_tokens = document_tokens(page)
    for selector, what in [
        ("#upload", "the Upload button"),
        ("#question", "the question box"),
        ("#ask", "the Ask button"),
        ("#stop", "the Stop button"),
        ("#thread .turn:last-child .answer", "the answer"),
        ("#stats", "the statistics"),
        ("#viewer mark.cite >> nth=0", "the highlighted citation"),
        ("#citations li >> nth=0", "the citation list"),
    ]:
        p.assert_in_view(page.locator(selector), what)
    assert "misfits" in page.locator("#viewer mark.cite").first.inner_text().lower()
    assert "p. 1" in page.inner_text("#citations")

    # No statistic is cut: every value fits its box, and every box is inside the statistics block.
    clipped = page.evaluate(
        """() => { const box = document.querySelector('#stats').getBoundingClientRect();
             return [...document.querySelectorAll('#stats dd')].filter((dd) => {
               const r = dd.getBoundingClientRect();
               return dd.scrollWidth > dd.clientWidth + 1 || r.left < box.left - 0.5 || r.right > box.right + 0.5;
             }).map((dd) => dd.dataset.stat + '=' + dd.textContent); }"""
    )
    assert clipped == []
    assert page.locator(OWN_STATS).count() == 10
    assert p.stat("finish") in ("stop", "length")
    assert p.stat("cached") == n_tokens  # the document came from its saved state

    p.screenshot(f"page-{width}x{height}.png", update="phone.png" if width == 390 else None)
    assert p.problems == []  # no script errors, no failed request (favicon included)
