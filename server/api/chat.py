"""The OpenAI Chat Completions request as docqa takes it (server/api/routes/openai.py): its schema, and
its messages as a question about a document plus the earlier turns of the conversation."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, ValidationError

from server.api.schemas import (
    MAX_ANSWER_TOKENS,
    MAX_CONVERSATION_CHARS,
    MAX_QUESTION_CHARS,
    AnswerMode,
    AnswerRequest,
    Body,
    DraftSource,
    Finite,
    blank,
)
from server.config.errors import InvalidRequest
from spec.limits import MAX_WINDOW


class ContentPart(Body):
    model_config = ConfigDict(extra="ignore")
    type: str
    text: str | None = None


class ChatMessage(Body):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        if any(p.type != "text" for p in self.content):
            kinds = sorted({p.type for p in self.content} - {"text"})
            raise InvalidRequest(f"only text content is supported, not {', '.join(kinds)}")
        return "".join(p.text or "" for p in self.content)


class StreamOptions(Body):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class ChatCompletionRequest(Body):
    """The subset of the OpenAI request that docqa honours; unknown fields are ignored, and a null
    means unset (:class:`server.api.schemas.Body`)."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(max_length=300)
    messages: list[ChatMessage] = Field(min_length=1, max_length=1000)
    document_id: str | None = None  # docqa: the document the conversation is about
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_ANSWER_TOKENS)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=MAX_ANSWER_TOKENS)
    temperature: Finite | None = Field(default=None, ge=0.0, le=2.0)
    top_p: Finite | None = Field(default=None, gt=0.0, le=1.0)
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**63)  # negative (-1): unseeded, as llama-server
    stop: str | list[str] | None = None
    n: int = 1
    response_format: dict | None = None
    # Not implemented: each passes at the value clients send by default and is refused (422, naming
    # it) otherwise, rather than ignored (:func:`not_implemented`).
    tools: list | None = None
    tool_choice: str | dict | None = None
    functions: list | None = None  # the older names of tools and tool_choice
    function_call: str | dict | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    logit_bias: dict[str, float] | None = None
    frequency_penalty: Finite | None = Field(default=None, ge=-2.0, le=2.0)
    presence_penalty: Finite | None = Field(default=None, ge=-2.0, le=2.0)
    # docqa's speculative-decoding controls, as in POST /v1/documents/{id}/answers
    verify16: bool = False
    draft_tokens: int | None = Field(default=None, ge=0, le=MAX_WINDOW)
    draft_source: DraftSource = "all"
    mode: AnswerMode | None = None  # quote-first or direct (docqa's answers route); null: the server's choice


def conversation(messages: list[ChatMessage]) -> tuple[tuple[tuple[str, str], ...], str]:
    """Messages -> (earlier (question, answer) turns, the question to answer now), in time linear in
    the text. Each message is held to the question routes' limit, and the whole conversation to
    MAX_CONVERSATION_CHARS, before anything is tokenized.

    Raises InvalidRequest unless the conversation ends with a user message.
    """
    system: list[str] = []
    turns: list[tuple[list[str], list[str]]] = []  # (question parts, answer parts)
    total = 0
    for i, m in enumerate(messages):
        if m.role == "tool":
            raise InvalidRequest("tool messages are not supported")
        text = m.text()
        total += len(text)
        if len(text) > MAX_QUESTION_CHARS:
            raise InvalidRequest(f"messages.{i}: String should have at most {MAX_QUESTION_CHARS} characters")
        if total > MAX_CONVERSATION_CHARS:
            raise InvalidRequest(
                f"messages: the conversation is over {MAX_CONVERSATION_CHARS} characters; start a new one"
            )
        if m.role in ("system", "developer"):
            system.append(text)
        elif m.role == "user":
            if not turns or turns[-1][1]:
                turns.append(([], []))
            turns[-1][0].append(text)
        elif turns:
            turns[-1][1].append(text)
        else:
            raise InvalidRequest("the conversation starts with an assistant message")
    if not turns or turns[-1][1]:
        raise InvalidRequest("the last message must be a user message (the question)")
    if system:
        turns[0][0][:0] = system
    pairs = [("\n\n".join(q), "\n\n".join(a)) for q, a in turns]
    if blank(pairs[-1][0]):
        raise InvalidRequest("the question (last user message) is empty")
    return tuple(pairs[:-1]), pairs[-1][0]


_NO_TOOLS = "docqa answers from the document and calls no tools"
_OWN_CHOICE = "every answer token is the model's own choice (drafts are verified against it), unbiased"


def not_implemented(req: ChatCompletionRequest) -> str | None:
    """Why ``req`` asks for something docqa does not do, naming the field and the value to send, or None.
    A field at the value clients send when they mean nothing by it passes (null, 0, ``{}``, ``[]``,
    false, a ``tool_choice`` of "none" or "auto" without tools): ignoring a real request for a tool
    call, a logit bias or a penalty would answer another question than the one asked."""
    if req.n != 1:
        return "n must be 1: docqa makes one answer per request; send 1 or null"
    if req.response_format and req.response_format.get("type", "text") != "text":
        return "response_format: only {'type': 'text'} is supported"
    for name in ("tools", "functions"):
        if getattr(req, name):
            return f"{name}: tool calls are not supported ({_NO_TOOLS}); send none"
    for name in ("tool_choice", "function_call"):
        if getattr(req, name) not in (None, "none", "auto"):
            return f"{name}: {getattr(req, name)!r} is not supported ({_NO_TOOLS}); send null, 'none' or 'auto'"
    if req.logit_bias:
        return f"logit_bias: not supported ({_OWN_CHOICE}); send null or {{}}"
    for name in ("frequency_penalty", "presence_penalty"):
        if getattr(req, name):
            return f"{name}: penalties are not supported ({_OWN_CHOICE}); send null or 0"
    if req.logprobs:
        return "logprobs: log probabilities are not returned; send null or false"
    if req.top_logprobs:
        return "top_logprobs: log probabilities are not returned; send null or 0"
    return None


def answer_request(req: ChatCompletionRequest, question: str) -> AnswerRequest:
    """The chat request as an answer request (``stop``: the client's own stop strings only).
    InvalidRequest for what docqa does not implement (:func:`not_implemented`) or a field out of range."""
    if (why := not_implemented(req)) is not None:
        raise InvalidRequest(why)
    stop = None
    if req.stop:
        stop = [req.stop] if isinstance(req.stop, str) else [s for s in req.stop if s]
    fields = {
        "question": question,
        "max_tokens": req.max_completion_tokens or req.max_tokens,
        "temperature": req.temperature if req.temperature is not None else 0.0,
        "top_p": req.top_p if req.top_p is not None else 1.0,
        "seed": req.seed,
        "stop": stop,
        "verify16": req.verify16,
        "draft_tokens": req.draft_tokens,
        "draft_source": req.draft_source,
        "mode": req.mode,
    }
    try:
        return AnswerRequest(**fields)
    except ValidationError as exc:
        where = {"question": "messages", "max_tokens": "max_completion_tokens"}
        message = "; ".join(f"{where.get(str(e['loc'][0]), e['loc'][0])}: {e['msg']}" for e in exc.errors())
        raise InvalidRequest(message) from None
