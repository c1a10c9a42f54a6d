"""server/engine/companions.py and the MTP head's companion (server/engine/mtp.py), on the tiny qwen35
(tests/server/engine/parts.py): a companion drafts only for a document its document sequence holds,
follows every target decode of the sequences it shares, and rides in the target's snapshot."""

from __future__ import annotations

import numpy as np
import pytest

from ingest import snapshot
from server.engine.companions import NONE, Companions
from server.engine.mtp import MtpHead


def test_the_mtp_head_is_the_one_companion_and_its_part_rides_in_the_snapshot(parts):
    companions = parts.contexts.companions
    assert companions.names == ("mtp",) and isinstance(companions[0], MtpHead)
    doc = parts.ingest_document()
    meta = snapshot.read_meta(parts.store.state_dir(doc.id))
    assert meta.mtp and {"mtp.bin", "mtp_h.npy"} <= set(meta.files)
    assert NONE.snapshot_part(0) is None and NONE.share("x", 1, 10) == {}


@pytest.mark.parametrize(
    ("held", "shares"), [(True, True), (False, False)], ids=["the document sequence holds it", "it does not"]
)
def test_share_gives_a_drafter_only_for_the_document_it_holds(parts, held, shares):
    doc = parts.ingest_document()
    hot, _ = parts.docs.restore(doc.id)
    if not held:
        parts.docs.clear()
    drafters = parts.contexts.companions.share(doc.id, 1, len(hot.prefix))
    assert ("mtp" in drafters) is shares
    mtp = parts.contexts.companions[0]
    assert mtp.ctx.pos_max(1) == (len(hot.prefix) - 1 if shares else -1), "shared cells, or none"
    if shares:
        np.testing.assert_array_equal(drafters["mtp"].pending_h, hot.last_hidden)


def test_decoded_catches_up_every_sequence_it_follows_in_one_decode(parts):
    doc = parts.ingest_document()
    seqs = [parts.admit(parts.job(doc)) for _ in range(2)]
    target, mtp = parts.contexts.target, parts.contexts.companions[0]
    decodes = []
    real = mtp.ctx.decode_rows
    mtp.ctx.decode_rows = lambda *a, **k: decodes.append(len(a[0])) or real(*a, **k)
    pieces = [(s.seq_id, s.suffix, s.n_prefix) for s in seqs]
    tokens = np.concatenate([p for _, p, _ in pieces])
    positions = np.concatenate([np.arange(p0, p0 + len(t), dtype=np.int32) for _, t, p0 in pieces])
    seq_ids = np.concatenate([np.full(len(t), s, np.int32) for s, t, _ in pieces])
    target.decode_rows(tokens, positions, seq_ids, np.zeros(len(tokens), np.int8))
    failed, shared = Companions((mtp,)).decoded([*pieces, (99, np.zeros(3, np.int32), 0)])  # 99: not followed
    assert failed == {} and shared == 1 and decodes == [len(tokens)], "one MTP decode for both, 99 skipped"
    for s in seqs:
        d = s.answer.drafters["mtp"]
        assert d._rows_pos0 == s.n_prefix and len(d._rows) == len(s.suffix)
