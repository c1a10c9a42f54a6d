"""Quote-first answers through the API (issue 48), on a real chat model (SmolLM2-135M-Instruct): what
the stream and the response say when the model's judgment lets the quote stand, and when it does not.
The threshold (DOCQA_QUOTE_SUPPORT) is set to its ends, so what is checked is the mechanism, not the
small model's judgment: 0 lets every quote in the document stand (nothing is judged), 1 refuses every
answer (after the passages are judged); in between, the judged passage is where the quote starts."""

from __future__ import annotations

import pytest

from tests.conftest import sse_events, upload

GUIDE = (
    "Harbour guide\n\nThe first ferry to Morrow leaves Pier 2 at 07:40. The crossing takes 35 minutes.\n\n"
    "The harbour museum is closed on Mondays.\n\n| Ticket | Price |\n| --- | --- |\n| Adult return | 9 euros |\n"
    "| Child return | 4 euros |\n"
)
QUESTION = "When does the first ferry to Morrow leave?"


@pytest.fixture
def guide(tmp_path):
    path = tmp_path / "guide.txt"
    path.write_text(GUIDE)
    return path


def _stream(client, doc_id: str, question: str) -> list[tuple[str, dict]]:
    body = {"question": question, "mode": "quote", "stream": True, "max_tokens": 24}
    with client.stream("POST", f"/v1/documents/{doc_id}/answers", json=body) as r:
        assert r.status_code == 200, r.read()
        return sse_events(r)


def test_a_quote_that_stands_is_shown_before_the_answer_and_cited(server, smollm_path, guide):
    """The quote comes before the answer's tokens, and the citations event carries it, verified."""
    with server(model_path=smollm_path, quote_support=0.0) as client:
        doc = upload(client, guide)
        events = _stream(client, doc["id"], QUESTION)
        kinds = [k for k, _ in events]
        assert kinds[0] in ("queued", "quote") and kinds.index("quote") < kinds.index("token")
        assert kinds[-3:] == ["citations", "stats", "done"]
        quote = dict(events)["citations"]["quote"]
        text = client.get(f"/v1/documents/{doc['id']}/text").json()["text"]
        assert quote["verified"] and quote["passage"] is None and quote["reason"] is None
        c = quote["citation"]
        assert text[c["start"] : c["end"]] == c["text"] == quote["text"] == dict(events)["quote"]["text"]
        assert dict(events)["citations"]["citations"] == [c] and c["source"] == "quote"
        assert quote["support"] is None  # at threshold 0 the model is not asked: every quote stands


def test_a_refused_answer_shows_no_quote_and_says_why(server, smollm_path, guide):
    with server(model_path=smollm_path, quote_support=1.0, answer_mode="quote") as client:
        doc = upload(client, guide)
        events = _stream(client, doc["id"], QUESTION)
        kinds = [k for k, _ in events]
        assert "quote" not in kinds  # never a quote block followed by a bare refusal
        assert "".join(d["text"] for k, d in events if k == "token") == "The document does not say."
        cited = dict(events)["citations"]
        quote = cited["quote"]
        assert cited["citations"] == [] and not quote["verified"] and quote["citation"] is None
        assert quote["reason"] and "\n" not in quote["reason"]
        assert 0.0 <= quote["support"] < 1.0  # the best passage, judged before any quote: below 1, refused
        assert quote["refusal"] == "not_answered"  # judged: the refusal an answer without a quote may help
        if quote["passage"] is not None:  # where the passage that came closest is: no citation, a place
            text = client.get(f"/v1/documents/{doc['id']}/text").json()["text"]
            p = quote["passage"]
            assert text[p["start"] : p["end"]] == p["text"] == quote["text"]
        # The same through the JSON response, and a number the document never has named as the reason.
        r = client.post(
            f"/v1/documents/{doc['id']}/answers", json={"question": "What did the ferry cost in 1911?", "mode": "quote"}
        ).json()
        assert r["answer"] == "The document does not say." and r["citations"] == []
        assert r["quote"]["verified"] is False
        assert "1911" in r["quote"]["reason"] and r["quote"]["refusal"] == "number", r["quote"]


def test_a_question_with_its_options_is_answered_directly_unless_quote_is_asked(server, smollm_path, guide):
    """A four-option question is a choice among its options, which "the document does not say" is not:
    with quote-first as the server's mode it is answered directly (no quote, no refusal by judgment); a
    request that asks for quote-first still gets it."""
    options = f"{QUESTION}\nA. 07:40\nB. 08:15\nC. 09:00\nD. 10:30\n\nAnswer with the letter only."
    with server(model_path=smollm_path, quote_support=1.0, answer_mode="quote") as client:
        doc = upload(client, guide)
        url = f"/v1/documents/{doc['id']}/answers"
        chosen = client.post(url, json={"question": options, "max_tokens": 8}).json()
        assert chosen["mode"] == "direct" and chosen["quote"] is None, chosen
        asked = client.post(url, json={"question": options, "mode": "quote", "max_tokens": 8}).json()
        assert asked["mode"] == "quote" and asked["answer"] == "The document does not say.", asked  # threshold 1
        plain = client.post(url, json={"question": QUESTION, "max_tokens": 8}).json()
        assert plain["mode"] == "quote", plain  # without options: the server's mode


def test_gemma_quotes_the_alice_paragraph_that_answers(server, gemma_path, cases, tmp_path):
    """Issue 48: a base model (Gemma 3 270M, no refusal sentence in its prompt) asked in quote mode
    copies from the paragraph of Alice that holds the answer; refusing is the judgment's job (its threshold
    set to 0 here, so what is checked is the quote, not the tiny model's judgment). A question that quotes
    the document is quoted from the paragraph it quotes, at any threshold."""
    alice = (cases / "text/gutenberg/alice-in-wonderland-pg11.txt").read_text(encoding="utf-8")
    path = tmp_path / "alice.txt"
    path.write_text(alice[:6000])  # the first chapter's opening (this copy starts with its text)
    with server(model_path=gemma_path, quote_support=0.0) as client:
        doc = upload(client, path)
        r = client.post(
            f"/v1/documents/{doc['id']}/answers",
            json={
                "question": "What did the Rabbit take out of its waistcoat-pocket?",
                "mode": "quote",
                "max_tokens": 48,
            },
        )
        body = r.json()
        assert r.status_code == 200 and body["quote"] is not None, body
        stored = client.get(f"/v1/documents/{doc['id']}/text").json()["text"]
        quote = body["quote"]["text"]
        (paragraph,) = [p for p in stored.split("\n\n") if "waistcoat-pocket" in p][:1]
        assert quote in paragraph, body  # Gemma 270M starts it a sentence early: the paragraph, not the clause
        # A question that quotes the document is quoted from the passage holding its quote, unjudged (Gemma's
        # own judgment chose the chapter's first paragraph), to the end of the Rabbit's quoted words, not to
        # the first "!" inside them.
        question = "Copy, word for word, the paragraph that begins with 'There was nothing so VERY remarkable in that'."
        body = client.post(
            f"/v1/documents/{doc['id']}/answers", json={"question": question, "mode": "quote", "max_tokens": 8}
        ).json()
        quote = body["quote"]
        assert quote["verified"] and quote["support"] is None, body  # pointed at, not judged
        assert quote["text"].startswith("There was nothing so") and "I shall be late" in quote["text"], body
