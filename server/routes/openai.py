"""OpenAI-compatible chat: ``POST /v1/chat/completions`` (JSON or SSE) and ``GET /v1/models``.

Follows the OpenAI Chat Completions API (https://platform.openai.com/docs/api-reference/chat) closely
enough for the official ``openai`` client to work unchanged. The conversation is about one loaded
document, named by the extra body field ``document_id`` or by ``model`` (``doc:<id>``, the bare id, or
the document's file name when it is unique). The document's saved state is reused for every turn:
only the conversation after the document is prefilled, and ``usage.prompt_tokens_details.
cached_tokens`` counts the document tokens that were not.

Differences, by design:

* ``temperature`` defaults to the server's greedy decoding (0), not 1.
* ``n`` must be 1; tools, logprobs and response formats other than text are not supported (422).
* ``stop`` adds to the prompt layout's own stop strings (the end of a turn for a base model).
* System and developer messages are placed at the start of the first user turn, after the document:
  the document prefix is fixed, so nothing can precede it without prefilling it again.
* Extra response fields: ``citations`` (the document spans the answer quotes; in the final chunk when
  streaming) and ``docqa`` (the answer's decoding statistics).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Literal

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ingest.store import DocRecord, DocStore
from server import streams
from server.deps import EngineDep, SettingsDep, StoreDep
from server.errors import AmbiguousModel, DocumentNotFound, DocumentRequired, InvalidRequest, payload
from server.jobs import AnswerJob
from server.routes.answers import SSE_HEADERS, answer_params, check_answerable, collect
from server.schemas import MAX_ANSWER_TOKENS, MAX_CONVERSATION_CHARS, MAX_QUESTION_CHARS, AnswerRequest
from spec.limits import MAX_WINDOW

router = APIRouter(prefix="/v1")


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
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


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    """The subset of the OpenAI request that docqa honours; unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(max_length=300)
    messages: list[ChatMessage] = Field(min_length=1, max_length=1000)
    document_id: str | None = None  # docqa: the document the conversation is about
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_ANSWER_TOKENS)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=MAX_ANSWER_TOKENS)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**63)  # negative (-1): unseeded, as llama-server
    stop: str | list[str] | None = None
    n: int = 1
    tools: list | None = None
    logprobs: bool | None = None
    response_format: dict | None = None
    # docqa's speculative-decoding controls, as in POST /v1/documents/{id}/answers
    verify16: bool = False
    draft_tokens: int | None = Field(default=None, ge=0, le=MAX_WINDOW)
    draft_source: Literal["both", "mtp", "lookup"] = "both"


class ModelCard(BaseModel):
    id: str
    object: str = "model"
    created: int
    owned_by: str = "docqa"
    name: str  # docqa: the document's file name
    status: str


class ModelList(BaseModel):
    object: str = "list"
    data: list[ModelCard]


def _card(doc: DocRecord) -> ModelCard:
    return ModelCard(id=f"doc:{doc.id}", created=int(doc.created_at), name=doc.name, status=doc.status)


@router.get("/models", response_model=ModelList)
async def models(store: StoreDep) -> ModelList:
    """Every loaded document as a model id ``doc:<id>``."""
    return ModelList(data=[_card(d) for d in store.list()])


@router.get("/models/{model_id}", response_model=ModelCard)
async def model(model_id: str, store: StoreDep) -> ModelCard:
    """One document as a model (``client.models.retrieve("doc:<id>")``)."""
    doc_id = model_id.removeprefix("doc:")
    doc = store.get(doc_id) if doc_id.isalnum() else None
    if doc is None:
        raise DocumentNotFound(f"no model {model_id!r}; GET /v1/models lists them")
    return _card(doc)


def resolve_document(store: DocStore, req: ChatCompletionRequest) -> DocRecord:
    """The document a request names: ``document_id``, else ``model`` as ``doc:<id>``, an id or a file name."""
    if req.document_id is not None:
        doc = store.get(req.document_id) if req.document_id.isalnum() else None
        if doc is None:
            raise DocumentNotFound(f"no document with id {req.document_id!r}; see GET /v1/models")
        return doc
    name = req.model.removeprefix("doc:")
    doc = store.get(name) if name.isalnum() else None
    if doc is not None:
        return doc
    if req.model.startswith("doc:"):
        raise DocumentNotFound(f"no document with id {name!r}; see GET /v1/models")
    named = [d for d in store.list() if d.name == req.model]
    if len(named) == 1:
        return named[0]
    if len(named) > 1:
        ids = ", ".join(f"doc:{d.id}" for d in named)
        raise AmbiguousModel(f"{len(named)} documents are named {req.model!r}; use one of {ids}")
    raise DocumentRequired(
        f"model {req.model!r} names no loaded document: pass the extra body field document_id, or use "
        "model 'doc:<id>' (GET /v1/models lists them)",
    )


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
    if not pairs[-1][0].strip():
        raise InvalidRequest("the question (last user message) is empty")
    return tuple(pairs[:-1]), pairs[-1][0]


def _answer_request(req: ChatCompletionRequest, question: str) -> AnswerRequest:
    """The chat request as an answer request (``stop``: the client's own stop strings only)."""
    if req.n != 1:
        raise InvalidRequest("n must be 1")
    if req.tools or req.logprobs:
        raise InvalidRequest("tools and logprobs are not supported")
    if req.response_format and req.response_format.get("type", "text") != "text":
        raise InvalidRequest("response_format: only {'type': 'text'} is supported")
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
    }
    try:
        return AnswerRequest(**fields)
    except ValidationError as exc:
        where = {"question": "messages", "max_tokens": "max_completion_tokens"}
        message = "; ".join(f"{where.get(str(e['loc'][0]), e['loc'][0])}: {e['msg']}" for e in exc.errors())
        raise InvalidRequest(message) from None


def _usage(stats: dict) -> dict:
    prompt = stats["prompt_tokens"] + stats["cached_tokens"]
    return {
        "prompt_tokens": prompt,
        "completion_tokens": stats["completion_tokens"],
        "total_tokens": prompt + stats["completion_tokens"],
        "prompt_tokens_details": {"cached_tokens": stats["cached_tokens"]},
    }


def _finish_reason(reason: str) -> str:
    return "length" if reason == "length" else "stop"


@router.post("/chat/completions")
async def chat_completions(
    req: ChatCompletionRequest, request: Request, store: StoreDep, engine: EngineDep, settings: SettingsDep
):
    doc = resolve_document(store, req)
    check_answerable(doc, engine)
    history, question = conversation(req.messages)
    params = answer_params(_answer_request(req, question), settings)
    if params.stops:  # OpenAI's stop adds to the end of the turn; it does not replace the layout's stops
        params = replace(params, stops=(*engine.layout.stops, *params.stops))
    job = AnswerJob(doc.id, question, params, asyncio.get_running_loop(), history=history)
    position = engine.submit_answer(job)
    base = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": req.model}
    if req.stream:  # the first chunk goes out now, however long the queue
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        chunks = _chunks(job, base, include_usage, position, settings.sse_heartbeat_s)
        return StreamingResponse(chunks, media_type="text/event-stream", headers=SSE_HEADERS)
    answer = await collect(job, request)
    stats = answer.stats.model_dump()
    return {
        **base,
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": answer.text},
                "finish_reason": _finish_reason(answer.stats.finish_reason),
                "logprobs": None,
            }
        ],
        "usage": _usage(stats),
        "citations": [c.model_dump() for c in answer.citations],
        "docqa": stats,
    }


def _data(payload: dict | str) -> str:
    text = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return f"data: {text}\n\n"


async def _chunks(
    job: AnswerJob, base: dict, include_usage: bool, position: int, heartbeat_s: float
) -> AsyncIterator[str]:
    """chat.completion.chunk frames, then ``[DONE]``: the role-only first chunk at once (with the extra
    field ``queue_position``: jobs ahead), SSE comment heartbeats until the first token (clients skip
    comments), then the answer. Closing the generator (client gone) cancels the job."""
    chunk = {**base, "object": "chat.completion.chunk"}

    def delta(d: dict, finish: str | None = None, **extra) -> str:
        return _data({**chunk, "choices": [{"index": 0, "delta": d, "finish_reason": finish}], **extra})

    yield delta({"role": "assistant", "content": ""}, queue_position=position)
    citations: list[dict] = []
    async for kind, data in streams.events(job, heartbeat_s):
        if kind == "heartbeat":
            yield ": keep-alive\n\n"
        elif kind == "token":
            yield delta({"content": data["text"]})
        elif kind == "citations":
            citations = data["citations"]
        elif kind == "stats":
            yield delta({}, _finish_reason(data["finish_reason"]), citations=citations, docqa=data)
            if include_usage:
                yield _data({**chunk, "choices": [], "usage": _usage(data)})
        elif kind == "error":  # the openai client raises APIError on an `error` payload
            yield _data(payload(data))
            return
    yield _data("[DONE]")
