"""server/engine/runner.py as tables, on the tiny qwen35 (tests/server/engine/parts.py): how
``prefill_chunks`` shares a budget between the questions still prefilling, and that ``rebuild``
brings a sequence back to where its answer expects it (in the MTP head too) or says it could not."""

from __future__ import annotations

import numpy as np
import pytest

from spec.loop import Answer, RollbackFailed
from spec.sampling import SamplingParams


@pytest.mark.parametrize(
    ("suffixes", "budget", "steps", "why"),
    [
        ([10], 64, [[10]], "a short question takes one call and starts at once"),
        ([50], 16, [[16], [32], [48], [50]], "a long one takes the budget, call after call"),
        ([20, 5], 16, [[16, 0], [20, 5]], "the oldest first; the next shares what it leaves"),
        ([6, 6], 16, [[6, 6]], "short ones share one call"),
    ],
)
def test_prefill_chunks_shares_the_budget_oldest_first(parts, suffixes, budget, steps, why):
    doc = parts.ingest_document()
    seqs = []
    for n in suffixes:
        job = parts.job(doc)
        job.suffix = np.resize(job.suffix, n).astype(np.int32)  # a question of exactly n tokens
        seqs.append(parts.admit(job))
    for expected in steps:
        started = parts.runner.prefill_chunks([s for s in seqs if s.prefilling], budget)
        assert [s.n_prefilled for s in seqs] == expected, why
        for seq, row in started:  # a logits row once, when its whole suffix is in
            assert (row is not None) == (not seq.prefilling), why
            mtp = seq.answer.drafters["mtp"]  # the MTP head followed the target's rows
            assert mtp._rows_pos0 + len(mtp._rows) == seq.n_prefix + seq.n_prefilled, why
    assert not any(s.prefilling for s in seqs)


def _answering(parts) -> tuple:
    """A question two verify steps into its answer (sampled, seeded: the tiny model's greedy answers
    end after a few tokens)."""
    sampling = SamplingParams(temperature=1.5, seed=3)
    seq = parts.admit(parts.job(parts.ingest_document(), max_tokens=40, window=16, sampling=sampling))
    (_, row), *_ = parts.runner.prefill_chunks([seq], 64)
    seq.answer.begin(row, seq.suffix.tolist())
    for _ in range(2):
        ((_, step),) = parts.runner.step([seq]).outcomes
        assert not isinstance(step, Exception) and not step.rebuild
    assert not seq.answer.done
    return seq, parts.contexts.target


def test_rebuild_ends_where_the_answer_expects_it_and_restarts_the_mtp_head(parts):
    seq, ctx = _answering(parts)
    n_past, pending = seq.answer.n_past, seq.answer.drafters["mtp"].pending_h.copy()
    parts.runner.rebuild(seq)
    assert ctx.pos_max(seq.seq_id) == n_past - 1 == seq.answer.n_past - 1
    mtp = seq.answer.drafters["mtp"]
    assert mtp._rows_pos0 + len(mtp._rows) == n_past, "the MTP head caught up on the replay"
    np.testing.assert_allclose(mtp.pending_h, pending, atol=1e-4)  # the same state as before the rebuild
    ((_, step),) = parts.runner.step([seq]).outcomes
    assert not isinstance(step, Exception), step


def test_a_rebuild_that_ends_elsewhere_raises(parts, monkeypatch):
    seq, _ = _answering(parts)
    monkeypatch.setattr(Answer, "replay_ids", lambda self: self.output_ids[:-2])  # one token short
    with pytest.raises(RollbackFailed, match="expected"):
        parts.runner.rebuild(seq)
