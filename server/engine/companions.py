"""Companion contexts: a separate model's context that follows the target's sequences (a draft model:
server/engine/draft_model.py). The engine calls every companion where it changes the target's
sequences, so a companion always holds, for each of them, the same tokens the target holds (or knows
that it does not):

* ingestion: every prefill chunk of a document (:meth:`Companion.prefill`), the snapshot
  (:meth:`Companion.save`), the ingestion's sequence adopted into the document sequence
  (:meth:`Companion.adopt`) or given up (:meth:`Companion.release`);
* the document sequence emptied (:meth:`Companion.clear`) or brought to a document
  (:meth:`Companion.restore`, from its side state on disk);
* a question: the prefix shared into its sequence (:meth:`Companion.share`), its drafter
  (:meth:`Companion.drafter`), its sequence freed (:meth:`Companion.release`).

A companion that cannot follow a document (no side state for it) drafts nothing for its questions;
nothing else changes. The MTP head is not a companion: it is part of the target model and of its
snapshot (spec/mtp.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np


class Companion(Protocol):
    name: str  # its draft source's name (spec/sources.py)

    def prefill(self, tokens: np.ndarray, pos0: int, seq_id: int) -> None: ...
    def save(self, seq_id: int, tokens: np.ndarray, directory: Path) -> None: ...
    def adopt(self, key: str, seq_id: int) -> None: ...
    def clear(self) -> None: ...
    def restore(self, key: str, tokens: np.ndarray, directory: Path) -> None: ...
    def share(self, key: str, seq_id: int, n_tokens: int) -> bool: ...
    def drafter(self, seq_id: int, n_prefix: int) -> object: ...
    def release(self, seq_id: int) -> None: ...
    def close(self) -> None: ...


class Companions(tuple):
    """The loaded companions, called together."""

    def prefill(self, tokens: np.ndarray, pos0: int, seq_id: int) -> None:
        for c in self:
            c.prefill(tokens, pos0, seq_id)

    def save(self, seq_id: int, tokens: np.ndarray, directory: Path) -> None:
        for c in self:
            c.save(seq_id, tokens, directory)

    def adopt(self, key: str, seq_id: int) -> None:
        """The document sequence now holds ``key``, prefilled in ``seq_id`` (it may be the document
        sequence itself)."""
        for c in self:
            c.adopt(key, seq_id)

    def clear(self) -> None:
        """The document sequence was emptied."""
        for c in self:
            c.clear()

    def restore(self, key: str, tokens: np.ndarray, directory: Path) -> None:
        """The document sequence was brought to ``key``'s prefix ``tokens`` (its snapshot in ``directory``)."""
        for c in self:
            c.restore(key, tokens, directory)

    def share(self, key: str, seq_id: int, n_tokens: int) -> dict[str, object]:
        """Share ``key``'s prefix (``n_tokens``) into question sequence ``seq_id`` in each companion
        that holds it; their drafters for it, by source name."""
        return {c.name: c.drafter(seq_id, n_tokens) for c in self if c.share(key, seq_id, n_tokens)}

    def release(self, seq_id: int) -> None:
        for c in self:
            c.release(seq_id)

    def close(self) -> None:
        for c in self:
            c.close()


#: No companions (no draft model loaded).
NONE = Companions()
