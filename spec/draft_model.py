"""Drafts from a separate, smaller model that shares the target's vocabulary (llama-server's
``-md``): the general form of a drafter for targets without MTP layers.

The draft model has a context of its own on the same sequence ids as the target (server/engine
loads it: server/engine/draft_model.py). Its document sequence holds the document prefix (prefilled
and snapshotted with the target's at ingestion), and each question's sequence shares it. A question's
drafter then follows its sequence lazily: the tokens the target decided since this drafter last
drafted (the question's suffix at first) are decoded when it next drafts, in the same call as its
first draft token, so steps that do not use it cost nothing.

Cursor (spec/loop.py): the target holds positions ``< pos`` and ``last`` sits at ``pos``. A draft of
``k`` decodes the missing context and ``last`` (one call, the last row's logits give the first
draft), then ``k - 1`` one-row calls; greedy top-1, so verification stays exact. The draft context
then holds positions up to ``pos + k - 1``; :meth:`DraftModelDrafter.rollback` removes what the
target rejected.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from runtime.llama import Context

#: Most tokens of one sequence's catch-up left for the batched first draft call (the rest is decoded
#: on its own first, in chunks: a batch must fit n_batch).
CATCH_UP_ROWS = 32


class DraftModelDrafter:
    """The draft model's drafts for sequence ``seq_id``, whose first ``n_prefix`` positions (the
    document) are in ``ctx`` already. A model drafter (spec/sources.py ``ModelDrafter``)."""

    def __init__(self, ctx: Context, seq_id: int, n_prefix: int, depth: int = 8) -> None:
        """``depth``: the most drafts one step may ask of it (the policy's plans go up to it)."""
        self.ctx, self.seq_id, self.depth = ctx, seq_id, depth
        self.n_prefix = n_prefix
        self.n_cached = n_prefix  # the draft context holds this sequence's positions [0, n_cached)
        self.tokens: list[int] = []  # every token after the prefix: the question, then the answer

    def extend(self, tokens: Sequence[int]) -> None:
        self.tokens.extend(int(t) for t in tokens)

    def observe(self, used: int, accepted: int, target: int, step_drafted: int) -> None:
        """Nothing: what was accepted is in :attr:`tokens` (extend) and :meth:`rollback` trims the rest."""

    def rollback(self, n_keep: int) -> None:
        """The sequence now ends at ``n_keep - 1``: drop draft positions from ``n_keep`` on."""
        if self.n_cached > n_keep:
            self.ctx.seq_rm(self.seq_id, n_keep)
            self.n_cached = n_keep

    def catch_up(self, last: int, pos: int) -> list[int]:
        """The tokens to decode before drafting after ``last`` at ``pos``: the context the draft
        model has not seen (positions ``n_cached..pos-1``) and ``last`` itself. A long stretch (a
        long question) is decoded here in chunks first, so what is left fits one batched call."""
        missing = self.tokens[self.n_cached - self.n_prefix : pos - self.n_prefix]
        chunk = max(1, self.ctx.n_batch // 2)
        while len(missing) > CATCH_UP_ROWS:
            piece = (
                missing[:chunk] if len(missing) - chunk >= CATCH_UP_ROWS else missing[: len(missing) - CATCH_UP_ROWS]
            )
            self.ctx.decode(piece, self.n_cached, seq_id=self.seq_id, outputs="none")
            self.n_cached += len(piece)
            missing = missing[len(piece) :]
        return [*missing, last]

    def propose(self, k: int, after=(), *, last: int = 0, pos: int = 0) -> list[int]:
        """``k`` greedy drafts after ``last`` at ``pos``."""
        return draft_many([self], [last], [pos], k)[0]

    @staticmethod
    def propose_many(drafters: list, lasts: list[int], positions: list[int], n: int) -> list[list[int]]:
        """:func:`draft_many` (spec/sources.py ``ModelDrafter``)."""
        return draft_many(drafters, lasts, positions, n)


def draft_many(drafters: list[DraftModelDrafter], lasts: list[int], positions: list[int], n: int) -> list[list[int]]:
    """``n`` greedy drafts for each sequence, in ``n`` decode calls for all of them: the first decodes
    every sequence's missing context and ``last`` (logits of each one's last row only), the others one
    row per sequence. All drafters share one context."""
    if not drafters or n <= 0:
        return [[] for _ in drafters]
    ctx = drafters[0].ctx
    rows = [d.catch_up(last, pos) for d, last, pos in zip(drafters, lasts, positions, strict=True)]
    starts = [d.n_cached for d in drafters]
    tokens = np.concatenate([np.asarray(r, np.int32) for r in rows])
    pos = np.concatenate([np.arange(s, s + len(r), dtype=np.int32) for s, r in zip(starts, rows, strict=True)])
    seqs = np.concatenate([np.full(len(r), d.seq_id, np.int32) for d, r in zip(drafters, rows, strict=True)])
    outputs = np.zeros(len(tokens), np.int8)
    ends = np.cumsum([len(r) for r in rows]) - 1
    outputs[ends] = 1
    ctx.decode_rows(tokens, pos, seqs, outputs)
    out = np.empty((len(drafters), n), dtype=np.int64)
    step = ctx.logits().argmax(axis=1).astype(np.int32)
    next_pos = np.array(positions, np.int32) + 1
    ids = np.array([d.seq_id for d in drafters], np.int32)
    for i in range(n):
        out[:, i] = step
        if i + 1 == n:
            break
        ctx.decode_rows(step, next_pos + i, ids, np.ones(len(drafters), np.int8))
        step = ctx.logits().argmax(axis=1).astype(np.int32)
    for d, p in zip(drafters, positions, strict=True):
        d.n_cached = p + n  # [last, d_1 .. d_{n-1}] are in; d_n is not
    return out.tolist()
