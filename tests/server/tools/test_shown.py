"""What the CLI shows of documents and answers (server/tools/shown.py): an answer with no text, a
segmented answer's part, and a document's warnings with their pages (issue 39 item 7: the CLI's OCR
warning named no page, where the page says "Pages 1–2: read by OCR")."""

from __future__ import annotations

import json

import httpx
import pytest

from ingest.pdf import OCR_NOTE
from server.tools.client import About
from server.tools.shown import page_list, print_answer, reading_line, warning_lines


def _sse(*events: tuple[str, dict]) -> httpx.Response:
    body = "".join(f"event: {kind}\ndata: {json.dumps(data)}\n\n" for kind, data in events)
    return httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})


STATS = {"completion_tokens": 3, "ttft_ms": 20.0, "decode_tokens_per_s": 50.0, "drafted_tokens": 0}
STATS |= {"accepted_tokens": 0, "finish_reason": "stop"}


def test_an_answer_with_no_text_says_so_and_fails(capsys):
    """The model stopped at once (3 end-of-turn tokens, no text): not a blank line and exit 0."""
    empty = _sse(("token", {"text": " "}), ("citations", {"citations": []}), ("stats", STATS), ("done", {}))
    with pytest.raises(Exception) as info:
        print_answer(empty, About(doc="abc"))
    assert info.value.exit_code == 1
    message = info.value.format_message()
    assert message.startswith("the model wrote no answer (3 tokens, none of them text") and "--temperature" in message
    capsys.readouterr()
    answered = _sse(("token", {"text": "Berlin."}), ("stats", STATS), ("done", {}))
    print_answer(answered, About(doc="abc"))
    assert capsys.readouterr().out.startswith("Berlin.")


def test_a_segmented_answer_names_its_part(capsys):
    segments = [{"index": 1, "pages": [1, 1], "label": "part 2 of 3, characters 31,204–62,880"}]
    print_answer(_sse(("token", {"text": "Lyon."}), ("stats", {**STATS, "segments": segments})), About())
    assert "[answered from part 2 of 3, characters 31,204–62,880]" in capsys.readouterr().err


def test_an_answer_from_the_part_read_so_far_says_how_far_first(capsys):
    partial = {"read_through": {"page": 12, "char": 40_100}, "share": 0.4, "pages": {"first": 1, "last": 30}}
    print_answer(_sse(("partial", partial), ("token", {"text": "Lyon."}), ("stats", STATS)), About())
    err = capsys.readouterr().err
    assert err.startswith("[Read so far: pages 1–12 of 30 (40%); the rest is not read yet")
    one_page = partial | {"pages": {"first": 1, "last": 1}, "share": 0.25}
    print_answer(_sse(("partial", one_page), ("token", {"text": "Lyon."}), ("stats", STATS)), About())
    assert "[Read so far: 25% of the document;" in capsys.readouterr().err
    unread = [{"document_id": "a" * 16, "document_name": "lease.pdf", "share": 0.4}]
    collection = {"read_through": None, "share": 0.7, "pages": None, "unread": unread}
    print_answer(_sse(("partial", collection), ("token", {"text": "Lyon."}), ("stats", STATS)), About())
    err = capsys.readouterr().err
    assert err.startswith("[Not read yet: lease.pdf (40% read); this answer comes from the collection's other")


def test_warnings_name_their_pages_one_line_per_message():
    warnings = [
        {"page": 1, "message": OCR_NOTE},
        {"page": 2, "message": OCR_NOTE},
        {"page": 4, "message": "could not be read (KeyError); it is left empty"},
        {"page": 5, "message": OCR_NOTE},
        {"message": "the document's fonts map no text"},
    ]
    assert warning_lines(warnings) == [
        "the document's fonts map no text",
        f"pages 1–2, 5: {OCR_NOTE}",
        "page 4: could not be read (KeyError); it is left empty",
    ]
    assert page_list([3]) == "page 3" and page_list([2, 3, 4, 7]) == "pages 2–4, 7"


def test_a_busy_machine_is_named_under_a_slow_answer(capsys):
    """Issue 39 item 6: "0.1 tok/s" with nothing saying that the machine was busy."""
    slow = {**STATS, "decode_tokens_per_s": 0.1, "busy": "load average 8.2 on 2 cores"}
    print_answer(_sse(("token", {"text": "Berlin."}), ("stats", slow), ("done", {})), About())
    err = capsys.readouterr().err
    assert "0.1 tok/s" in err and "[the machine is busy (load average 8.2 on 2 cores): these times are slower" in err
    print_answer(_sse(("token", {"text": "Berlin."}), ("stats", {**STATS, "busy": None}), ("done", {})), About())
    assert "busy" not in capsys.readouterr().err
    one = {**STATS, "completion_tokens": 1, "decode_tokens_per_s": 0.0}  # a one-token answer has no rate
    print_answer(_sse(("token", {"text": "4"}), ("stats", one), ("done", {})), About())
    err = capsys.readouterr().err
    assert "[1 token, TTFT" in err and "tok/s" not in err


def test_a_reading_says_it_waits_its_turn_or_its_rate_and_time_left():
    """Issue 39 item 12 ("preparing 0 %" for minutes, with no word that it waits) and issue 36 item 7
    (the rate and the time left, from the server's measured rate)."""
    waiting = {"waiting": True, "ahead": 2, "documents_ahead": 1, "tokens_done": 0, "tokens_total": 900}
    assert reading_line({"reading": {**waiting, "tokens_per_s": None, "seconds_left": None}}) == (
        "waiting its turn (2 questions are being answered and another document is read first)"
    )
    going = {"waiting": False, "ahead": 0, "documents_ahead": 0, "tokens_done": 1234, "tokens_total": 5678}
    assert reading_line({"reading": {**going, "tokens_per_s": 38.2, "seconds_left": 116.3}}) == (
        "1,234 of 5,678 tokens at 38.2 tok/s, about 2 min left"
    )
    busy = {**going, "tokens_per_s": None, "seconds_left": None, "busy": "load average 8.2 on 2 cores"}
    assert reading_line({"reading": busy}) == (
        "1,234 of 5,678 tokens, measuring the rate; the machine is busy (load average 8.2 on 2 cores)"
    )
    assert reading_line({"reading": None}) == ""


def test_a_reading_in_the_queue_shows_its_place_and_expected_wait():
    """Issue 51: the place in the reading queue and the expected wait, and a paused reading its progress."""
    queued = {"waiting": True, "ahead": 0, "documents_ahead": 2, "tokens_done": 0, "tokens_total": 500}
    assert reading_line({"reading": {**queued, "tokens_per_s": 40.0, "seconds_left": 170.0}}) == (
        "waiting its turn (2 documents are read first), about 3 min left"
    )
    paused = {**queued, "paused": True, "documents_ahead": 1, "tokens_done": 1234, "tokens_total": 6000}
    assert reading_line({"reading": {**paused, "tokens_per_s": 40.0, "seconds_left": 150.0}}) == (
        "paused at 1,234 of 6,000 tokens (a shorter document is read first), about 2 min left"
    )


def test_a_quote_first_answer_shows_its_quote_and_whether_it_is_verified(capsys):
    """The new-user trial of issue 34: the CLI showed neither the quote nor that it was checked."""
    cited = {"start": 120, "end": 180, "page": 3, "page_end": 3, "text": "The crossing takes 35 minutes."}
    quote = {"text": "The crossing takes 35 minutes.", "verified": True, "citation": {**cited, "source": "quote"}}
    events = [("quote", {"text": quote["text"]}), ("token", {"text": "35 minutes"})]
    print_answer(_sse(*events, ("citations", {"citations": [cited], "quote": quote}), ("stats", STATS)), About())
    out = capsys.readouterr()
    assert out.out.startswith("> The crossing takes 35 minutes.\n\n35 minutes")
    assert "[quote verified: p. 3, chars 120-180]" in out.err
    # Refused (issue 48): no block quote (the stream sends none), and one line says why and where the
    # passage that came closest is; never a quote block followed by a bare refusal.
    passage = {**cited, "text": "It takes an hour.", "source": "quote"}
    refused = {
        "text": "It takes an hour.", "verified": False, "citation": None, "passage": passage,
        "reason": "The passage that came closest does not answer the question.", "support": 0.41,
        "refusal": "not_answered",
    }  # fmt: skip
    events = [("token", {"text": "The document does not say."}), ("citations", {"citations": [], "quote": refused})]
    print_answer(_sse(*events, ("stats", STATS)), About())
    out = capsys.readouterr()
    assert out.out.startswith("The document does not say.") and ">" not in out.out
    assert (
        "[The passage that came closest does not answer the question: p. 3, chars 120-180] "
        "(--direct answers without a quote)" in out.err
    )
    none = {"text": "", "verified": False, "reason": "No passage of the document answers the question."}
    events = [("token", {"text": "The document does not say."}), ("citations", {"citations": [], "quote": none})]
    print_answer(_sse(*events, ("stats", STATS)), About())
    err = capsys.readouterr().err
    assert "[No passage of the document answers the question]" in err and "--direct" not in err  # not judged


def test_docqa_list_shows_the_folder_and_when_its_file_was_read():
    """Issue 51: `docqa list` showed no folder and no "read N min ago" (the page does)."""
    from server.tools.shown import LIST_HEADER, list_row

    now = 1_800_000_000.0
    watched = {"id": "a1", "status": "ready", "pages": 3, "tokens": 812, "name": "minutes 2026.txt",
               "source_path": "/srv/reports/minutes 2026.txt", "read_at": now - 185}  # fmt: skip
    uploaded = {"id": "b2", "status": "ingesting", "pages": 1, "tokens": 90, "name": "memo.pdf"}
    assert LIST_HEADER.split("\t") == ["ID", "STATUS", "PAGES", "TOKENS", "READ", "FOLDER", "NAME"]
    assert list_row(watched, now) == "a1\tready\t3\t812\t3 min ago\t/srv/reports\tminutes 2026.txt"
    assert list_row(uploaded, now) == "b2\tingesting\t1\t90\t-\t-\tmemo.pdf"
    assert list_row({**watched, "read_at": now - 2 * 86400, "needs_reingest": "why"}, now).split("\t")[1:5] == [
        "needs_reingest",
        "3",
        "812",
        "2 days ago",
    ]
