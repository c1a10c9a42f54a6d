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


def _node() -> str:
    """A Node.js to run the page's modules with: playwright's own (it ships one), else the system's."""
    import shutil
    from pathlib import Path

    import playwright

    bundled = Path(playwright.__file__).parent / "driver" / "node"
    found = str(bundled) if bundled.is_file() else shutil.which("node")
    assert found, "no Node.js to run web/js/export.js with"
    return found


def test_the_markdown_export_writes_no_html_of_a_document(tmp_path):
    """Last round's m7 and issue 49: a document's words, its name and a sheet's name in a citation's
    ``where`` reached the export as raw HTML (a Markdown viewer ran it); the answer's raw tags too."""
    import json
    import subprocess
    from pathlib import Path

    export = Path(__file__).resolve().parents[2] / "web" / "js" / "export.js"
    doc = {"name": "Q<1> & <i>co</i>.xlsx"}
    turns = [{
        "question": "What does <b>cell</b> B7 say?", "status": "done", "stats": {},
        "answer": "It says **three** <img src=x onerror=alert(1)> and 2 < 3.",
        "citations": [{"document_name": None, "where": "'<b>Q1</b>'!B7", "page": 1, "page_end": 1, "start": 0,
                       "end": 30, "text": "<script>alert('owned')</script>"}],
    }]  # fmt: skip
    script = tmp_path / "run.mjs"
    script.write_text(
        f"import {{ toMarkdown }} from {json.dumps(export.as_uri())};\n"
        f"process.stdout.write(toMarkdown({json.dumps(doc)}, {json.dumps(turns)}, {{exported: new Date(0)}}));\n"
    )
    text = subprocess.run([_node(), str(script)], capture_output=True, text=True, timeout=60, check=True).stdout
    assert not re.search(r"<(script|img|b|i)\b", text), text  # no tag of the document's survives
    assert "# Conversation about Q&lt;1&gt; &amp; &lt;i&gt;co&lt;/i&gt;.xlsx" in text
    assert "'&lt;b&gt;Q1&lt;/b&gt;'!B7" in text and "&lt;script&gt;alert('owned')&lt;/script&gt;" in text
    assert "It says **three** &lt;img" in text and "2 < 3" in text  # the answer's Markdown kept
    assert "> What does &lt;b&gt;cell&lt;/b&gt; B7 say?" in text
