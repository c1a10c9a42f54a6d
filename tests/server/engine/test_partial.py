"""server/engine/partial.py on the tiny qwen35, a hybrid with recurrent state and an MTP head
(tests/server/engine/parts.py): a question asked while its document is read shares the part read
from the reading's sequence, gets the answer a document of exactly that part gets, and the reading
goes on to the same snapshot as one no question interrupted; the MTP head, which followed the reading,
drafts for it from the read position (lossless: the answer is the one of a question drafted by
prompt lookup alone)."""

from __future__ import annotations

import numpy as np
import pytest

from ingest.budget import Budget
from ingest.extract import ExtractedText
from ingest.pipeline import prepare, sha256
from server.config import errors
from server.engine import quotes
from server.engine.events import Partial
from server.engine.jobs import DocStates, IngestJob, Pages
from server.engine.partial import PartialReads
from server.engine.sequence import open_sequence
from store.writes import store_new
from tests.server.engine.parts import N_UBATCH, Parts

TEXT = "".join(f"Line {i}: the {w} sat on the mat while the dog ran in the sun.\n" for i, w in enumerate(
    ["cat", "owl", "fox", "hen", "elk", "yak", "ant", "bee", "cod", "eel"] * 3
))  # fmt: skip


@pytest.fixture
def parts(tmp_path, tiny_qwen35_path):
    parts = Parts(tmp_path / "data", tiny_qwen35_path, n_ctx=4096)  # room for a document of 30 lines
    yield parts
    parts.close()


def _store(parts, text=TEXT):
    extracted = ExtractedText(text, [0, len(text) // 2], "text", "utf-8")
    budget = Budget(parts.settings.document_budget, parts.loaded.ctx.n_ctx, parts.model.n_ctx_train)
    prepared = prepare(extracted, parts.loaded.layout, parts.model, budget)
    doc, _ = store_new(parts.store, text.encode(), sha256(text.encode()), "doc.txt", prepared)
    parts.states.mark(doc.id, DocStates.INGESTING)
    return doc


def _reading(parts, doc, share: float | None):
    """``doc``'s reading, chunk by chunk until ``share`` of the document's own tokens is read (None: not
    begun), in the scheduler's ingest slot as the engine has it."""
    work = parts.ingest.start(IngestJob(doc.id, doc.tokens), idle=False, seq_id=parts.scheduler.ingest_seq)
    n_head, n_doc = parts.loaded.layout.document_span(parts.model, work.prefix)
    while share is not None and work.n_done < n_head + share * n_doc:
        assert not parts.ingest.step(work, N_UBATCH, idle=False)
    parts.scheduler.begin_ingest(work)
    parts.admission.reading = parts.scheduler.reading_of
    parts.admission.partial = PartialReads(parts.model, parts.loaded.layout)
    return work


def _asked(parts, doc, **params):
    job = parts.job(doc, "what did the fox do", **params)
    job.while_reading, job.n_closing = True, parts.loaded.layout.n_between(parts.model)
    job.pages = Pages((0, len(TEXT) // 2))
    return job


def _answer(parts, seq) -> list[int]:
    row = None
    while row is None:
        ((_, row),) = parts.runner.prefill_chunks([seq], N_UBATCH)
    seq.answer.begin(row, seq.suffix.tolist())
    while not seq.answer.done:
        ((_, step),) = parts.runner.step([seq]).outcomes
        assert not isinstance(step, Exception), step
    return list(seq.answer.output_ids)


def _events(job) -> list:
    out = []
    while not job.events.empty():
        out.append(job.events.get_nowait())
    return out


def test_a_question_while_reading_gets_the_answer_of_the_part_read_and_the_reading_goes_on(parts):
    doc = _store(parts)
    work = _reading(parts, doc, share=0.4)
    n_read = work.n_done
    job = _asked(parts, doc, max_tokens=12)
    seq = parts.admit(job)
    assert seq.read is not None and seq.n_prefix == n_read and seq.document_state == "reading"
    assert set(seq.answer.drafters) == {"lookup", "mtp"}, "the MTP head followed the reading to its read position"
    (partial,) = [e for e in _events(job) if isinstance(e, Partial)]
    assert 0 < partial.share < 1 and partial.pages == {"first": 1, "last": 2}
    assert 0 < partial.read_through["char"] < len(TEXT) and partial.read_through["page"] in (1, 2)
    answered = _answer(parts, seq)
    assert parts.contexts.target.pos_max(work.seq_id) == n_read - 1, "the reading's sequence is as it was"

    # The part read prefilled from scratch in chunks of the same size into a free sequence, then the
    # same closing scaffolding and question: the same (greedy) answer.
    ctx, other = parts.contexts.target, 2
    for at in range(0, n_read, N_UBATCH):
        ctx.decode(work.prefix[at : min(at + N_UBATCH, n_read)], at, seq_id=other, outputs="none")
    index = parts.admission.lookups.of(seq.read.hot)
    scratch = open_sequence(
        _asked(parts, doc, max_tokens=12), seq.read.hot, other, parts.loaded, 0, n_shared=n_read, index=index
    )
    assert _answer(parts, scratch) == answered

    again = parts.admission.admit(_asked(parts, doc), 2, 0, 1)
    assert again.read is seq.read, "questions at one read position share what was made of it"

    while not parts.ingest.step(work, N_UBATCH, idle=False):
        pass
    assert parts.store.get(doc.id).status == "ready", "the reading went on to its end and its snapshot"


def test_the_quote_index_and_lookup_cover_only_the_part_read(parts):
    doc = _store(parts)
    work = _reading(parts, doc, share=0.3)
    seq = parts.admit(_asked(parts, doc, quote=None))
    n_head = parts.loaded.layout.n_head(parts.model)
    found = quotes.document_quotes(seq.hot, parts.loaded)
    assert len(found.index.tokens) == work.n_done - n_head, "what is not read cannot be quoted"
    closing = parts.loaded.layout.n_between(parts.model)
    assert len(seq.lookup.index.tokens) == len(seq.hot.prefix) == work.n_done + closing, "nor drafted by lookup"


def test_nothing_read_yet_is_a_409_that_says_so(parts):
    doc = _store(parts)
    _reading(parts, doc, share=None)
    with pytest.raises(errors.DocumentNotReady, match="nothing of it is read yet"):
        parts.admit(_asked(parts, doc))


def test_a_question_not_asked_while_reading_is_still_refused(parts):
    doc = _store(parts)
    _reading(parts, doc, share=0.3)
    with pytest.raises(errors.DocumentNotReady, match="being ingested"):
        parts.admit(parts.job(doc))
    assert np.all(parts.contexts.target.pos_max(1) == -1), "nothing was shared"


def test_a_draft_model_that_followed_the_reading_drafts_from_the_read_position(tmp_path, gemma_path):
    """The embedded Gemma drafting for itself (server/engine/draft_model.py): it followed the reading
    chunk by chunk, so a question asked meanwhile shares its cells at the read position and its drafts
    are accepted as for a whole document."""
    parts = Parts(tmp_path / "data", gemma_path, n_ctx=4096, draft_model_path=gemma_path, draft_model_tokens=4)
    try:
        doc = _store(parts)
        work = _reading(parts, doc, share=0.5)
        seq = parts.admit(_asked(parts, doc, max_tokens=24, sources=("draft",), window=4))
        assert "draft" in seq.answer.drafters
        assert parts.loaded.contexts.companions[0].ctx.pos_max(seq.seq_id) == work.n_done - 1
        _answer(parts, seq)
        seq.answer.close()
        stats = seq.answer.stats
        assert stats.drafted_by_source.get("draft", 0) > 0, stats
        assert stats.accepted_by_source["draft"] >= 0.7 * stats.drafted_by_source["draft"], stats
    finally:
        parts.close()
