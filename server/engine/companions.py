"""Companion contexts: a second context that follows the target's sequences and drafts for them, one
per model draft source: the model's MTP head (server/engine/mtp.py) and a separate draft model
(server/engine/draft_model.py). The engine calls every companion where it changes the target's
sequences, so a companion always holds, for each of them, what it needs of what the target holds (or
knows that it does not):

* ingestion: every prefill chunk of a document (:meth:`Companion.prefill`), the snapshot (a part of
  the target's, :meth:`Companion.snapshot_part`, or a side state of its own, :meth:`Companion.save`),
  the ingestion's sequence adopted into the document sequence (:meth:`Companion.adopt`) or given up
  (:meth:`Companion.release`);
* the document sequence emptied (:meth:`Companion.clear`) or brought to a document
  (:meth:`Companion.restore`: from the RAM state it gave, :meth:`Companion.ram_state`, from the
  target's snapshot, or from its side state on disk);
* a question: the prefix shared into its sequence (:meth:`Companion.share`), its drafter
  (:meth:`Companion.drafter`), every decode of the target's rows for it (:meth:`Companion.decoded`),
  its sequence freed (:meth:`Companion.release`).

A companion that cannot follow a document drafts nothing for its questions; nothing else changes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np

from runtime.llama import Context

#: One target decode's rows of one sequence: (seq id, token ids, position of the first).
Piece = tuple[int, np.ndarray, int]


class Companion(Protocol):
    name: str  # its draft source's name (spec/sources.py)
    ctx: Context  # the context it decodes in (the engine sets its threads with the target's)

    # -- ingestion -------------------------------------------------------------------------------
    def prefill(self, tokens: np.ndarray, pos0: int, seq_id: int, source: Context | None = None) -> None:
        """The target just decoded a prefill chunk ``tokens`` at ``pos0..`` of ``seq_id`` (0: a new one);
        ``source``: the context that decoded it when not the target (the reader, server/engine/contexts.py)."""

    def snapshot_part(self, seq_id: int) -> tuple[Context, np.ndarray] | None:
        """What goes into the target's snapshot of ``seq_id`` (ingest/snapshot.py: a context's state
        and the target's last hidden state), or None: it keeps a side state of its own (:meth:`save`)."""

    def snapshot_context(self) -> Context | None:
        """The context a target's snapshot restores its part into (None: it has none)."""

    def save(self, seq_id: int, tokens: np.ndarray, directory: Path) -> None:
        """Its side state of the prefilled ``seq_id``, next to the target's snapshot in ``directory``."""

    def adopt(self, key: str, seq_id: int) -> None:
        """The document sequence now holds ``key``, prefilled in ``seq_id`` (maybe the document sequence)."""

    # -- the document sequence -------------------------------------------------------------------
    def clear(self) -> None: ...

    def ram_state(self, seq_id: int) -> tuple[int, Callable[[], bytes]] | None:
        """(bytes, a function that copies them) of its state of ``seq_id``, for the RAM cache; None:
        it keeps none there (it restores from disk)."""

    def restore(self, key: str, tokens: np.ndarray, directory: Path, ram: bytes | None, hidden) -> None:
        """The document sequence was brought to ``key``'s prefix ``tokens``: from the RAM state it gave
        (``ram``), else from the target's snapshot in ``directory`` (``hidden``: the target's last
        hidden state it held) or its own side state there."""

    # -- questions -------------------------------------------------------------------------------
    def share(self, key: str, seq_id: int, n_tokens: int) -> bool:
        """Share ``key``'s prefix (``n_tokens``) into question sequence ``seq_id``; False (and
        ``seq_id`` empty) when the document sequence does not hold it."""

    def share_reading(self, source_seq: int, seq_id: int, n_read: int) -> bool:
        """Share the first ``n_read`` positions of a reading under way in ``source_seq`` (it followed its
        chunks: :meth:`prefill`) into question sequence ``seq_id``; False (and ``seq_id`` empty) when
        it does not hold them (server/engine/partial.py)."""

    def drafter(self, seq_id: int, n_prefix: int) -> object:
        """The drafter of question sequence ``seq_id`` (spec/sources.py ``ModelDrafter``), after
        :meth:`share` or :meth:`share_reading`."""

    def decoded(self, pieces: list[Piece]) -> tuple[dict[int, Exception], int]:
        """The target just decoded ``pieces`` (in batch order, one call) for question sequences:
        (the sequences it failed for, decodes of its own that served several sequences)."""

    def release(self, seq_id: int) -> None: ...

    # -- start-up --------------------------------------------------------------------------------
    def calibration_step(self, seq_id: int) -> Callable[[], None] | None:
        """One draft step on the empty ``seq_id``, left empty, to time at start-up (None: not timed)."""

    def close(self) -> None: ...


class Companions(tuple):
    """The loaded companions, called together."""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self)

    def set_threads(self, n_threads: int, n_threads_batch: int) -> None:
        for c in self:
            c.ctx.set_threads(n_threads, n_threads_batch)

    def prefill(self, tokens: np.ndarray, pos0: int, seq_id: int, source: Context | None = None) -> None:
        for c in self:
            c.prefill(tokens, pos0, seq_id, source)

    def snapshot_part(self, seq_id: int) -> tuple[Context, np.ndarray] | None:
        """The part of the target's snapshot (at most one companion has one)."""
        return next((p for c in self if (p := c.snapshot_part(seq_id)) is not None), None)

    def snapshot_context(self) -> Context | None:
        return next((ctx for c in self if (ctx := c.snapshot_context()) is not None), None)

    def save(self, seq_id: int, tokens: np.ndarray, directory: Path) -> None:
        for c in self:
            c.save(seq_id, tokens, directory)

    def adopt(self, key: str, seq_id: int) -> None:
        for c in self:
            c.adopt(key, seq_id)

    def clear(self) -> None:
        """The document sequence was emptied."""
        for c in self:
            c.clear()

    def ram_states(self, seq_id: int) -> dict[str, tuple[int, Callable[[], bytes]]]:
        """Each companion's RAM state of ``seq_id`` (those that keep one), by name."""
        return {c.name: r for c in self if (r := c.ram_state(seq_id)) is not None}

    def restore(self, key: str, tokens: np.ndarray, directory: Path, ram: dict[str, bytes], hidden) -> None:
        for c in self:
            c.restore(key, tokens, directory, ram.get(c.name), hidden)

    def share(self, key: str, seq_id: int, n_tokens: int) -> dict[str, object]:
        """Share ``key``'s prefix (``n_tokens``) into question sequence ``seq_id`` in each companion
        that holds it; their drafters for it, by source name."""
        return {c.name: c.drafter(seq_id, n_tokens) for c in self if c.share(key, seq_id, n_tokens)}

    def share_reading(self, source_seq: int, seq_id: int, n_read: int) -> dict[str, object]:
        """Share the part read of a reading in ``source_seq`` into ``seq_id`` in each companion that
        followed it; their drafters for it, by source name."""
        return {c.name: c.drafter(seq_id, n_read) for c in self if c.share_reading(source_seq, seq_id, n_read)}

    def decoded(self, pieces: list[Piece]) -> tuple[dict[int, Exception], int]:
        failed: dict[int, Exception] = {}
        shared = 0
        for c in self:
            f, n = c.decoded(pieces)
            failed |= f
            shared += n
        return failed, shared

    def release(self, seq_id: int) -> None:
        for c in self:
            c.release(seq_id)

    def calibration_steps(self, seq_id: int) -> dict[str, Callable[[], None]]:
        return {c.name: step for c in self if (step := c.calibration_step(seq_id)) is not None}

    def close(self) -> None:
        for c in self:
            c.close()


#: No companions (no model drafter loaded).
NONE = Companions()
