"""Structural checks of one verify step on the real embedded model.

* Every emitted token is the target's argmax in the verify call (on the shipped Q4_K_M).
* After partial acceptance (0, some, all) and rollback, the sequence equals a fresh decode of the
  accepted tokens: the next step's logits agree (exactly when both calls have >= 8 rows, notes §14).
"""

from __future__ import annotations

import numpy as np
import pytest

from spec.sampling import Sampler, SamplingParams
from spec.verify import accept_greedy
from testkit.harness import open_ctx, verify

TEXT = (
    "The quick brown fox jumps over the lazy dog. The committee met on Tuesday to discuss the budget, "
    "and the chairman read the minutes of the previous meeting aloud before the vote."
)


@pytest.fixture(scope="module")
def f16(gemma_f16_path):
    from runtime.llama import Model

    model = Model(gemma_f16_path)
    yield model
    model.close()


def _target_choices(ctx, prefix, last, k):
    """The target's own greedy continuation as a verify call of k+1 rows sees it (built row by row)."""
    draft: list[int] = []
    for i in range(k):
        ctx.decode([last, *draft, *([last] * (k - i))], len(prefix), outputs="all")
        draft.append(int(ctx.logits()[i].argmax()))
        ctx.seq_rm(0, len(prefix))
    return draft


def test_emitted_tokens_are_verify_argmax(gemma):
    ctx = open_ctx(gemma, n_ctx=1024)
    prefix = np.concatenate([[gemma.bos], gemma.tokenize(TEXT, parse_special=False)]).astype(np.int32)
    ctx.prefill(prefix[:-1], 0)
    last = int(prefix[-1])
    draft = gemma.tokenize(" The quick brown fox jumps", parse_special=False).tolist()
    result = verify(ctx, Sampler(SamplingParams()), last, draft, len(prefix) - 1)
    choices = ctx.logits().argmax(axis=1)  # the same call's logits, still valid
    assert result.tokens == [*draft[: result.n_accepted], int(choices[result.n_accepted])]
    assert all(int(choices[i]) == draft[i] for i in range(result.n_accepted))
    ctx.close()


@pytest.mark.parametrize("n_accepted", [0, 3, 8, 12])
def test_rollback_equals_fresh_decode(f16, n_accepted):
    k = 12
    model = f16
    prefix = np.concatenate([[model.bos], model.tokenize(TEXT, parse_special=False)]).astype(np.int32)
    ctx = open_ctx(model, n_ctx=1024)
    ctx.prefill(prefix, 0)
    last = int(ctx.logits()[-1].argmax())
    good = _target_choices(ctx, prefix, last, k)
    draft = list(good)
    if n_accepted < k:
        draft[n_accepted] = (good[n_accepted] + 1) % model.n_vocab  # force a rejection there
    pos = len(prefix)
    result = verify(ctx, Sampler(SamplingParams()), last, draft, pos)
    assert result.n_accepted == n_accepted
    n_keep = pos + 1 + n_accepted
    if n_accepted < k:
        assert ctx.seq_rm(0, n_keep)
    assert ctx.pos_max(0) == n_keep - 1
    nxt = result.tokens[-1]
    ctx.decode([nxt], n_keep, outputs="all")
    after_rollback = ctx.logits()[0].copy()

    fresh = open_ctx(model, n_ctx=1024)
    fresh.prefill(prefix, 0)
    fresh.decode([last, *draft[:n_accepted]], pos, outputs="all")
    fresh.decode([nxt], n_keep, outputs="all")
    reference = fresh.logits()[0].copy()
    if n_accepted + 1 >= 8:  # both calls had >= 8 rows: same kernels, bit-identical (notes §14)
        np.testing.assert_array_equal(after_rollback, reference)
    else:
        assert np.abs(after_rollback - reference).max() < 0.3
        assert after_rollback.argmax() == reference.argmax()
    ctx.close()
    fresh.close()


def test_accept_greedy_table():
    # choices[i] is the target's token after [last, d_1..d_i]
    assert accept_greedy(np.array([4, 5, 6, 7]), [4, 5, 6]) == 3  # all accepted; choices[3] is the bonus
    assert accept_greedy(np.array([4, 9, 6, 7]), [4, 5, 6]) == 1  # stop at the first disagreement
    assert accept_greedy(np.array([1, 5, 6, 7]), [4, 5, 6]) == 0  # 0 accepted: emit choices[0]
    assert accept_greedy(np.array([3]), []) == 0  # no draft: a plain decode step
