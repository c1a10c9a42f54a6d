"""The chat request as docqa reads it (server/api/chat.py), without a model: explicit nulls mean unset,
and the OpenAI fields docqa does not implement pass at their defaults and are refused, by name,
otherwise. The same on a real server process: tests/server/api/test_openai.py."""

from __future__ import annotations

import pytest

from server.api.chat import ChatCompletionRequest, answer_request
from server.api.schemas import AnswerRequest
from server.config.errors import InvalidRequest

MESSAGES = [{"role": "user", "content": "Who is Alice?"}]

#: Every optional field of the chat request, as OpenAI clients and proxies send it when unset.
CHAT_NULLS = {
    "document_id": None,
    "stream": None,
    "stream_options": None,
    "max_tokens": None,
    "max_completion_tokens": None,
    "temperature": None,
    "top_p": None,
    "seed": None,
    "stop": None,
    "n": None,
    "tools": None,
    "tool_choice": None,
    "parallel_tool_calls": None,
    "functions": None,
    "function_call": None,
    "logprobs": None,
    "top_logprobs": None,
    "logit_bias": None,
    "frequency_penalty": None,
    "presence_penalty": None,
    "response_format": None,
    "user": None,
    "metadata": None,
    "verify16": None,
    "draft_tokens": None,
    "draft_source": None,
}
ANSWER_NULLS = {
    "max_tokens": None,
    "temperature": None,
    "top_k": None,
    "top_p": None,
    "seed": None,
    "stop": None,
    "verify16": None,
    "draft_tokens": None,
    "draft_source": None,
    "stream": None,
}


def test_nulls_mean_unset_on_the_chat_request():
    """llama.cpp issue 25515: `"n": null`, `"stream": null` (and the rest) were 422."""
    sent = ChatCompletionRequest.model_validate(
        {"model": "docqa", "messages": [{"role": "user", "content": "Who?", "name": None}], **CHAT_NULLS}
    )
    unset = ChatCompletionRequest.model_validate({"model": "docqa", "messages": [{"role": "user", "content": "Who?"}]})
    assert sent == unset
    assert sent.n == 1 and sent.stream is False and sent.draft_source == "all"
    assert answer_request(sent, "Who?") == AnswerRequest(question="Who?")
    options = ChatCompletionRequest.model_validate(
        {"model": "docqa", "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": None}}
    )
    assert options.stream_options is not None and options.stream_options.include_usage is False


def test_nulls_mean_unset_on_the_answers_request():
    assert AnswerRequest.model_validate({"question": "Who?", **ANSWER_NULLS}) == AnswerRequest(question="Who?")


def test_a_null_for_a_required_field_is_still_refused():
    with pytest.raises(ValueError, match="question"):
        AnswerRequest.model_validate({"question": None})
    with pytest.raises(ValueError, match="messages"):
        ChatCompletionRequest.model_validate({"model": "docqa", "messages": None})


def _as_answer(**fields) -> AnswerRequest:
    req = ChatCompletionRequest(model="docqa", messages=MESSAGES, **fields)
    return answer_request(req, "Who is Alice?")


#: What clients send for fields they leave at their defaults: these must pass.
DEFAULTS = [
    {"tool_choice": "none"},
    {"tool_choice": "auto"},
    {"tools": []},
    {"functions": []},
    {"function_call": "none"},
    {"function_call": "auto"},
    {"parallel_tool_calls": True},
    {"logit_bias": {}},
    {"frequency_penalty": 0},
    {"presence_penalty": 0.0},
    {"logprobs": False},
    {"top_logprobs": 0},
    {"n": 1},
    {"response_format": {"type": "text"}},
]
#: Values docqa does not implement: each refused with 422 naming its field (they were ignored silently).
NOT_IMPLEMENTED = [
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tool_choice": {"type": "function", "function": {"name": "f"}}}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
    ({"functions": [{"name": "f"}]}, "functions"),
    ({"function_call": {"name": "f"}}, "function_call"),
    ({"logit_bias": {"50256": -100}}, "logit_bias"),
    ({"frequency_penalty": 0.5}, "frequency_penalty"),
    ({"presence_penalty": -1}, "presence_penalty"),
    ({"logprobs": True}, "logprobs"),
    ({"top_logprobs": 5}, "top_logprobs"),
    ({"n": 2}, "n must be 1"),
]


@pytest.mark.parametrize("fields", DEFAULTS)
def test_fields_at_their_defaults_pass(fields):
    assert _as_answer(**fields) == AnswerRequest(question="Who is Alice?")


@pytest.mark.parametrize("fields, named", NOT_IMPLEMENTED)
def test_fields_docqa_does_not_implement_are_refused_by_name(fields, named):
    with pytest.raises(InvalidRequest) as err:
        _as_answer(**fields)
    assert str(err.value).startswith(named), err.value
