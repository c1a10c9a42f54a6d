"""How the reading (prefill) of each document goes, as a user waiting for it wants to see it: whether it
is still waiting its turn, the tokens read of how many, the measured rate (tokens/s) and the time left
at that rate (issue 36 item 7, issue 39 items 6 and 12).

The engine writes (:meth:`Readings.queued` when a document's prefill is queued, :meth:`started` when
its ingestion takes the ingest slot, :meth:`advanced` after each chunk); the routes read
(:meth:`of`). A dict write or read is atomic under the GIL, and a record is replaced, never changed
in place, so a reader never sees half of one.

The rate is the tokens read over the last :data:`WINDOW_S` seconds of chunks (from the first chunk's
start: a chunk of the 1.5B reader holds the engine for 13-40 s, so the first measured rate comes with
the first chunk); time spent waiting between two segments, or for the slot, counts as reading time,
since the user waits through it too. Before the first chunk ends the rate is unknown (None), never
0.0 tokens/s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

WINDOW_S = 30.0  # the rate is measured over the last 30 s of chunks (a model's prefill rate changes little)


@dataclass(frozen=True)
class Reading:
    """One document's reading. ``samples``: (monotonic s, tokens read) from the first chunk's start
    on; ``started``: its ingestion has begun (False: it waits its turn behind questions or another
    reading)."""

    total: int
    done: int = 0
    started: bool = False
    samples: tuple[tuple[float, int], ...] = ()

    @property
    def tokens_per_s(self) -> float | None:
        """Tokens read per second over the last WINDOW_S seconds; None before a chunk has ended."""
        if len(self.samples) < 2:
            return None
        (t0, n0), (t1, n1) = self.samples[0], self.samples[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 and n1 > n0 else None

    @property
    def seconds_left(self) -> float | None:
        """The tokens left at the measured rate (s); None while the rate is unknown."""
        rate = self.tokens_per_s
        return max(0, self.total - self.done) / rate if rate else None


class Readings:
    """The readings in progress, by document id. ``clock``: monotonic seconds (a test's own)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._by_doc: dict[str, Reading] = {}

    def queued(self, doc_id: str, total: int) -> None:
        """``doc_id``'s prefill of ``total`` tokens (every segment's) waits for the ingest slot."""
        self._by_doc[doc_id] = Reading(total=total)

    def started(self, doc_id: str, done: int, total: int) -> None:
        """Its ingestion (of a segment) took the slot with ``done`` of ``total`` tokens read before."""
        old = self._by_doc.get(doc_id) or Reading(total=total)
        samples = old.samples or ((self.clock(), done),)
        self._by_doc[doc_id] = replace(old, total=total, done=done, started=True, samples=samples)

    def advanced(self, doc_id: str, done: int) -> None:
        """A chunk ended with ``done`` tokens of the document read; a finished reading is dropped."""
        old = self._by_doc.get(doc_id)
        if old is None:
            return
        if done >= old.total:
            self._by_doc.pop(doc_id, None)
            return
        now = self.clock()
        samples = (*old.samples, (now, done))
        while len(samples) > 2 and now - samples[1][0] >= WINDOW_S:
            samples = samples[1:]
        self._by_doc[doc_id] = replace(old, done=done, samples=samples)

    def forget(self, doc_id: str) -> None:
        self._by_doc.pop(doc_id, None)

    def ahead_of(self, doc_id: str) -> int:
        """Readings queued before ``doc_id``'s and not finished (each is read before it: one ingest slot)."""
        n = 0
        for other in list(self._by_doc):
            if other == doc_id:
                return n
            n += 1
        return 0

    def of(self, doc_id: str) -> Reading | None:
        """The document's reading, or None when none is in progress."""
        return self._by_doc.get(doc_id)
