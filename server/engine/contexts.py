"""The contexts the engine decodes with, made once at load: the target's, and the companions that follow
its sequences (server/engine/companions.py: the MTP head, a draft model). The document sequence and
RAM cache (server/engine/hot.py), the runner and the ingestions are given this one value, and speak
to the companions only through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ingest import snapshot
from runtime.llama import Context
from server.engine.companions import NONE, Companions

#: A sequence's state for the RAM cache: the target's bytes, and each companion's that keeps one, by name.
RamState = tuple[bytes, dict[str, bytes]]


@dataclass(slots=True)
class Contexts:
    target: Context
    companions: Companions = NONE

    def set_threads(self, n_threads: int, n_threads_batch: int) -> None:
        """Decode with ``n_threads`` (``n_threads_batch`` for prefill) in every context from the next call
        (server/engine/cores.py)."""
        self.target.set_threads(n_threads, n_threads_batch)
        self.companions.set_threads(n_threads, n_threads_batch)

    def release(self, seq_id: int) -> None:
        """Empty ``seq_id`` in every context."""
        self.target.seq_rm(seq_id, 0)
        self.companions.release(seq_id)

    def save(self, seq_id: int, tokens: np.ndarray, directory: Path) -> np.ndarray | None:
        """Snapshot the prefilled ``seq_id`` (exactly ``tokens``) into ``directory`` (ingest/snapshot.py,
        with the companion part it carries), then the companions' side states. Returns the target's
        last hidden state the snapshot kept (None: none). Raises OSError as snapshot.save does."""
        part = self.companions.snapshot_part(seq_id)
        snapshot.save(self.target, seq_id, tokens, directory, *(part or ()))
        self.companions.save(seq_id, tokens, directory)
        return None if part is None else part[1]

    def load(self, seq_id: int, tokens: np.ndarray, directory: Path) -> np.ndarray | None:
        """Restore the snapshot in ``directory`` into ``seq_id`` of the target (and of the companion whose
        part it carries); the target's last hidden state it kept. Raises what snapshot.load raises."""
        return snapshot.load(self.target, seq_id, tokens, directory, self.companions.snapshot_context())

    def ram_state(self, seq_id: int, budget: int) -> RamState | None:
        """``seq_id``'s state in every context that keeps one in RAM, if it all fits ``budget`` bytes
        (checked before copying: a 139k-token state of a 27B model is gigabytes); else None."""
        parts = self.companions.ram_states(seq_id)
        if self.target.state_size(seq_id) + sum(size for size, _ in parts.values()) > budget:
            return None
        return self.target.state_get(seq_id), {name: get() for name, (_, get) in parts.items()}

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
