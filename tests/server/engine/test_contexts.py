"""The reader of DOCQA_CPU_REPACK=pair (server/engine/contexts.py ``Contexts.reader``, made in
loading.py) on the tiny qwen35, a hybrid with recurrent state and an MTP head: documents are read by
a second instance of the model with plain weights; a finished reading is kept (in RAM and on disk)
from the reader, byte for byte, without a cell of the target; a question asked meanwhile gets a copy
of the part read, in cells of its own; the MTP head follows the reader."""

from __future__ import annotations

import pytest

from server.engine.jobs import IngestJob
from server.engine.partial import PartialReads
from tests.server.engine.parts import N_UBATCH, Parts
from tests.server.engine.test_partial import TEXT, _answer, _asked, _store


@pytest.fixture
def parts(tmp_path, tiny_qwen35_path):
    parts = Parts(tmp_path / "data", tiny_qwen35_path, n_ctx=4096, cpu_repack="pair")
    yield parts
    parts.close()


def test_the_reader_is_a_plain_instance_and_says_what_it_costs(parts):
    reader = parts.contexts.reader
    assert reader is not None and reader.model is not parts.model
    assert reader.model.extra_bufts is False and parts.model.extra_bufts is True
    assert "second instance" in parts.loaded.reader and "MiB" in parts.loaded.reader


def test_a_finished_reading_takes_no_cell_of_the_target_and_answers_from_its_ram_state(parts):
    doc = parts.ingest_document(TEXT)
    assert doc.status == "ready"
    reader, target = parts.contexts.reader, parts.contexts.target
    assert all(reader.pos_max(s) == -1 for s in range(4)), "the reader keeps nothing of a finished reading"
    assert all(target.pos_max(s) == -1 for s in range(4)) and parts.docs.loaded is None, "nor does the target"
    kept = parts.docs.get(doc.id)
    assert kept.state is not None and "mtp" in kept.parts

    # The same prefix read again in the reader, in the same chunks and sequence: the bytes kept.
    prefix, again = parts.store.read_prefix(doc.id), parts.scheduler.ingest_seq
    for at in range(0, len(prefix), N_UBATCH):
        reader.decode(prefix[at : at + N_UBATCH], at, seq_id=again, outputs="none")
    assert reader.state_get(again) == kept.state
    reader.seq_rm(again, 0)

    seq = parts.admit(parts.job(doc, "what did the fox do"))
    assert seq.document_state != "restored", "from RAM, not from disk"
    assert target.pos_max(parts.docs.seq_id) == doc.tokens - 1
    assert "mtp" in seq.answer.drafters, "the MTP head followed the reader's hidden states"
    assert _answer(parts, seq)


def test_a_question_while_reading_gets_a_copy_of_the_part_read(parts):
    doc = _store(parts)
    work = parts.ingest.start(IngestJob(doc.id, doc.tokens), idle=False, seq_id=parts.scheduler.ingest_seq)
    n_head, n_doc = parts.loaded.layout.document_span(parts.model, work.prefix)
    while work.n_done < n_head + 0.4 * n_doc:
        assert not parts.ingest.step(work, N_UBATCH, idle=False)
    parts.scheduler.begin_ingest(work)
    parts.admission.reading = parts.scheduler.reading_of
    parts.admission.partial = PartialReads(parts.model, parts.loaded.layout)
    job = _asked(parts, doc, max_tokens=12)
    needed = parts.scheduler.cells_needed(job)
    assert needed >= work.n_done, "its copy of the part read is in its own reservation"
    seq = parts.admit(job)
    assert seq.read is not None and seq.n_prefix == work.n_done
    target, reader = parts.contexts.target, parts.contexts.reader
    assert target.pos_max(seq.seq_id) == work.n_done - 1 and target.pos_max(work.seq_id) == -1
    assert _answer(parts, seq)
    assert reader.pos_max(work.seq_id) == work.n_done - 1, "the reading's sequence is as it was"
    assert parts.scheduler.cells_read() == 0
    while not parts.ingest.step(work, N_UBATCH, idle=False):
        pass
    assert parts.store.get(doc.id).status == "ready", "the reading went on to its end and its snapshot"
    assert target.pos_max(work.seq_id) == -1 and reader.pos_max(work.seq_id) == -1
