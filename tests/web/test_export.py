"""Taking the conversation away (issue 30): Export downloads the conversation as a Markdown file made in
the browser, with the questions, the answers and each citation's document name and page."""

from __future__ import annotations

import re

from tests.web.pages import PDF, QUOTE


def test_export_downloads_the_conversation_as_markdown(open_page, cases):
    p = open_page(1280, 720)
    page = p.page
    p.upload(cases / PDF)
    assert page.is_disabled("#export")  # nothing to export yet
    first = p.ask(QUOTE, max_tokens=32)
    assert page.locator("#citations li").count() >= 1  # the quote is cited
    second = p.ask("Which kinds of people does it name next?", max_tokens=24, verify16=False)

    with page.expect_download() as info:
        page.click("#export")
    download = info.value
    assert download.suggested_filename == "crazyones-conversation.md"
    text = open(download.path(), encoding="utf-8").read()

    assert text.startswith("# Conversation about crazyones.pdf\n")
    assert re.search(r"^Exported from docqa on \d{4}-\d\d-\d\d \d\d:\d\d UTC · model: ", text, re.M)
    assert "## Question 1\n\n> Quote the whole text of the document verbatim.\n" in text
    assert "## Question 2\n\n> Which kinds of people does it name next?\n" in text
    # The answers as the page shows them (Markdown source; the page renders it).
    answers = text.split("**Answer**")[1:]
    assert len(answers) == 2
    for shown, exported in zip((first, second), answers, strict=True):
        words = [w for w in re.findall(r"\w+", shown.lower()) if len(w) > 3][:6]
        assert all(w in exported.lower() for w in words), (shown, exported)
    # Citations: document name and page, numbered, with the quoted text between quote marks.
    cited = re.findall(r"^\d+\. crazyones\.pdf, p\. 1 \(characters \d+–\d+\): “(.+)”$", text, re.M)
    assert cited and any("misfits" in c.lower() for c in cited), text
    assert "””" not in text
    assert p.problems == []
