"""server/engine/admission.py as a table, on the tiny qwen35 (tests/server/engine/parts.py): a question
is admitted with every drafter, or refused with one typed reason, and admission writes nothing
(the row's status and the document's files are as they were)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ingest import snapshot
from ingest.errors import PrefixDamaged
from server.config import errors
from server.engine.admission import Unusable
from server.engine.jobs import DocStates
from spec.mtp import MtpDrafter


def test_a_ready_document_admits_the_question_with_every_drafter(parts):
    seq = parts.admit(parts.job(parts.ingest_document()))
    assert set(seq.answer.drafters) == {"lookup", "mtp"}  # answer history is off in the test settings
    assert isinstance(seq.answer.drafters["mtp"], MtpDrafter) and seq.document_state == "prefilled"
    assert parts.contexts.target.pos_max(seq.seq_id) == seq.n_prefix - 1


def _out_of_ram(parts, doc) -> None:
    parts.docs.restore(doc.id)
    parts.docs.clear()
    parts.docs.evict(doc.id)


def _manifest(parts, doc, **changes) -> None:
    path = parts.store.state_dir(doc.id) / "state.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | changes))


def _long_question(parts, job) -> None:
    job.suffix = np.zeros(parts.loaded.ctx.n_ctx, np.int32)


@pytest.mark.parametrize(
    ("setup", "reason", "why"),
    [
        (lambda p, d, j: p.states.mark(d.id, DocStates.DELETED), errors.DocumentNotFound, "deleted (Engine.forget)"),
        (lambda p, d, j: p.states.mark(d.id, DocStates.INGESTING), errors.DocumentNotReady, "queued for prefill again"),
        (lambda p, d, j: p.states.mark(d.id, DocStates.FAILED), errors.DocumentFailed, "its ingestion failed here"),
        (lambda p, d, j: (_out_of_ram(p, d), p.store.delete(d.id)), errors.DocumentNotFound, "its files went"),
        (lambda p, d, j: (_out_of_ram(p, d), _manifest(p, d, model_fingerprint="another")), errors.SnapshotUnusable,
         "made by another model"),
        (lambda p, d, j: (_out_of_ram(p, d), snapshot.remove(p.store.state_dir(d.id))), snapshot.SnapshotMissing,
         "its snapshot is gone: the ingestion side rebuilds it"),
        (lambda p, d, j: (_out_of_ram(p, d), (p.store.state_dir(d.id) / "prefix.npy").write_bytes(b"npy")),
         PrefixDamaged, "its prefix.npy is damaged: the ingestion side repairs it"),
        (lambda p, d, j: _long_question(p, j), errors.QuestionTooLong, "the question no longer fits"),
    ],
)  # fmt: skip
def test_a_question_that_cannot_start_gets_one_typed_reason_and_nothing_is_written(parts, setup, reason, why):
    doc = parts.ingest_document()
    job = parts.job(doc)
    setup(parts, doc, job)
    files = sorted(p.name for p in parts.store.dir(doc.id).rglob("*")) if parts.store.dir(doc.id).exists() else []
    row = parts.store.get(doc.id)
    with pytest.raises((reason, Unusable)) as raised:
        parts.admission.admit(job, 1, 100, 0)
    if raised.type is Unusable:
        assert isinstance(raised.value.cause, reason), why
    else:
        assert raised.type is reason, why
    assert parts.store.get(doc.id) == row, f"{why}: the row is as it was"
    after = sorted(p.name for p in parts.store.dir(doc.id).rglob("*")) if parts.store.dir(doc.id).exists() else []
    assert after == files and not parts.resubmitted, f"{why}: no file written or removed, nothing queued"
