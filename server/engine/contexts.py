"""The contexts the engine decodes with, made once at load: the target's, the companions that follow
its sequences (server/engine/companions.py: the MTP head, a draft model) and, with
``DOCQA_CPU_REPACK=pair`` (server/engine/layout.py), the reader: a context on a second instance of
the model with plain weights, where documents are read while answers decode with the repacked ones.
A reading in the reader takes no cell of the target: when it ends, its snapshot and RAM state are
taken from the reader (same cache types, same state layout), and its first question restores it
into the target as any document kept in RAM; the part read so far is copied into a question's
sequence when one is asked meanwhile (:meth:`Contexts.share_reading`). The judging context is a small
one on the target's model where a quote-first question's best passages are judged before its quote
(spec/support.py ``PassageJudge``), one sequence each, emptied after every question. The document sequence and RAM cache
(server/engine/hot.py), the runner and the ingestions are given this one value, and speak to the
companions and the reader only through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ingest import snapshot
from runtime.llama import Context, DecodeError, LlamaError
from server.engine.companions import NONE, Companions

#: A sequence's state for the RAM cache: the target's bytes, and each companion's that keeps one, by name.
RamState = tuple[bytes, dict[str, bytes]]


@dataclass(slots=True)
class Contexts:
    target: Context
    companions: Companions = NONE
    reader: Context | None = None  # documents are read here (its own model instance), answers in the target
    judging: Context | None = None  # quote-first passages are judged here (None: judged after the quote)

    @property
    def reading(self) -> Context:
        """The context documents are read in: the reader, else the target."""
        return self.reader or self.target

    def set_threads(self, n_threads: int, n_threads_batch: int) -> None:
        """Decode with ``n_threads`` (``n_threads_batch`` for prefill) in every context from the next call
        (server/engine/cores.py)."""
        self.target.set_threads(n_threads, n_threads_batch)
        self.companions.set_threads(n_threads, n_threads_batch)
        for ctx in (self.reader, self.judging):
            if ctx is not None:
                ctx.set_threads(n_threads, n_threads_batch)

    def release(self, seq_id: int) -> None:
        """Empty ``seq_id`` in every context."""
        self.target.seq_rm(seq_id, 0)
        self.companions.release(seq_id)
        if self.reader is not None:
            self.reader.seq_rm(seq_id, 0)

    def read(self, tokens: np.ndarray, pos0: int, seq_id: int) -> None:
        """Decode a reading's chunk ``tokens`` at ``pos0..`` of ``seq_id`` in the reading context (no
        logits), then the companions' (an MTP head takes its hidden states from the context that read)."""
        self.reading.decode(tokens, pos0, seq_id=seq_id, outputs="none")
        self.companions.prefill(tokens, pos0, seq_id, self.reader)

    def release_reading(self, seq_id: int) -> None:
        """Empty the reader's ``seq_id`` (a reading there ended or was abandoned; nothing without a reader)."""
        if self.reader is not None:
            self.reader.seq_rm(seq_id, 0)

    def share_reading(self, source_seq: int, seq_id: int, n_read: int) -> dict[str, object]:
        """Make ``seq_id`` hold the first ``n_read`` tokens of a reading under way in ``source_seq``:
        in the target, shared cells (a recurrent state copy-on-write) when the target reads, a copy
        of the reader's state (``n_read`` cells of its own) with a reader; in each companion that
        followed the reading, its cells at the read position. Returns the companions' drafters for
        ``seq_id``, by source name (server/engine/partial.py). Raises DecodeError (rc 1: the cache is
        full, retry) when the target has no room for the copy."""
        if self.reader is None:
            self.target.seq_rm(seq_id, 0)
            self.target.seq_cp(source_seq, seq_id, 0, n_read)
        else:
            try:
                self.reader.state_into(self.target, source_seq, seq_id)
            except LlamaError as exc:
                self.target.seq_rm(seq_id, 0)
                raise DecodeError(1, n_read) from exc
        return self.companions.share_reading(source_seq, seq_id, n_read)

    def save(self, seq_id: int, tokens: np.ndarray, directory: Path) -> np.ndarray | None:
        """Snapshot the prefilled ``seq_id`` (exactly ``tokens``) of the reading context into
        ``directory`` (ingest/snapshot.py, with the companion part it carries), then the companions'
        side states. Returns the target's last hidden state the snapshot kept (None: none). Raises
        OSError as snapshot.save does."""
        part = self.companions.snapshot_part(seq_id)
        snapshot.save(self.reading, seq_id, tokens, directory, *(part or ()))
        self.companions.save(seq_id, tokens, directory)
        return None if part is None else part[1]

    def load(self, seq_id: int, tokens: np.ndarray, directory: Path) -> np.ndarray | None:
        """Restore the snapshot in ``directory`` into ``seq_id`` of the target (and of the companion whose
        part it carries); the target's last hidden state it kept. Raises what snapshot.load raises."""
        return snapshot.load(self.target, seq_id, tokens, directory, self.companions.snapshot_context())

    def ram_state(self, seq_id: int, budget: int, reading: bool = False) -> RamState | None:
        """``seq_id``'s state in every context that keeps one in RAM (the reading context's for the
        target's part with ``reading``: a reading just ended), if it all fits ``budget`` bytes
        (checked before copying: a 139k-token state of a 27B model is gigabytes); else None."""
        ctx = self.reading if reading else self.target
        parts = self.companions.ram_states(seq_id)
        if ctx.state_size(seq_id) + sum(size for size, _ in parts.values()) > budget:
            return None
        return ctx.state_get(seq_id), {name: get() for name, (_, get) in parts.items()}

    def kv_positions(self, n_seqs: int) -> int:
        """Positions the target's KV cache holds, summed over sequences ``0..n_seqs-1`` (a shared
        prefix counts once per sequence holding it): after the same answers, cells a rollback left
        behind show here (the ``docqa_kv_positions`` gauge, tests/server/engine/test_rejection_leaks.py)."""
        total = 0
        for seq_id in range(n_seqs):
            if (hi := self.target.pos_max(seq_id)) >= 0:
                total += hi - self.target.pos_min(seq_id) + 1
        return total

    def set_ram_state(self, state: RamState, seq_id: int) -> None:
        """Put the target's part of a RAM state back into ``seq_id`` (the companions take theirs in
        ``Companions.restore``)."""
        self.target.state_set(state[0], seq_id)

    def close(self) -> None:
        self.companions.close()
        self.target.close()
        if self.judging is not None:
            self.judging.close()
        if self.reader is not None:
            self.reader.close()
            self.reader.model.close()  # the reader's own instance (server/engine/loading.py)
