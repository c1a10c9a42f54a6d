"""Request bodies (server/api/schemas.py) without a model: what each field refuses, and how the refusal
names the problem. On a real server process: tests/server/api/test_openai.py."""

from __future__ import annotations

import pytest

from server.api.chat import ChatCompletionRequest, ChatMessage, conversation
from server.api.schemas import AnswerRequest
from server.config.errors import InvalidRequest

MESSAGES = [{"role": "user", "content": "Who is Alice?"}]


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", float("nan"), float("inf"), "nan"])
@pytest.mark.parametrize("field", ["temperature", "top_p"])
def test_a_nan_or_infinite_number_is_named_as_such(field, value):
    """A NaN temperature was reported as "should be less than or equal to 5"."""
    with pytest.raises(ValueError) as err:
        AnswerRequest.model_validate({"question": "Who?", field: value})
    assert "finite number" in str(err.value) and "less than" not in str(err.value)
    with pytest.raises(ValueError) as err:
        ChatCompletionRequest.model_validate({"model": "docqa", "messages": MESSAGES, field: value})
    assert "finite number" in str(err.value) and "less than" not in str(err.value)


@pytest.mark.parametrize(
    "question", ["", " ", "\n\t ", "\u3000\u00a0", "\u200b\u200b\u200b", "\u200b \u2060\ufeff\u200d"]
)
def test_a_whitespace_question_is_refused_as_on_the_chat_route(question):
    """Zero-width spaces and joiners count as whitespace: a question of them got 200 and an empty answer.
    An empty one was refused with pydantic's own words ("String should have at least 1 character")."""
    with pytest.raises(ValueError, match="the question is empty"):
        AnswerRequest(question=question)
    with pytest.raises(InvalidRequest, match="is empty"):
        conversation([ChatMessage(role="user", content=question)])
