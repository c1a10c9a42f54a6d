"""Several documents asked together from the page (web/js/together.js, issue 30 item 3): two checked
documents become a collection; the answer comes from the one holding the fact, its quotes button
names that document, and the viewer opens it with the quote highlighted. At 390 px, the narrowest
width the page is checked at (tests/web/test_page_ux.py), so that the checkboxes are usable there."""

from __future__ import annotations

from tests.server.service.test_collections import FERRY, LIGHTHOUSE, QUESTIONS


def test_two_checked_documents_are_asked_together(open_page):
    p = open_page(390, 844)
    page = p.page
    light = p.upload(name="lighthouse.txt", data=LIGHTHOUSE.encode())
    ferry = p.upload(name="ferry.md", data=FERRY.encode())
    assert page.is_hidden("#together")

    for doc_id in (light, ferry):
        box = page.locator(f"#doc-list li.doc[data-id='{doc_id}'] input.pick")
        p.assert_in_view(box, "the ask-together checkbox")
        box.check()
        if doc_id == light:
            assert "Check one more document" in page.inner_text("#together")
    assert "Asking 2 documents together" in page.inner_text("#together")
    assert page.inner_text("#selected-name") == "— lighthouse.txt + ferry.md"
    assert page.locator("#doc-list li.doc.selected").count() == 2

    question, name, words, page_no = QUESTIONS[2]
    p.assert_in_view(page.locator("#question"), "the question box")
    answer = p.ask(question, max_tokens=32)
    assert words in answer.lower(), answer
    assert page.inner_text("#thread .turn:last-child .turn-segments") == f"answered from {name}"
    cites = page.locator("#thread .turn:last-child .turn-cites")
    assert cites.count() == 1 and cites.inner_text().startswith(f"{name} · "), cites.all_inner_texts()
    assert f"p. {page_no}" in cites.inner_text()
    # The viewer opened the quoted document and highlights the quote.
    page.wait_for_function("() => document.querySelector('#viewer-name').textContent === '— ferry.md'")
    assert words in page.inner_text("#viewer mark.cite").lower()

    # A second question, about the other document: the viewer follows the quote to it, and the
    # collection the page made (the server's own) is asked again, not made twice.
    question, name, words, _ = QUESTIONS[0]
    assert words in p.ask(question, max_tokens=32).lower()
    assert page.inner_text("#thread .turn:last-child .turn-cites").startswith(f"{name} · ")
    page.wait_for_function("() => document.querySelector('#viewer-name').textContent === '— lighthouse.txt'")
    made = page.evaluate(
        """() => fetch('/v1/collections',
                 {headers: {Authorization: 'Bearer ' + sessionStorage.getItem('docqa.apiKey')}})
                 .then((r) => r.json())"""
    )["collections"]
    mine = [c for c in made if {d["id"] for d in c["documents"]} == {light, ferry}]
    assert len(mine) == 1 and mine[0]["name"] == "lighthouse.txt + ferry.md", made

    # "Ask one at a time" goes back to one document.
    page.click("#together button")
    assert page.is_hidden("#together") and page.locator("#doc-list input.pick:checked").count() == 0
    assert page.locator("#doc-list li.doc.selected").count() <= 1
    assert p.problems == []
