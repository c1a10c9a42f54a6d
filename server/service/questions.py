"""A question on its way to the engine, as every front door asks it (the answer and chat routes, a
collection, MCP through them): the checks a document must pass, the question tokenized off the event
loop and the engine thread, checked against the context before it queues, and the job, or for a
segmented document or a collection one job per chosen source read as one stream
(server/service/segmented.py).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from functools import partial

import numpy as np

from ingest.errors import DocumentFilesDamaged
from server.config.errors import DocumentFailed, DocumentIngesting, QuestionTooLong, damaged
from server.config.settings import Settings
from server.engine.engine import Engine
from server.engine.events import AnswerStream
from server.engine.jobs import AnswerJob, Pages
from server.engine.quotes import judged_after
from server.service import collection, refit, segmented
from spec.loop import AnswerParams
from spec.quote import QuoteConstraint
from store.collection_index import MemberDamaged
from store.docstore import FAILED, INGESTING, DocRecord, DocStore


def answers_while_reading(settings: Settings) -> bool:
    """Questions are answered from what is read so far (DOCQA_ASK_WHILE_READING, which needs
    DOCQA_PARALLEL_INGEST: the reading goes on in a sequence of its own)."""
    return settings.ask_while_reading and settings.parallel_ingest


def check_answerable(doc: DocRecord, engine: Engine, settings: Settings | None = None) -> bool:
    """Raise a 409 naming the reason when ``doc`` cannot be asked about yet (or at all). True when it
    is in its first reading and is answered from the part read so far (``settings``:
    DOCQA_ASK_WHILE_READING with DOCQA_PARALLEL_INGEST; None: never), False when it is ready."""
    if doc.status == INGESTING:
        view = engine.view(doc.id)
        pct = (view.progress or 0.0) * 100
        if settings is not None and answers_while_reading(settings) and pct > 0:
            return True
        raise DocumentIngesting(f"document {doc.id} is still being ingested ({pct:.0f}%); retry soon")
    if doc.status == FAILED:
        raise DocumentFailed(f"document {doc.id} failed to ingest: {doc.error}; upload it again")
    if (why := engine.view(doc.id).unfit) is not None:  # read for a larger context (server/service/refit.py)
        raise refit.refuse(doc.id, why)
    return False


async def submit(
    engine: Engine,
    store: DocStore,
    settings: Settings,
    doc: DocRecord,
    question: str,
    params: AnswerParams,
    history: tuple[tuple[str, str], ...] = (),
    while_reading: bool = False,
) -> tuple[AnswerStream, int]:
    """Tokenize the question (off the event loop and the engine thread: tokenizer calls are read-only
    and thread-safe), refuse it with 413 if it cannot fit the context next to its document, and queue
    it: one job, or for a segmented document the jobs of the segments it ranks best for
    (server/service/segmented.py), read as one stream. ``while_reading`` (:func:`check_answerable`):
    the document is in its first reading, answered from the part read so far (a segmented one from
    its segments read completely; 409 until the first is). Returns (stream, jobs waiting ahead of it)."""
    close = settings.segment_close_ratio
    try:
        planned, (suffix, n_constrained), earlier = await _tokenized(
            engine,
            question,
            history,
            params,
            lambda: segmented.plan(engine.repairs, doc, question, close, history, while_reading),
        )
    except DocumentFilesDamaged as exc:  # its segment list or index, beyond repair
        raise damaged(exc, doc.id) from None
    if planned is None:
        _check_fits(engine, suffix, doc.tokens, "the document")
        loop = asyncio.get_running_loop()
        extra = {"history": history, "earlier": earlier, "n_constrained": n_constrained}
        if while_reading:
            extra |= await asyncio.to_thread(_while_reading, engine, doc)
        job = AnswerJob(doc.id, question, params, loop, suffix, doc.tokens, **extra)
        return job, engine.submit_answer(job)

    def part(s: segmented.Source) -> str:
        return f"the part it is answered from (pages {s.where['pages'][0]}-{s.where['pages'][1]})"

    return _queue(engine, planned, part, suffix, n_constrained, earlier, question, params, history, while_reading)


async def submit_collection(
    engine: Engine,
    store: DocStore,
    settings: Settings,
    collection_id: str,
    docs: list[DocRecord],
    question: str,
    params: AnswerParams,
    history: tuple[tuple[str, str], ...] = (),
    left_out: list[DocRecord] | None = None,
) -> tuple[AnswerStream, int]:
    """:func:`submit` for a question to a collection whose documents are ``docs``: they are ranked as
    one long document's segments (server/service/collection.py) and the jobs of the best one or two
    documents (or segments) are read as one stream, each checked against the context first.
    ``left_out``: those of ``docs`` still being read (collection.py ``check_answerable``), not
    answered from; the stream says so first (a Partial event naming them). Returns (stream, jobs
    waiting ahead of it)."""
    close, gone = settings.segment_close_ratio, {d.id for d in left_out or ()}
    ready = [d for d in docs if d.id not in gone]
    try:
        planned, (suffix, n_constrained), earlier = await _tokenized(
            engine,
            question,
            history,
            params,
            lambda: collection.plan(engine.repairs, collection_id, ready, question, close, history),
        )
    except MemberDamaged as exc:  # a document's text or segment list, beyond repair
        raise damaged(exc.error, exc.doc_id) from None
    if left_out:
        planned = replace(planned, partial=collection.left_out(docs, left_out, engine.reading_ids()))

    def member(s: segmented.Source) -> str:
        return f"the document it is answered from ({s.where['label']})"

    return _queue(engine, planned, member, suffix, n_constrained, earlier, question, params, history)


async def _tokenized(engine: Engine, question: str, history, params: AnswerParams, plan):
    """(``plan()``, (the question's suffix, a quote-first answer's scaffolding after its quote), the
    earlier turns' token ids), each in a worker thread, at once."""
    return await asyncio.gather(
        asyncio.to_thread(plan),
        asyncio.to_thread(_suffix, engine, question, history, params),
        asyncio.to_thread(_earlier_turns, engine, history),
    )


def _suffix(engine: Engine, question: str, history, params: AnswerParams) -> tuple[np.ndarray, int]:
    """The question's suffix ids, and the most tokens a quote-first answer decodes before its answer:
    its quote, the scaffolding (``quote_answer``) and, where it is judged after its quote (server/engine/
    quotes.py ``judged_after``), the judgment's turn (the question and the passage again,
    ingest/prompt.py ``quote_judge``, and the reply). A judgment before the quote takes no cell here."""
    quote, layout, model = params.quote, engine.layout, engine.model
    suffix = layout.question_suffix(model, question, history, quote=quote is not None)
    if quote is None:
        return suffix, 0
    after = judged_after(quote, engine.loaded)
    scaffold = layout.quote_answer(model, after)
    n = QuoteConstraint.MAX_LEAD + quote.max_tokens + 1 + len(scaffold)
    if after:  # the passage: a header row, the quote and up to 40 tokens of its sentence on each side
        passage = QuoteConstraint.MAX_HEADER + quote.max_tokens + 80
        n += len(layout.quote_judge(model, question, "")) + passage + 1
    return suffix, n


def _queue(
    engine: Engine, planned, what, suffix, n_constrained, earlier, question, params, history, while_reading=False
) -> tuple[AnswerStream, int]:
    """Check each planned source against the context (``what(source)``: what the 413 calls it), then
    queue a job for each, read as one stream (server/service/segmented.py ``submit``). ``while_reading``:
    the sources are the segments read so far of a document still being read."""
    loop = asyncio.get_running_loop()
    for s in planned.sources:
        _check_fits(engine, suffix, s.n_tokens, what(s))
    extra = {"history": history, "earlier": earlier, "n_constrained": n_constrained, "while_reading": while_reading}
    return segmented.submit(
        engine,
        planned,
        lambda s: AnswerJob(s.doc_id, question, params, loop, suffix, s.n_tokens, segment=s.segment, **extra),
    )


def _earlier_turns(engine: Engine, history: tuple[tuple[str, str], ...]) -> tuple[np.ndarray, ...]:
    """A conversation's earlier turns as token ids, each its question with the scaffolding an answer
    follows, then its answer: history for this request's answer (spec/history.py)."""
    layout, model = engine.layout, engine.model
    return tuple(
        np.concatenate(
            [layout.question_suffix(model, q), model.tokenize(layout.answer_lead + a.strip(), parse_special=False)]
        ).astype(np.int32)
        for q, a in history
        if a.strip()
    )


def _while_reading(engine: Engine, doc: DocRecord) -> dict:
    """What a job answered from the part read so far needs: the layout's tokens after the document (it
    decodes them to close the part read) and the document's pages (to say how far that part reaches)."""
    text = engine.repairs.read(doc.id, partial(engine.store.read_text, doc.id))
    pages = Pages(tuple(text.page_starts) or (0,), text.first_page)
    return {"while_reading": True, "n_closing": engine.layout.n_between(engine.model), "pages": pages}


def _check_fits(engine: Engine, suffix: np.ndarray, n_prefix: int, what: str) -> None:
    """QuestionTooLong (413) unless the prefix, the suffix and the first answer token fit n_ctx."""
    n_ctx = engine.n_ctx
    if n_prefix + len(suffix) + 1 > n_ctx:
        raise QuestionTooLong(
            f"the question (with the conversation before it) is {len(suffix)} tokens; with {what} "
            f"({n_prefix} tokens) that exceeds the context of {n_ctx} tokens; ask a shorter question, "
            f"or start a new conversation"
        )
