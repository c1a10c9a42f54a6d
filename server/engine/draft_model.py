"""A separate draft model (``DOCQA_DRAFT_MODEL_PATH``): loaded next to the target, checked to share
its vocabulary, and run as a companion context (server/engine/companions.py) whose sequences follow
the target's; its drafts come from spec/draft_model.py.

Its context has the target's sequence ids, size and batch layout. The document sequence's prefix is
prefilled into it at ingestion, chunk by chunk with the target's, and saved next to the snapshot
(ingest/side_state.py, ``draft.bin``); a question's sequence shares it, and the drafter decodes the
question and the answer lazily when it drafts. A document ingested before the draft model was set
has no side state: its questions are answered without this drafter (logged once), until re-ingested.

A failure here never fails an ingestion or an answer: the sequence is marked as not followed, and
its questions draft without the model.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from ingest import side_state
from runtime.llama import Context, ContextConfig, Model
from runtime.vocab import mismatch
from server.engine.companions import Piece
from spec.draft_model import DraftModelDrafter

log = logging.getLogger("docqa.engine")
NAME = "draft"


class DraftModelError(Exception):
    """The draft model cannot draft for this target; the message says why (a start-up error)."""


class DraftModel:
    """The draft model's context, following the target's sequences. ``doc_seq``: the target's
    document sequence; ``depth``: most drafts per step (DOCQA_DRAFT_MODEL_TOKENS)."""

    name = NAME

    def __init__(self, model: Model, ctx: Context, doc_seq: int, depth: int) -> None:
        self.model, self.ctx, self.doc_seq, self.depth = model, ctx, doc_seq, depth
        self.loaded: str | None = None  # what the document sequence holds
        self._broken: set[int] = set()  # sequences whose prefill failed: not followed
        self._told: set[str] = set()  # documents whose missing side state was logged

    @classmethod
    def load(cls, path: Path, target: Model, config: ContextConfig, doc_seq: int, depth: int, **model_kw):
        """Load the GGUF at ``path`` and its context (the target's ``config``, without MTP or
        recurrent snapshots). Raises DraftModelError when it does not share the target's vocabulary,
        naming the first difference, or cannot be loaded."""
        try:
            model = Model(path, **model_kw)
        except Exception as exc:
            raise DraftModelError(f"DOCQA_DRAFT_MODEL_PATH: {exc}") from None
        why = mismatch(target, model)
        if why is not None:
            model.close()
            raise DraftModelError(
                f"DOCQA_DRAFT_MODEL_PATH {path.name} cannot draft for {target.path.name}: {why}; a draft model "
                "must share the target's vocabulary (the same model family, e.g. a smaller model of it)"
            )
        ctx = Context(model, replace(config, mtp=False, n_rs_seq=0))
        return cls(model, ctx, doc_seq, depth)

    # -- ingestion ------------------------------------------------------------------------------------
    def prefill(self, tokens: np.ndarray, pos0: int, seq_id: int, source: Context | None = None) -> None:
        if pos0 == 0:
            self.ctx.seq_rm(seq_id, 0)
            self._broken.discard(seq_id)
        if seq_id in self._broken:
            return
        try:
            self.ctx.decode(tokens, pos0, seq_id=seq_id, outputs="none")
        except Exception as exc:
            log.warning(
                "the draft model could not prefill sequence %d (%s); its document drafts without it", seq_id, exc
            )
            self._broken.add(seq_id)

    def snapshot_part(self, seq_id: int) -> None:
        """None: it keeps a side state of its own (:meth:`save`)."""

    def snapshot_context(self) -> None:
        """None: no part of the target's snapshot is its."""

    def save(self, seq_id: int, tokens: np.ndarray, directory: Path) -> None:
        """The prefilled sequence's side state, next to the target's snapshot (never fails the
        ingestion: a document without it is answered without the draft model)."""
        if seq_id in self._broken:
            return
        try:
            side_state.save(self.ctx, seq_id, tokens, directory, NAME)
        except OSError as exc:
            log.warning("the draft model's state of %s could not be saved (%s)", directory.name, exc)

    def adopt(self, key: str, seq_id: int) -> None:
        """The document sequence now holds ``key``, just prefilled in ``seq_id``."""
        if seq_id != self.doc_seq:
            self.ctx.seq_rm(self.doc_seq, 0)
            self.ctx.seq_cp(seq_id, self.doc_seq, 0, -1)
        self.loaded = None if seq_id in self._broken else key

    # -- the document sequence ------------------------------------------------------------------------
    def clear(self) -> None:
        self.ctx.seq_rm(self.doc_seq, 0)
        self.loaded = None

    def ram_state(self, seq_id: int) -> None:
        """None: kept on disk only (its side state), so the RAM cache holds the target's bytes alone."""

    def restore(self, key: str, tokens: np.ndarray, directory: Path, ram=None, hidden=None) -> None:
        """Bring the document sequence to ``key``'s prefix from its side state; when there is none
        (or it is unusable), the document's questions draft without the model."""
        if self.loaded == key:
            return
        self.clear()
        why = side_state.load(self.ctx, self.doc_seq, tokens, directory, NAME)
        if why is None:
            self.loaded = key
        elif key not in self._told:
            self._told.add(key)
            log.info("%s: answered without the draft model: %s", key, why)

    # -- questions ------------------------------------------------------------------------------------
    def share(self, key: str, seq_id: int, n_tokens: int) -> bool:
        """Share the document prefix into question sequence ``seq_id``; False (and ``seq_id`` empty)
        when the document sequence does not hold ``key``."""
        self.ctx.seq_rm(seq_id, 0)
        if self.loaded != key:
            return False
        self.ctx.seq_cp(self.doc_seq, seq_id, 0, n_tokens)
        return True

    def share_reading(self, source_seq: int, seq_id: int, n_read: int) -> bool:
        """Share the draft model's cells of a reading's first ``n_read`` positions into ``seq_id``."""
        self.ctx.seq_rm(seq_id, 0)
        if source_seq in self._broken or self.ctx.pos_max(source_seq) != n_read - 1:
            return False
        self.ctx.seq_cp(source_seq, seq_id, 0, n_read)
        return True

    def drafter(self, seq_id: int, n_prefix: int) -> DraftModelDrafter:
        """The drafter of question sequence ``seq_id``, which holds the prefix (:meth:`share`)."""
        return DraftModelDrafter(self.ctx, seq_id, n_prefix, self.depth)

    def decoded(self, pieces: list[Piece]) -> tuple[dict[int, Exception], int]:
        """Nothing: a question's drafter decodes what it has not seen when it next drafts."""
        return {}, 0

    def release(self, seq_id: int) -> None:
        self.ctx.seq_rm(seq_id, 0)
        self._broken.discard(seq_id)

    def calibration_step(self, seq_id: int) -> Callable[[], None] | None:
        """None: its price is learnt from its first drafts (spec/cost.py ``CostModel.draft_step``)."""

    def close(self) -> None:
        self.ctx.close()
        self.model.close()
