"""MTP drafting: the model's own multi-token-prediction (nextn) head in a second llama_context.

Follows llama.cpp's MTP driver (common/speculative.cpp ``common_speculative_impl_draft_mtp``). The
MTP context holds KV for the nextn layer only. Its entry at position ``p`` pairs the token ``x_p`` with
the target's hidden state ``h_{p-1}`` and predicts ``x_{p+1}``; chaining its own output state drafts
further tokens with the same head.

Protocol per verify cycle (cursor invariant of spec/loop.py: ``pos`` = position of ``last``):
1. :meth:`draft` decodes ``(last, pending_h)`` at ``pos`` and chains n single-token steps, then
   removes those draft entries again.
2. The target decodes ``[last, d_1..d_k]``; :meth:`process` feeds the same rows with the target's
   true hidden states (this also runs after every prefill chunk).
3. After acceptance, :meth:`accept` trims the MTP context to the kept positions and takes the
   hidden state of the last kept token as the next ``pending_h``.
"""

from __future__ import annotations

import numpy as np

from runtime.llama import Context


class MtpDrafter:
    """The MTP state of one sequence: its ``pending_h`` and the target hidden states of its last decode.
    A model drafter (spec/sources.py ``ModelDrafter``); ``depth``: most drafts per step
    (DOCQA_MTP_DRAFT_TOKENS; spec/limits.py ``MAX_MTP_DRAFT``)."""

    def __init__(self, target: Context, mtp: Context, seq_id: int = 0, depth: int = 2) -> None:
        if target.n_embd != mtp.n_embd:
            raise ValueError(f"target and MTP hidden sizes differ ({target.n_embd} != {mtp.n_embd})")
        self.target, self.mtp, self.seq_id, self.depth = target, mtp, seq_id, depth
        target.export_hidden(masked=False)  # h for every target row
        mtp.export_hidden(masked=True)  # h for the MTP's output rows, to chain drafts
        self.pending_h = np.zeros(target.n_embd, dtype=np.float32)  # target h of the last decoded token
        self._rows = np.zeros((0, target.n_embd), dtype=np.float32)  # target h of the last decode
        self._rows_pos0 = 0

    def reset(self, pending_h: np.ndarray | None = None) -> None:
        """Start of a sequence (``None``: position 0) or a restored one (its saved ``pending_h``)."""
        self.pending_h = np.zeros(self.target.n_embd, np.float32) if pending_h is None else pending_h.copy()
        self._rows = self._rows[:0]

    def pairs(self, h: np.ndarray) -> np.ndarray:
        """The MTP input embeddings for target rows with hidden states ``h`` (float32 [n, n_embd]):
        row p gets h_{p-1}, the first row ``pending_h``."""
        out = np.empty_like(h)
        out[0] = self.pending_h
        out[1:] = h[:-1]
        return out

    def caught_up(self, h: np.ndarray, pos0: int) -> None:
        """Record that the MTP context now holds the rows decoded at ``pos0..`` with hidden ``h``."""
        self._rows, self._rows_pos0 = h.copy(), pos0
        self.pending_h = self._rows[-1]

    def process(self, tokens: np.ndarray | list[int], pos0: int, h: np.ndarray | None = None) -> None:
        """Catch up after a target decode of ``tokens`` at ``pos0..``: build MTP KV from the pairs
        (x_p, h_{p-1}). ``h``: the target hidden states of those rows, float32 [n, n_embd] (default:
        the target's whole last decode). No logits are computed (no LM head)."""
        if h is None:
            h = self.target.hidden()  # [n, n_embd], batch order
        self.mtp.decode(tokens, pos0, seq_id=self.seq_id, outputs="none", embd=self.pairs(h))
        self.caught_up(h, pos0)

    def extend(self, tokens) -> None:
        """Nothing: the MTP context follows the target's hidden states (:meth:`process`), not tokens."""

    def propose(self, k: int, after=(), *, last: int = 0, pos: int = 0) -> list[int]:
        """``k`` drafts after ``last`` at ``pos`` (spec/sources.py ``Drafter``): :meth:`draft`."""
        return self.draft(last, pos, k)

    def observe(self, used: int, accepted: int, target: int, step_drafted: int) -> None:
        """Nothing: what was accepted reaches the MTP context through :meth:`process` and :meth:`rollback`."""

    def rollback(self, n_keep: int) -> None:
        """The sequence now ends at ``n_keep - 1``: :meth:`accept`."""
        self.accept(n_keep)

    def draft(self, last: int, pos: int, n: int) -> list[int]:
        """``n`` greedy top-1 drafts after ``last`` at ``pos`` (deterministic, so sample-and-compare
        verification is exact); the draft entries are removed from the MTP context again."""
        out: list[int] = []
        token, h = last, self.pending_h
        for i in range(n):
            self.mtp.decode([token], pos + i, seq_id=self.seq_id, outputs="all", embd=h[None, :])
            token = int(self.mtp.logits()[0].argmax())
            out.append(token)
            h = self.mtp.hidden()[0].copy()
        if n:
            self.mtp.seq_rm(self.seq_id, pos)  # drafts were guesses; process() writes the true rows
        return out

    def accept(self, n_keep: int) -> None:
        """The sequence now ends at position ``n_keep - 1``: trim the MTP KV to match."""
        row = n_keep - 1 - self._rows_pos0
        if 0 <= row < len(self._rows):
            self.pending_h = self._rows[row].copy()
        self.mtp.seq_rm(self.seq_id, n_keep)

    @staticmethod
    def propose_many(drafters: list[MtpDrafter], lasts: list[int], positions: list[int], n: int) -> list[list[int]]:
        """:meth:`draft` for several sequences at once: one MTP decode per depth with one row
        per sequence, instead of one decode per sequence and depth. Returns each sequence's ``n`` drafts.
        All drafters share one MTP context."""
        if not drafters or n <= 0:
            return [[] for _ in drafters]
        mtp = drafters[0].mtp
        seqs = np.array([d.seq_id for d in drafters], dtype=np.int32)
        tokens = np.array(lasts, dtype=np.int32)
        pos = np.array(positions, dtype=np.int32)
        h = np.stack([d.pending_h for d in drafters]).astype(np.float32)
        out = np.empty((len(drafters), n), dtype=np.int64)
        for i in range(n):
            mtp.decode_rows(tokens, pos + i, seqs, np.ones(len(drafters), dtype=np.int8), embd=h)
            tokens = mtp.logits().argmax(axis=1).astype(np.int32)
            out[:, i] = tokens
            h = mtp.hidden().copy()
        for d, p in zip(drafters, positions, strict=True):
            mtp.seq_rm(d.seq_id, p)  # drafts were guesses; process() writes the true rows
        return out.tolist()


draft_many = MtpDrafter.propose_many  # the batched draft, as a function


def process_many(
    drafters: list[MtpDrafter], rows: list[list[int]], positions: list[int], hidden: list[np.ndarray]
) -> None:
    """:meth:`MtpDrafter.process` for several sequences in one MTP decode: ``rows[j]`` were decoded
    by the target at ``positions[j]..`` with hidden states ``hidden[j]`` (float32 [len, n_embd])."""
    if not drafters:
        return
    pairs = [d.pairs(h) for d, h in zip(drafters, hidden, strict=True)]
    tokens = np.concatenate([np.asarray(r, dtype=np.int32) for r in rows])
    pos = np.concatenate([np.arange(p, p + len(r), dtype=np.int32) for p, r in zip(positions, rows, strict=True)])
    seqs = np.concatenate([np.full(len(r), d.seq_id, dtype=np.int32) for d, r in zip(drafters, rows, strict=True)])
    outputs = np.zeros(len(tokens), dtype=np.int8)
    drafters[0].mtp.decode_rows(tokens, pos, seqs, outputs, embd=np.concatenate(pairs))
    for d, p, h in zip(drafters, positions, hidden, strict=True):
        d.caught_up(h, p)
