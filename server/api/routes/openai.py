"""OpenAI-compatible chat: ``POST /v1/chat/completions`` (JSON or SSE) and ``GET /v1/models``.

Follows the OpenAI Chat Completions API (https://platform.openai.com/docs/api-reference/chat) closely
enough for the official ``openai`` client to work unchanged. The conversation is about one loaded
document, named by the extra body field ``document_id`` or by ``model`` (``doc:<id>``, the bare id, or
the document's file name when it is unique), or about a collection of documents, ``model:
"collection:<id>"`` (server/service/collection.py); ``GET /v1/models`` lists both. The document's saved
state is reused for every turn: only the conversation after the document is prefilled, and
``usage.prompt_tokens_details.cached_tokens`` counts the document tokens that were not.

Differences, by design:

* ``temperature`` defaults to the server's greedy decoding (0), not 1.
* A field sent as ``null`` means unset (server/api/schemas.Body), as clients and proxies send them.
* ``n`` must be 1; tools (and ``tool_choice``), logprobs (and ``top_logprobs``), ``logit_bias``, the
  penalties and response formats other than text are not supported: 422 naming the field, unless it
  has the value clients send for "nothing" (null, 0, ``{}``, ``[]``, false; ``tool_choice`` "none" or "auto").
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
from collections.abc import AsyncIterator, Iterable
from dataclasses import asdict

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from server.api.answering import answer_params, collect, events
from server.api.chat import ChatCompletionRequest, answer_request, conversation
from server.api.deps import EngineDep, SettingsDep, StoreDep, find_collection, find_document
from server.api.responses import SSE_HEADERS
from server.config.errors import AmbiguousModel, CollectionNotFound, DocumentNotFound, DocumentRequired, payload
from server.engine.events import AnswerStream, Citations, Failed, Heartbeat, Partial, Quote, Stats, Token, read_so_far
from server.service import collection
from server.service.questions import answers_while_reading, check_answerable, submit, submit_collection
from store.docstore import CollectionRecord, DocRecord, DocStore

router = APIRouter(prefix="/v1")


class ModelCard(BaseModel):
    id: str
    object: str = "model"
    created: int
    owned_by: str = "docqa"
    name: str  # docqa: the document's file name, or the collection's name
    status: str
    documents: list[str] | None = None  # docqa: a collection's document ids


class ModelList(BaseModel):
    object: str = "list"
    data: list[ModelCard]


def _card(doc: DocRecord) -> ModelCard:
    return ModelCard(id=f"doc:{doc.id}", created=int(doc.created_at), name=doc.name, status=doc.status)


COLLECTION = "collection:"


def _collection_card(found: CollectionRecord, docs: list[DocRecord]) -> ModelCard:
    return ModelCard(
        id=f"{COLLECTION}{found.id}",
        created=int(found.created_at),
        name=found.name,
        status=collection.status(docs),
        documents=[d.id for d in docs],
    )


@router.get("/models", response_model=ModelList)
def models(store: StoreDep) -> ModelList:
    """Every loaded document as a model id ``doc:<id>``, then every collection as ``collection:<id>``."""
    cards = [_card(d) for d in store.list()]
    cards += [_collection_card(c, collection.members(store, c)) for c in store.collections()]
    return ModelList(data=cards)


def _named_collection(store: DocStore, model_id: str) -> CollectionRecord:
    found = find_collection(store, model_id.removeprefix(COLLECTION))
    if found is None:
        raise CollectionNotFound(f"no collection {model_id!r}; GET /v1/models lists them")
    return found


@router.get("/models/{model_id}", response_model=ModelCard)
def model(model_id: str, store: StoreDep) -> ModelCard:
    """One document (``client.models.retrieve("doc:<id>")``) or collection as a model."""
    if model_id.startswith(COLLECTION):
        found = _named_collection(store, model_id)
        return _collection_card(found, collection.members(store, found))
    doc_id = model_id.removeprefix("doc:")
    doc = find_document(store, doc_id)
    if doc is None:
        raise DocumentNotFound(f"no model {model_id!r}; GET /v1/models lists them")
    return _card(doc)


def resolve_document(store: DocStore, req: ChatCompletionRequest) -> DocRecord:
    """The document a request names: ``document_id``, else ``model`` as ``doc:<id>``, an id or a file name."""
    if req.document_id is not None:
        doc = find_document(store, req.document_id)
        if doc is None:
            raise DocumentNotFound(f"no document with id {req.document_id!r}; see GET /v1/models")
        return doc
    name = req.model.removeprefix("doc:")
    doc = find_document(store, name)
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


def _asked(store: DocStore, req: ChatCompletionRequest) -> tuple[DocRecord | None, tuple | None]:
    """What a chat request asks about: (its document, None), or (None, (a collection, its documents)).
    Reads the store: run off the event loop."""
    if req.document_id is None and req.model.startswith(COLLECTION):
        found = _named_collection(store, req.model)
        return None, (found, collection.members(store, found))
    return resolve_document(store, req), None


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
    doc, asked = await asyncio.to_thread(_asked, store, req)  # asked: a collection, its documents
    left_out = []  # a collection's documents still being read, left out of its answer
    if asked is not None:
        left_out = collection.check_answerable(
            *asked, engine.reading_ids(), engine.unfit_ids(), answers_while_reading(settings)
        )
    while_reading = asked is None and check_answerable(doc, engine, settings)
    history, question = conversation(req.messages)
    params = answer_params(answer_request(req, question), settings, engine, stop_adds=True)
    # A segmented document (or a collection): the latest user turn picks the segment(s) or documents;
    # the earlier turns go along as history, whichever they were answered from (server/service/segmented.py).
    if asked is not None:
        stream, position = await submit_collection(
            engine, store, settings, asked[0].id, asked[1], question, params, history, left_out
        )
    else:
        stream, position = await submit(engine, store, settings, doc, question, params, history, while_reading)
    base = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": req.model}
    if req.stream:  # the first chunk goes out now, however long the queue
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        chunks = _chunks(stream, base, include_usage, position, settings.sse_heartbeat_s)
        return StreamingResponse(chunks, media_type="text/event-stream", headers=SSE_HEADERS)
    answer = await collect(stream, request)
    stats = answer.stats.model_dump()
    return {
        **base,
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content(answer.said)},
                "finish_reason": _finish_reason(answer.stats.finish_reason),
                "logprobs": None,
            }
        ],
        "usage": _usage(stats),
        "citations": [c.model_dump() for c in answer.citations],
        "quote": answer.quote.model_dump() if answer.quote is not None else None,
        "partial": answer.partial.model_dump() if answer.partial is not None else None,
        "docqa": stats,
    }


def content_piece(kind: str, text: str, quoted: bool) -> tuple[str, bool]:
    """One piece of an answer's message content: a quote-first answer's quote (``kind`` "quote") as a
    Markdown block quote, the answer's text (``kind`` "token") after a blank line when it follows the
    quote (``quoted``). Returns the piece and ``quoted`` for the next one. A stream sends each piece as
    a delta and a response joins them (:func:`content`), so both say the same (issue 49: the response
    took its quote from the final citation, shown only when that was found; the stream, from the quote
    event)."""
    if kind == "partial":  # answered from the part of the document read so far: one line first
        return f"_{text}_\n\n", False
    if kind == "quote":
        return f"> {text}", True
    return (f"\n\n{text}" if quoted else text), False


def content(said: Iterable[tuple[str, str]]) -> str:
    """The message content of an answer from what it said, in order (server/api/answering.py ``Collected.said``)."""
    pieces, quoted = [], False
    for kind, text in said:
        piece, quoted = content_piece(kind, text, quoted)
        pieces.append(piece)
    return "".join(pieces)


def _data(payload: dict | str) -> str:
    text = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return f"data: {text}\n\n"


async def _chunks(
    stream: AnswerStream, base: dict, include_usage: bool, position: int, heartbeat_s: float
) -> AsyncIterator[str]:
    """chat.completion.chunk frames, then ``[DONE]``: the role-only first chunk at once (with the extra
    field ``queue_position``: jobs ahead), SSE comment heartbeats until the first token (clients skip
    comments), then the answer. Closing the generator (client gone) cancels the job."""
    chunk = {**base, "object": "chat.completion.chunk"}

    def delta(d: dict, finish: str | None = None, **extra) -> str:
        return _data({**chunk, "choices": [{"index": 0, "delta": d, "finish_reason": finish}], **extra})

    yield delta({"role": "assistant", "content": ""}, queue_position=position)
    citations: list[dict] = []
    quote: dict | None = None
    quoted = False
    async for event in events(stream, heartbeat_s):
        match event:
            case Heartbeat():
                yield ": keep-alive\n\n"
            case Partial():
                piece, quoted = content_piece("partial", read_so_far(asdict(event)), quoted)
                yield delta({"content": piece}, partial=asdict(event))  # the page shows it apart from the answer
            case Quote(text=text) | Token(text=text):
                piece, quoted = content_piece("quote" if isinstance(event, Quote) else "token", text, quoted)
                yield delta({"content": piece})
            case Citations(citations=cited, quote=q):
                citations, quote = list(cited), (dict(q) if q is not None else None)
            case Stats(values=stats):
                finish = _finish_reason(stats["finish_reason"])
                yield delta({}, finish, citations=citations, quote=quote, docqa=stats)
                if include_usage:
                    yield _data({**chunk, "choices": [], "usage": _usage(stats)})
            case Failed(error=error):  # the openai client raises APIError on an `error` payload
                yield _data(payload(error))
                return
    yield _data("[DONE]")
