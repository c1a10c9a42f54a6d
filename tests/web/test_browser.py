"""The web page in a real browser: Debian's chromium, headless, driven by Playwright.

No browser is downloaded: Playwright launches the system Chromium (``DOCQA_CHROMIUM``, default
/usr/bin/chromium). Without it the test skips, unless ``DOCQA_REQUIRE_BROWSER=1`` (set by .ci/run,
which installs chromium) makes that a failure.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from bench.live import ROOT, Live

CHROMIUM = os.environ.get("DOCQA_CHROMIUM", "/usr/bin/chromium")
SCREENSHOT = ROOT / "tests" / "artifacts" / "browser-answer.png"
PDF = "pdf/pypdf-resources/crazyones.pdf"
# Flags for a closed network and a root user (see the env notes): no sandbox, no background traffic.
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def browser():
    if not Path(CHROMIUM).is_file():
        if os.environ.get("DOCQA_REQUIRE_BROWSER") == "1":
            pytest.fail(f"DOCQA_REQUIRE_BROWSER=1 but {CHROMIUM} is missing (apt-get install chromium)")
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set DOCQA_CHROMIUM)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


def test_upload_ask_stream_and_see_a_cited_span(browser, tmp_path, gemma_path, cases):
    server = Live(tmp_path / "data", gemma_path).start()
    try:
        page = browser.new_page(viewport={"width": 1500, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"http://127.0.0.1:{server.port}/")
        page.wait_for_selector("#model-name:not(:text('…'))")

        # Upload a real PDF through the file input and wait for `ready` in the list.
        page.set_input_files("#file", str(cases / PDF))
        page.click("#upload")
        item = page.locator("#doc-list li.doc.selected")
        item.wait_for()
        page.wait_for_selector("#doc-list li.doc.status-ready.selected", timeout=120_000)
        assert "crazyones.pdf" in item.inner_text()
        page.wait_for_selector("#upload-status.ok")
        # The viewer pane shows the document text.
        page.wait_for_function("document.querySelector('#viewer').textContent.includes('The misfits')")

        # Ask; the answer streams in (several updates before `done`), then citations are highlighted.
        page.fill("#question", "How does the text begin?")
        page.check("#verify16")
        page.fill("#max-tokens", "64")
        page.evaluate(
            """() => { window.__updates = 0;
                new MutationObserver(() => window.__updates++).observe(
                    document.querySelector('#answer'), {subtree: true, characterData: true, childList: true}); }"""
        )
        page.click("#ask")
        page.wait_for_selector("#ask-status.ok", timeout=120_000)
        answer = page.inner_text("#answer")
        assert "misfits" in answer.lower(), answer
        assert page.evaluate("window.__updates") > 3  # streamed, not delivered at once

        mark = page.locator("#viewer mark.cite").first
        mark.wait_for()
        assert mark.is_visible()
        assert "misfits" in mark.inner_text().lower()
        assert page.locator("#citations li").count() >= 1
        assert "p. 1" in page.inner_text("#citations")
        assert page.locator("#stats dd[data-stat='finish']").inner_text() in ("stop", "length")

        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
        shutil.copyfile(tmp_path / "page.png", SCREENSHOT)
        assert SCREENSHOT.stat().st_size > 10_000
        assert errors == []
    finally:
        server.stop()
