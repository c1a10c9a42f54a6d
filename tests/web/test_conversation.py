"""A conversation per document: follow-ups go through POST /v1/chat/completions with the earlier turns,
answers are Markdown sanitized by DOMPurify, and the stream may carry events the page must tolerate."""

from __future__ import annotations

import json

from tests.web.pages import API_KEY, PDF, QUOTE, chunk, document_tokens, sse


def test_follow_up_reuses_the_document_and_new_conversation_clears(open_page, cases):
    p = open_page(1440, 900)
    page = p.page
    doc_id = p.upload(cases / PDF)
    sent: list[tuple[str | None, dict]] = []
    page.on(
        "request",
        lambda r: (
            r.url.endswith("/v1/chat/completions") and sent.append((r.headers.get("authorization"), r.post_data_json))
        ),
    )

    first = p.ask(QUOTE, max_tokens=48)
    assert "misfits" in first.lower(), first
    prefilled_first = int(p.stat("prefill"))
    p.ask("Which kinds of people does it name next?", max_tokens=48, verify16=False)
    assert page.locator("#thread .turn.done").count() == 2

    auth, body = sent[1]
    assert auth == f"Bearer {API_KEY}"
    assert body["model"] == f"doc:{doc_id}" and body["stream"] is True and body["verify16"] is False
    assert sent[0][1]["verify16"] is True and "draft_tokens" not in body  # empty field: adaptive window
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][0]["content"] == QUOTE
    assert "misfits" in body["messages"][1]["content"].lower()
    assert body["messages"][2]["content"] == "Which kinds of people does it name next?"
    # The document came from its saved state; only the conversation was prefilled, and the follow-up
    # prefilled more of it than the first question did.
    n_tokens = document_tokens(page)
    assert p.stat("cached") == n_tokens
    assert prefilled_first < int(p.stat("prefill")) < int(n_tokens.replace(",", ""))
    p.screenshot("conversation-1440x900.png", update="desktop.png")

    page.click("#new-conversation")
    assert page.locator("#thread .turn").count() == 0
    assert page.locator("#stats dd").count() == 0
    assert page.locator("#viewer mark.cite").count() == 0
    assert page.is_disabled("#new-conversation")
    p.ask(QUOTE, max_tokens=8)
    assert [m["role"] for m in sent[2][1]["messages"]] == ["user"]
    assert p.problems == []


MARKDOWN = (
    "**Here’s** to the crazy ones.\n\n- The misfits.\n- The rebels.\n\n"
    '<img src="/static/favicon.svg" onerror="window.__xss = 1" onload="window.__xss = 2">'
    "<script>window.__xss = 3</script>\n\n[the source](https://example.org/crazy-ones)"
)
STATS = {
    "prompt_tokens": 12,
    "cached_tokens": 270,
    "completion_tokens": 30,
    "ttft_ms": 71.0,
    "decode_tokens_per_s": 150.2,
    "drafted_tokens": 248,
    "accepted_tokens": 108,
    "verify_steps": 20,
    "finish_reason": "stop",
    "drafted_by_source": {"mtp": 0, "lookup": 248},
    "accepted_by_source": {"mtp": 0, "lookup": 108},
    "mean_accepted_per_step": 5.4,
}


def test_stream_events_markdown_empty_answer_and_stream_errors(open_page, cases):
    """The chat stream is replaced (page.route) by scripted ones: keep-alive comments, a `queued` event,
    an unknown event, a role-only first chunk; then an empty answer; then an error inside the stream."""
    p = open_page(1280, 720)
    page = p.page
    doc_id = p.upload(cases / PDF)
    text = p.document_text(doc_id)
    start = text.index("The misfits. The rebels.")
    citation = {"start": start, "end": start + 24, "page": 1, "page_end": 1, "text": "The misfits. The rebels."}
    bodies = [
        sse(
            ": keep-alive",
            'event: queued\ndata: {"position": 2}',
            ": keep-alive",
            'event: something_new\ndata: {"the page": "ignores it"}',
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": MARKDOWN[:40]}),
            chunk({"content": MARKDOWN[40:]}),
            chunk({}, "stop", citations=[{**citation, "source": "lookup"}], docqa=STATS),
            "data: [DONE]",
        ),
        # The model stopped at once: 3 completion tokens (end-of-turn markers), no content.
        sse(
            chunk({"role": "assistant", "content": ""}),
            chunk({}, "stop", citations=[], docqa={**STATS, "completion_tokens": 3, "drafted_tokens": 0}),
            "data: [DONE]",
        ),
        sse(
            chunk({"role": "assistant", "content": ""}),
            {"error": {"type": "kv_cache_full", "message": "the KV cache is full with other answers in progress"}},
        ),
    ]
    requests: list[dict] = []

    def fulfil(route):
        requests.append(route.request.post_data_json)
        route.fulfill(status=200, headers={"content-type": "text/event-stream"}, body=bodies[len(requests) - 1])

    page.route("**/v1/chat/completions", fulfil)
    p.record_texts("#ask-status", "__statuses")

    # 1. Markdown, sanitized; events the page does not know are ignored.
    p.ask("Summarise the beginning as a list.")
    turn = page.locator("#thread .turn:last-child")
    assert turn.get_attribute("class") == "turn done"
    assert turn.locator(".answer strong").inner_text() == "Here’s"
    assert turn.locator(".answer li").all_inner_texts() == ["The misfits.", "The rebels."]
    assert turn.locator(".answer img, .answer script, #thread [onerror], #thread [onload]").count() == 0
    link = turn.locator(".answer a")
    assert link.get_attribute("href") == "https://example.org/crazy-ones"
    assert link.get_attribute("target") == "_blank" and "noopener" in link.get_attribute("rel")
    page.wait_for_timeout(200)  # an image that slipped through would have loaded by now
    assert page.evaluate("window.__xss") is None
    assert "Waiting in line (2 ahead)…" in page.evaluate("window.__statuses")
    assert page.inner_text("#ask-status") == "Done."
    assert page.locator("#viewer mark.cite").inner_text() == "The misfits. The rebels."
    assert turn.locator(".turn-cites").inner_text() == "1 quote · p. 1"
    # Drafted first, accepted second, in both places.
    assert p.stat("drafts") == "248 / 108 (44%)"
    assert p.stat("sources") == "lookup 248 / 108"  # sources that drafted nothing are left out

    # 2. An empty answer says what happened and what to try.
    p.ask("And then?")
    note = page.locator("#thread .turn:last-child .empty-answer")
    p.assert_in_view(note, "the empty-answer note")
    assert "stopped at once" in note.inner_text() and "(3 completion tokens, no text)" in note.inner_text()
    assert "rephrasing" in note.inner_text() and "temperature" in note.inner_text()
    assert page.inner_text("#ask-status") == "The model gave no answer."

    # 3. An error inside the stream, in words; the API's text is one click away.
    p.ask("Try once more.")
    turn = page.locator("#thread .turn:last-child")
    assert turn.get_attribute("class") == "turn error"
    assert (
        turn.locator(".error-sentence").inner_text()
        == "The server is busy with other questions. Try again in a moment."
    )
    assert not turn.locator(".error-details code").is_visible()
    turn.locator(".error-details summary").click()
    assert "KV cache is full" in turn.locator(".error-details code").inner_text()

    # The conversation sent with each question: answered turns only (the empty one is left out).
    roles = [[m["role"] for m in r["messages"]] for r in requests]
    assert roles == [["user"], ["user", "assistant", "user"], ["user", "assistant", "user"]]
    assert json.dumps(requests[2]["messages"][1]["content"]) == json.dumps(MARKDOWN)
    assert p.problems == []


def test_an_answer_marked_cannot_parse_is_shown_as_text(open_page, cases):
    """About 1,800 nested ``>`` make the vendored marked throw RangeError (markedjs/marked issue 1462
    is the same class), which stopped the page from rendering the conversation: the answer is now
    shown as plain text, and the turns around it as Markdown."""
    p = open_page(1280, 720)
    page = p.page
    p.upload(cases / PDF)
    deep = ">" * 1800 + " deep"
    answers = ["**First** answer.", deep, "**Third** answer."]
    requests: list[dict] = []

    def fulfil(route):
        requests.append(route.request.post_data_json)
        text = answers[len(requests) - 1]
        body = sse(
            chunk({"role": "assistant", "content": ""}), chunk({"content": text}), chunk({}, "stop"), "data: [DONE]"
        )
        route.fulfill(status=200, headers={"content-type": "text/event-stream"}, body=body)

    page.route("**/v1/chat/completions", fulfil)
    for question in ("One?", "Two?", "Three?"):
        p.ask(question)
        assert page.inner_text("#ask-status") == "Done."
    turns = page.locator("#thread .turn")
    assert turns.count() == 3 and turns.nth(1).get_attribute("class") == "turn done"
    assert turns.nth(1).locator(".answer").inner_text() == deep
    assert turns.nth(0).locator(".answer strong").inner_text() == "First"
    assert turns.nth(2).locator(".answer strong").inner_text() == "Third"
    assert p.problems == []


def test_the_newest_answer_is_in_view_and_a_reload_keeps_the_conversation(open_page, cases):
    """Issue 51 at 1366x900 (three panels): after a third question the thread stayed at the top and
    the answer sat below the panel's edge while the status said "Done." (the statistics appearing
    under the thread shrank it); and a reload lost the conversation. Now the newest answer is in the
    thread's visible area, and the conversation is kept in the browser until it is cleared."""
    p = open_page(1366, 900)
    page = p.page
    doc_id = p.upload(cases / PDF)
    questions = [QUOTE, "Quote it once more, from its first word.", "And quote it a third time, please."]
    answers = [p.ask(q, max_tokens=96) for q in questions]
    assert all(a.strip() for a in answers) and page.inner_text("#ask-status") == "Done."
    thread = page.locator("#thread")
    assert thread.evaluate("(el) => el.scrollHeight > el.clientHeight + 100"), "three answers overflow the thread"
    page.wait_for_timeout(300)  # a late resize (the statistics) has had its frame
    box, last = thread.bounding_box(), page.locator("#thread .turn:last-child .answer").bounding_box()
    assert box["y"] - 1 <= last["y"] + last["height"] <= box["y"] + box["height"] + 1, (box, last)
    assert last["y"] + min(last["height"], 40) >= box["y"], "the answer's end, at least, is in view"

    page.reload()
    page.wait_for_selector("#doc-list li.doc.selected.status-ready")
    turns = page.locator("#thread .turn")
    assert turns.count() == 3 and page.locator("#thread .turn.done").count() == 3
    assert [t.strip() for t in page.locator("#thread .turn .answer").all_inner_texts()] == [a.strip() for a in answers]
    assert page.locator("#thread .turn:last-child .turn-cites").count() == 1, "its citations are kept too"
    assert p.stat("completion") != "", "and the latest answer's statistics"
    assert page.is_enabled("#export") and page.is_enabled("#new-conversation")

    page.click("#new-conversation")
    page.reload()
    page.wait_for_selector("#doc-list li.doc.selected.status-ready")
    assert page.locator("#thread .turn").count() == 0, "cleared, it stays cleared"
    assert page.evaluate(f"localStorage.getItem('docqa.thread.{doc_id}')") is None
    # A document of its own, deleted after a question: its conversation goes with it.
    own = p.upload(name="kept-then-deleted.txt", data=b"The ferry to Morrow leaves at 06:40 from the east pier.\n")
    p.ask("When does the ferry leave?", max_tokens=8)
    assert page.evaluate(f"localStorage.getItem('docqa.thread.{own}')") is not None
    page.on("dialog", lambda dialog: dialog.accept())
    page.click(f"#doc-list li.doc[data-id='{own}'] .delete")
    page.wait_for_function(f"!document.querySelector(\"#doc-list li.doc[data-id='{own}']\")")
    assert page.evaluate(f"localStorage.getItem('docqa.thread.{own}')") is None, "deleted with its document"
    assert p.problems == []
