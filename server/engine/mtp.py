"""The model's MTP head as a companion (server/engine/companions.py): a second llama.cpp context of type
MTP on the target's own weights, following the target's sequences through its hidden states
(spec/mtp.py has the drafting).

Unlike a draft model's, its state is part of the target's snapshot (ingest/snapshot.py ``mtp.bin``
and ``mtp_h.npy``: its KV of the prefix and the target's hidden state after the prefix's last token)
and of the RAM cache, so a restored document drafts exactly as a fresh one. After every target
decode of a sequence it follows (a prefill chunk, a question's suffix, a verify call) it decodes the
same rows paired with the target's hidden states: one MTP decode for all the sequences of the call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from runtime.llama import Context, ContextConfig, Model
from server.engine.companions import Piece
from spec.mtp import MtpDrafter, process_many

log = logging.getLogger("docqa.engine")
NAME = "mtp"


class MtpHead:
    """The MTP context of ``target`` (whose document sequence is ``doc_seq``), and the MTP state of each
    sequence it follows; ``depth``: most drafts per step (DOCQA_MTP_DRAFT_TOKENS)."""

    name = NAME

    def __init__(self, target: Context, ctx: Context, doc_seq: int, depth: int) -> None:
        self.target, self.ctx, self.doc_seq, self.depth = target, ctx, doc_seq, depth
        target.export_hidden(masked=False)  # the target's h for every row feeds the MTP head
        ctx.export_hidden(masked=True)  # the MTP's own h of its output rows chains its drafts
        self.loaded: str | None = None  # what the document sequence holds
        self._doc_h: np.ndarray | None = None  # the target's hidden state after its last prefix token
        self._seqs: dict[int, MtpDrafter] = {}  # the sequences it follows

    @classmethod
    def load(cls, model: Model, target: Context, config: ContextConfig, doc_seq: int, depth: int) -> MtpHead:
        """The MTP context on ``model`` (loaded with its MTP layers), shaped as the target's ``config``
        without recurrent snapshots (its memory is plain attention KV, which rolls back freely)."""
        return cls(target, Context(model, replace(config, mtp=True, n_rs_seq=0)), doc_seq, depth)

    def _follow(self, seq_id: int) -> MtpDrafter:
        self.ctx.seq_rm(seq_id, 0)
        drafter = self._seqs[seq_id] = MtpDrafter(self.target, self.ctx, seq_id, self.depth)
        return drafter

    # -- ingestion ------------------------------------------------------------------------------------
    def prefill(self, tokens: np.ndarray, pos0: int, seq_id: int, source: Context | None = None) -> None:
        """``source``: a reader that decoded the chunk instead of the target; its hidden states are
        exported (server/engine/loading.py) and followed here."""
        drafter = self._follow(seq_id) if pos0 == 0 or seq_id not in self._seqs else self._seqs[seq_id]
        drafter.process(tokens, pos0, None if source is None else source.hidden())

    def snapshot_part(self, seq_id: int) -> tuple[Context, np.ndarray]:
        return self.ctx, self._seqs[seq_id].pending_h.copy()

    def snapshot_context(self) -> Context:
        return self.ctx

    def save(self, seq_id: int, tokens: np.ndarray, directory: Path) -> None:
        """Nothing: its state went into the target's snapshot (:meth:`snapshot_part`)."""

    def adopt(self, key: str, seq_id: int) -> None:
        if seq_id != self.doc_seq:
            self.ctx.seq_rm(self.doc_seq, 0)
            self.ctx.seq_cp(seq_id, self.doc_seq, 0, -1)
        self.loaded, self._doc_h = key, self._seqs[seq_id].pending_h.copy()

    # -- the document sequence ------------------------------------------------------------------------
    def clear(self) -> None:
        self.ctx.seq_rm(self.doc_seq, 0)
        self._seqs.pop(self.doc_seq, None)
        self.loaded = self._doc_h = None

    def ram_state(self, seq_id: int) -> tuple[int, Callable[[], bytes]]:
        return self.ctx.state_size(seq_id), lambda: self.ctx.state_get(seq_id)

    def restore(self, key: str, tokens: np.ndarray, directory: Path, ram: bytes | None, hidden) -> None:
        """From its RAM state, or already loaded with the target's snapshot; either way ``hidden`` is
        the target's hidden state after the prefix (without it, its questions draft without MTP)."""
        if ram is not None:
            self.ctx.state_set(ram, self.doc_seq)
        self.loaded, self._doc_h = (key, np.asarray(hidden, np.float32)) if hidden is not None else (None, None)

    # -- questions ------------------------------------------------------------------------------------
    def share(self, key: str, seq_id: int, n_tokens: int) -> bool:
        """Share the prefix's MTP KV into ``seq_id`` and start (or, for a rebuild, restart) its MTP state
        at the prefix's last hidden state."""
        self.ctx.seq_rm(seq_id, 0)
        if self.loaded != key:
            self._seqs.pop(seq_id, None)
            return False
        self.ctx.seq_cp(self.doc_seq, seq_id, 0, n_tokens)
        drafter = self._seqs.get(seq_id) or MtpDrafter(self.target, self.ctx, seq_id, self.depth)
        drafter.reset(self._doc_h)
        self._seqs[seq_id] = drafter
        return True

    def share_reading(self, source_seq: int, seq_id: int, n_read: int) -> bool:
        """Share the MTP KV of a reading's first ``n_read`` positions and start ``seq_id``'s MTP state
        at the target's hidden state after them (what the head kept as it followed the reading)."""
        self.ctx.seq_rm(seq_id, 0)
        source = self._seqs.get(source_seq)
        if source is None or self.ctx.pos_max(source_seq) != n_read - 1:
            self._seqs.pop(seq_id, None)
            return False
        self.ctx.seq_cp(source_seq, seq_id, 0, n_read)
        drafter = self._seqs.get(seq_id) or MtpDrafter(self.target, self.ctx, seq_id, self.depth)
        drafter.reset(source.pending_h)
        self._seqs[seq_id] = drafter
        return True

    def drafter(self, seq_id: int, n_prefix: int) -> MtpDrafter:
        return self._seqs[seq_id]

    def decoded(self, pieces: list[Piece]) -> tuple[dict[int, Exception], int]:
        """Catch up on the target's decode of ``pieces``: one MTP decode for all of them, or one per
        sequence if that fails."""
        hidden = self.target.hidden()
        offsets = np.cumsum([0] + [len(tokens) for _, tokens, _ in pieces]).tolist()
        mine = [
            (self._seqs[seq_id], tokens, pos0, hidden[offsets[i] : offsets[i + 1]])
            for i, (seq_id, tokens, pos0) in enumerate(pieces)
            if seq_id in self._seqs
        ]
        if not mine:
            return {}, 0
        try:
            process_many(*map(list, zip(*mine, strict=True)))
            return {}, int(len(mine) > 1)
        except Exception:
            log.exception("batched MTP catch-up failed; processing per sequence")
        failed: dict[int, Exception] = {}
        for drafter, tokens, pos0, h in mine:
            try:
                drafter.process(tokens, pos0, h)
            except Exception as exc:
                failed[drafter.seq_id] = exc
        return failed, 0

    def release(self, seq_id: int) -> None:
        self.ctx.seq_rm(seq_id, 0)
        self._seqs.pop(seq_id, None)

    # -- start-up -------------------------------------------------------------------------------------
    def calibration_step(self, seq_id: int) -> Callable[[], None]:
        """One MTP draft step (a decode with logits, the argmax, the hidden state) on the empty ``seq_id``."""
        zeros = np.zeros((1, self.ctx.n_embd), dtype=np.float32)

        def step() -> None:
            self.ctx.decode([0], 0, seq_id=seq_id, outputs="all", embd=zeros)
            self.ctx.logits()[0].argmax()
            self.ctx.hidden()[0].copy()
            self.ctx.seq_rm(seq_id, 0)

        return step

    def close(self) -> None:
        self.ctx.close()
