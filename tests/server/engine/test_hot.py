"""server/engine/hot.py ``HotDocs.restore`` as a table, on the tiny qwen35 (tests/server/engine/parts.py):
where a document is found (the sequence, RAM, disk), what the answer's stats call it, and that every
context then holds exactly its prefix: the target's document sequence and the MTP head's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ingest import snapshot


def _cleared(parts, doc):
    parts.docs.restore(doc.id)
    parts.docs.clear()


def _out_of_ram(parts, doc):
    parts.docs.restore(doc.id)
    parts.docs.clear()
    parts.docs.evict(doc.id)


def _asked_once(parts, doc):
    parts.docs.restore(doc.id)


@pytest.mark.parametrize(
    ("before", "found", "from_disk", "why"),
    [
        (lambda parts, doc: None, "prefilled", False, "the first question after an ingestion here"),
        (_asked_once, "hot", False, "the sequence holds it already"),
        (_cleared, "hot", False, "its state is in RAM"),
        (_out_of_ram, "restored", True, "only its snapshot is left"),
    ],
)
def test_restore_finds_the_document_and_every_context_holds_its_prefix(
    parts, monkeypatch, before, found, from_disk, why
):  # noqa: E501
    doc = parts.ingest_document()
    before(parts, doc)
    loads, real = [], snapshot.load
    monkeypatch.setattr(snapshot, "load", lambda *a: loads.append(a) or real(*a))
    hot, source = parts.docs.restore(doc.id)
    assert (source, bool(loads)) == (found, from_disk), why
    n = len(hot.prefix)
    assert parts.docs.loaded == doc.id and parts.docs.holds_prefix(n), why
    mtp = parts.contexts.companions[0]
    assert mtp.loaded == doc.id and mtp.ctx.pos_max(parts.docs.seq_id) == n - 1, why
    assert hot.last_hidden is not None and np.isfinite(hot.last_hidden).all(), why


@pytest.mark.parametrize(
    ("damage", "raised"),
    [
        (lambda d: snapshot.remove(d), snapshot.SnapshotMissing),
        (lambda d: (d / snapshot.STATE_FILE).write_bytes(b"\0" * 64), snapshot.SnapshotDamaged),
        (lambda d: _manifest(d, model_fingerprint="another model"), snapshot.SnapshotIncompatible),
        (lambda d: (d / "mtp.bin").unlink(), snapshot.SnapshotDamaged),
    ],
)
def test_a_snapshot_that_cannot_be_used_is_refused_and_leaves_the_sequence_empty(parts, damage, raised):
    doc = parts.ingest_document()
    _out_of_ram(parts, doc)
    damage(parts.store.state_dir(doc.id))
    with pytest.raises(raised):
        parts.docs.restore(doc.id)
    assert parts.docs.loaded is None and parts.contexts.target.pos_max(parts.docs.seq_id) == -1


def _manifest(directory, **changes) -> None:
    path = directory / "state.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | changes))
