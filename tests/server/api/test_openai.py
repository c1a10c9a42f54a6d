"""The official ``openai`` client against POST /v1/chat/completions on a real server process."""

from __future__ import annotations

import json

import openai
import pytest

from testkit.live import Live

ALICE = "text/gutenberg/alice-in-wonderland-pg11.txt"
QUESTION = "What did the Rabbit say to itself? Quote it."


@pytest.fixture(scope="module")
def served(tmp_path_factory, gemma_path, cases):
    server = Live(tmp_path_factory.mktemp("openai") / "data", gemma_path).start()
    try:
        text = (cases / ALICE).read_bytes().decode("utf-8-sig")[:6000]
        status, doc = server.upload("alice.txt", text.encode())
        assert status == 202, doc
        doc = server.wait_ready(doc["id"])
        assert doc["status"] == "ready"
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="unused", max_retries=0)
        yield server, client, doc
    finally:
        server.stop()


def test_models_lists_documents(served):
    _, client, doc = served
    ids = [m.id for m in client.models.list()]
    assert f"doc:{doc['id']}" in ids
    for model_id in ids:  # every listed id can be retrieved
        assert client.models.retrieve(model_id).id == model_id
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("doc:0000000000000000")


def test_seed_minus_one_means_unseeded(served):
    """-1 is "no fixed seed" in llama-server and vLLM; the OpenAI schema allows any int64."""
    _, client, doc = served
    messages = [{"role": "user", "content": QUESTION}]
    reply = client.chat.completions.create(
        model=f"doc:{doc['id']}", messages=messages, seed=-1, temperature=0.9, max_tokens=4
    )
    assert reply.choices[0].finish_reason in ("stop", "length")


def test_non_streaming_answer_with_usage_and_citations(served):
    _, client, doc = served
    r = client.chat.completions.create(
        model=f"doc:{doc['id']}", messages=[{"role": "user", "content": QUESTION}], max_tokens=24
    )
    choice = r.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content.strip()
    assert choice.finish_reason in ("stop", "length")
    # The document was not prefilled again: all its tokens are counted as cached.
    assert r.usage.prompt_tokens_details.cached_tokens == doc["tokens"]
    assert r.usage.prompt_tokens > doc["tokens"]
    assert r.usage.completion_tokens == r.model_extra["docqa"]["completion_tokens"] > 0
    # The answer quotes the document ("Oh dear! Oh dear! I shall be late!"): it comes back cited.
    citations = r.model_extra["citations"]
    assert citations, choice.message.content
    text = served[0].get(f"/v1/documents/{doc['id']}/text")[1]["text"]
    for c in citations:
        assert c["page"] == 1 and c["end"] > c["start"]
        assert text[c["start"] : c["end"]] == c["text"]
        assert c["source"] in ("lookup", "match", "lookup+match")


def test_streaming_matches_non_streaming(served):
    _, client, doc = served
    body = dict(messages=[{"role": "user", "content": QUESTION}], max_tokens=24)
    # A fixed draft window: the adaptive one follows step times, so the two askings' call shapes, and off
    # the batch-invariant mode a near-tie's greedy choice, could differ (seen once: a trailing line break).
    fixed = {"draft_tokens": 8}
    whole = client.chat.completions.create(model=f"doc:{doc['id']}", extra_body=fixed, **body)
    whole = whole.choices[0].message.content
    chunks = list(
        client.chat.completions.create(
            model="docqa",
            extra_body={"document_id": doc["id"], **fixed},
            stream=True,
            stream_options={"include_usage": True},
            **body,
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole  # greedy: the same tokens, streamed
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes in (["stop"], ["length"])
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens_details.cached_tokens == doc["tokens"]
    assert len(text) > 0 and len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1


def test_later_turns_reuse_the_document_state(served):
    _, client, doc = served
    messages = [
        {"role": "system", "content": "Answer in a few words."},
        {"role": "user", "content": QUESTION},
    ]
    first = client.chat.completions.create(model=f"doc:{doc['id']}", messages=messages, max_tokens=16)
    messages += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "Where did Alice fall?"},
    ]
    second = client.chat.completions.create(model=f"doc:{doc['id']}", messages=messages, max_tokens=16)
    stats = second.model_extra["docqa"]
    assert stats["cached_tokens"] == doc["tokens"]  # the document prefix came from its saved state
    assert stats["prompt_tokens"] > first.model_extra["docqa"]["prompt_tokens"]  # only the turns were prefilled
    assert stats["prompt_tokens"] < 200
    # The base model may end its turn at once after a line break (an empty answer); what this test is
    # about is the state above, so only that it decoded.
    assert stats["completion_tokens"] >= 1 and second.choices[0].finish_reason in ("stop", "length")


def test_errors_are_openai_errors(served):
    _, client, doc = served
    with pytest.raises(openai.BadRequestError, match="names no loaded document"):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.NotFoundError, match="no document"):
        client.chat.completions.create(
            model="docqa", messages=[{"role": "user", "content": "hi"}], extra_body={"document_id": "ffff0000"}
        )
    with pytest.raises(openai.UnprocessableEntityError, match="last message must be a user message"):
        client.chat.completions.create(
            model=f"doc:{doc['id']}",
            messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
        )
    with pytest.raises(openai.UnprocessableEntityError, match="n must be 1"):
        client.chat.completions.create(model=f"doc:{doc['id']}", messages=[{"role": "user", "content": "hi"}], n=2)
    with pytest.raises(openai.NotFoundError, match="no document with id 'ffff0000'"):
        client.chat.completions.create(model="doc:ffff0000", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.UnprocessableEntityError, match="response_format"):
        client.chat.completions.create(
            model=f"doc:{doc['id']}",
            messages=[{"role": "user", "content": "hi"}],
            response_format={"type": "json_object"},
        )
    too_many = r"^Error code: 422 - stop: List should have at most 16 items after validation, not 17$"
    with pytest.raises(openai.UnprocessableEntityError, match=too_many):
        client.chat.completions.create(
            model=f"doc:{doc['id']}", messages=[{"role": "user", "content": "hi"}], stop=[f"s{i}" for i in range(17)]
        )


def test_stop_adds_to_the_end_of_turn_stops(served):
    """OpenAI's `stop` adds stop sequences; the base model's own end-of-turn stops stay."""
    _, client, doc = served
    body = dict(model=f"doc:{doc['id']}", messages=[{"role": "user", "content": "Who is Alice?"}], max_tokens=40)
    plain = client.chat.completions.create(**body)
    extra = client.chat.completions.create(**body, stop=["zzz-never"])
    assert extra.choices[0].message.content == plain.choices[0].message.content
    assert extra.choices[0].finish_reason == plain.choices[0].finish_reason
    assert "\nQuestion:" not in extra.choices[0].message.content


def test_nulls_mean_unset_on_both_question_routes(served):
    """llama.cpp issue 25515: OpenAI clients and proxies send null for every field left unset; `"n": null`
    and `"stream": null` were 422. Every optional field sent as null answers as if it were not sent."""
    from tests.server.api.test_chat import ANSWER_NULLS, CHAT_NULLS

    server, _, doc = served
    plain = {"model": f"doc:{doc['id']}", "messages": [{"role": "user", "content": QUESTION}], "max_tokens": 12}
    status, expected = server.post_json("/v1/chat/completions", plain)
    assert status == 200, expected
    nulls = {**CHAT_NULLS, **plain}
    nulls["messages"] = [{"role": "user", "content": QUESTION, "name": None, "tool_calls": None}]
    status, reply = server.post_json("/v1/chat/completions", nulls)
    assert status == 200, reply
    assert reply["choices"][0]["message"]["content"] == expected["choices"][0]["message"]["content"]

    route = f"/v1/documents/{doc['id']}/answers"
    status, expected = server.post_json(route, {"question": QUESTION, "max_tokens": 12})
    assert status == 200, expected
    status, reply = server.post_json(route, {**ANSWER_NULLS, "question": QUESTION, "max_tokens": 12})
    assert status == 200, reply
    assert reply["answer"] == expected["answer"]


def test_what_docqa_does_not_implement_is_refused_by_name(served):
    """tool_choice, logit_bias and the penalties were ignored silently; at the values clients send by
    default they pass, any other value is a 422 naming the field."""
    _, client, doc = served
    ask = dict(model=f"doc:{doc['id']}", messages=[{"role": "user", "content": QUESTION}], max_tokens=4)
    defaults = dict(tool_choice="none", logit_bias={}, frequency_penalty=0, presence_penalty=0, logprobs=False)
    assert client.chat.completions.create(**ask, **defaults).choices[0].finish_reason in ("stop", "length")
    for field, value in [
        ("tool_choice", "required"),
        ("logit_bias", {"50256": -100}),
        ("frequency_penalty", 0.5),
        ("presence_penalty", -1.0),
        ("logprobs", True),
        ("top_logprobs", 3),
    ]:
        with pytest.raises(openai.UnprocessableEntityError, match=f"^Error code: 422 - {field}: "):
            client.chat.completions.create(**ask, **{field: value})


def test_blank_questions_and_nan_temperatures_are_named(served):
    """/answers took a whitespace-only question (chat refused it); a NaN temperature was reported as
    "should be less than or equal to 5"."""
    server, _, doc = served
    for blank in ("", " \n\t", "\u200b\u200b\u200b"):  # zero-width spaces got 200 with an empty answer
        status, body = server.post_json(f"/v1/documents/{doc['id']}/answers", {"question": blank})
        assert status == 422 and "the question is empty" in body["error"]["message"], body
    c = server.conn(30)  # a body that is not a JSON object was "Input should be a valid dictionary..."
    c.request("POST", f"/v1/documents/{doc['id']}/answers", "Who is Alice?", {"Content-Type": "text/plain"})
    r = c.getresponse()
    assert r.status == 422 and "must be a JSON object" in json.loads(r.read())["error"]["message"]
    for route, question in [
        (f"/v1/documents/{doc['id']}/answers", '"question": "Who?"'),
        ("/v1/chat/completions", f'"model": "doc:{doc["id"]}", "messages": [{{"role": "user", "content": "Who?"}}]'),
    ]:
        for number, named in [("NaN", "not NaN"), ("Infinity", "not infinity"), ("-Infinity", "not -infinity")]:
            c = server.conn(30)
            c.request("POST", route, f'{{{question}, "temperature": {number}}}', {"Content-Type": "application/json"})
            r = c.getresponse()
            error = json.loads(r.read())["error"]
            assert r.status == 422 and error["message"] == f"temperature: Input should be a finite number, {named}"


class _Events:
    """An answer stream of given events (server/engine/events.py AnswerStream), as the engine sends them."""

    def __init__(self, events) -> None:
        import asyncio
        import threading

        self.events = asyncio.Queue()
        for e in events:
            self.events.put_nowait(e)
        self.cancelled = threading.Event()

    def cancel(self) -> None:
        self.cancelled.set()


class _Connected:
    async def is_disconnected(self) -> bool:
        return False


@pytest.mark.parametrize("verified", [True, False])
def test_a_streamed_and_a_whole_message_say_the_same_quote(verified):
    """Issue 49: streamed and non-streamed answers to the same question differed once. One cause in the
    code: the whole message took its block quote from the final citation (and left it out when that
    citation was not found), the stream from the quote event. Both are now built from what was said."""
    import asyncio

    from server.api.answering import collect
    from server.api.routes.openai import _chunks, content
    from server.engine.events import Citations, Done, Quote, Stats, Token

    stats = {
        "finish_reason": "stop", "prompt_tokens": 1, "completion_tokens": 2, "cached_tokens": 0, "ttft_ms": 1.0,
        "decode_tokens_per_s": 1.0, "drafted_tokens": 0, "accepted_tokens": 0, "verify_steps": 2,
        "drafted_by_source": {}, "accepted_by_source": {}, "mean_accepted_per_step": 0.0,
    }  # fmt: skip
    said = [
        Quote("The Rabbit said: Oh my ears and whiskers,"),
        Token(" It"),
        Token(" was late."),
        Citations([], {"text": "The Rabbit said: Oh my ears and whiskers, how late", "verified": verified}),
        Stats(stats),
        Done(),
    ]

    async def both() -> tuple[str, str]:
        frames = [f async for f in _chunks(_Events(said), {"id": "x", "model": "m"}, False, 0, 60.0)]
        deltas = [json.loads(f[6:]) for f in frames if f.startswith("data: {")]
        streamed = "".join(d["choices"][0]["delta"].get("content") or "" for d in deltas if d["choices"])
        whole = await collect(_Events(said), _Connected())
        return streamed, content(whole.said)

    streamed, whole = asyncio.run(both())
    assert streamed == whole == "> The Rabbit said: Oh my ears and whiskers,\n\n It was late."
