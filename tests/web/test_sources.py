"""Where documents come from, on the page (issue 38): a watched folder's documents show their folder and
when they were read, and a spreadsheet's answer highlights its cell in the text view, named as the sheet
and cell, at a desktop width and a phone's."""

from __future__ import annotations

import json

import pytest

from testkit.live import Live
from tests.ingest.office_samples import xlsx
from tests.web.pages import API_KEY, DocqaPage

LONG = "The warehouse in Leeds keeps the spare boiler parts on the second shelf from the left"
COPY = "Copy, word for word, the sentence that begins with 'The warehouse in Leeds keeps the spare'"


@pytest.fixture(scope="module")
def watched(tmp_path_factory, gemma_path):
    """A server watching a folder that holds a note and a spreadsheet (read at start-up, no upload)."""
    root = tmp_path_factory.mktemp("watched")
    folder = root / "team-docs"
    folder.mkdir()
    (folder / "notes.txt").write_text("The meeting moved to Thursday at noon.\n")
    sheets = {"Summary": [["Item", "Count"], ["boilers", 3]], "Sheet2": [["Site", "Note"], ["Leeds", LONG + "."]]}
    (folder / "stock.xlsx").write_bytes(xlsx(sheets))
    server = Live(root / "data", gemma_path, DOCQA_API_KEY=API_KEY, DOCQA_WATCH=str(folder)).start(timeout=600)
    try:
        yield server, folder
    finally:
        server.stop()


@pytest.mark.parametrize("width", [1366, 390])
def test_a_watched_folder_shows_where_each_document_came_from_and_the_cited_cell(chromium, watched, width):
    server, folder = watched
    context = chromium.new_context(viewport={"width": width, "height": 800})
    context.add_init_script(f"sessionStorage.setItem('docqa.apiKey', {json.dumps(API_KEY)})")
    page = context.new_page()
    run = DocqaPage(page, width, 800)
    page.on("pageerror", lambda exc: run.problems.append(f"page error: {exc}"))
    try:
        page.goto(f"http://127.0.0.1:{server.port}/")
        for name in ("notes.txt", "stock.xlsx"):  # read from the folder, never uploaded
            item = page.locator(f"#doc-list li.doc.status-ready:has-text('{name}')")
            item.wait_for(timeout=120_000)
            source = item.locator(".doc-source").inner_text()
            assert source.startswith(("read just now", "read 1 min ago")) and "team-docs" in source, source
            assert str(folder / name) in item.locator(".doc-source").get_attribute("title")
        page.click("#doc-list li.doc:has-text('stock.xlsx')")
        run.wait_selected_ready("stock.xlsx")
        run.ask(COPY, max_tokens=40)
        mark = page.locator("#viewer mark.cite").first
        mark.wait_for()
        assert mark.get_attribute("title").startswith("Sheet2!B"), mark.get_attribute("title")
        assert "warehouse in Leeds" in page.locator("#viewer mark.cite").all_inner_texts()[0]
        assert "Sheet2!B" in page.inner_text("#thread .turn:last-child")  # the quote's button names the cell
        assert run.problems == []
    finally:
        context.close()
