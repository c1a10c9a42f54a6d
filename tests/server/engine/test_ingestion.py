"""server/engine/ingestion.py, on the tiny qwen35 (tests/server/engine/parts.py): what the ingestion
side does with what admission found unusable (``Ingestions.recover``), and what the engine then
knows of the document (jobs.DocStates)."""

from __future__ import annotations

import pytest

from ingest import snapshot
from server.config import errors
from server.engine.admission import Unusable
from server.engine.jobs import DocStates
from store.docstore import INGESTING, READY


def _unusable(parts, doc, job) -> Unusable:
    parts.docs.restore(doc.id)
    parts.docs.clear()
    parts.docs.evict(doc.id)
    with pytest.raises(Unusable) as raised:
        parts.admission.admit(job, 1, 100, 0)
    return raised.value


def test_an_ingested_document_is_ready_and_the_engine_has_nothing_to_say_of_it(parts):
    doc = parts.ingest_document()
    assert doc.status == READY and parts.states.get(doc.id) is None
    assert snapshot.describes(parts.store.state_dir(doc.id), parts.store.read_prefix(doc.id))


def test_a_damaged_prefix_is_made_again_from_the_stored_text_and_the_question_admitted(parts):
    doc = parts.ingest_document()
    job = parts.job(doc)
    prefix = parts.store.read_prefix(doc.id)
    (parts.store.state_dir(doc.id) / "prefix.npy").write_bytes(b"not a prefix")
    why = _unusable(parts, doc, job)
    assert parts.ingest.recover(job, why) is None, "repaired: admit it again"
    assert (parts.store.read_prefix(doc.id) == prefix).all()
    assert parts.admission.admit(job, 1, 100, 0).n_prefix == len(prefix)


def test_a_prefix_that_cannot_be_repaired_is_a_409_naming_it(parts):
    doc = parts.ingest_document()
    job = parts.job(doc)
    (parts.store.state_dir(doc.id) / "prefix.npy").write_bytes(b"not a prefix")
    (parts.store.dir(doc.id) / "text.json").write_text("{")  # the text it would be made from, damaged too
    error = parts.ingest.recover(job, _unusable(parts, doc, job))
    assert isinstance(error, errors.DocumentDamaged) and "text.json" in str(error)
    assert parts.store.get(doc.id).status == READY, "a damaged file is reported, not rebuilt"


def test_a_missing_snapshot_is_prefilled_again_and_its_questions_told_to_retry(parts):
    doc = parts.ingest_document()
    job = parts.job(doc)
    snapshot.remove(parts.store.state_dir(doc.id))
    error = parts.ingest.recover(job, _unusable(parts, doc, job))
    assert isinstance(error, errors.SnapshotRebuilding) and "was missing" in str(error)
    assert parts.store.get(doc.id).status == INGESTING and parts.resubmitted == [(doc.id, doc.tokens)]


def test_a_failed_ingestion_is_what_the_engine_then_knows(parts, monkeypatch):
    monkeypatch.setattr(snapshot, "save", lambda *a: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    doc = parts.ingest_document()
    assert doc.status == "failed" and "disk is full" in doc.error
    assert parts.states.get(doc.id) == DocStates.FAILED
