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

The reading queue (issue 51): the engine publishes the order the scheduler expects to read the
documents in (:meth:`Readings.order`, server/engine/scheduler.py ``reading_order``: shortest expected
reading first), so each document has a place in it (1: being read now) and an expected wait: the
tokens left of the documents before it and its own, at the server's measured reading rate
(:attr:`Readings.tokens_per_s`: the tokens every reading read over the last WINDOW_S seconds, over
the time since that reading began or went on, so an idle gap between two readings is not counted).
A reading set aside for a shorter one is ``paused``: it keeps its progress.
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
    reading); ``paused``: it began and was set aside for a shorter reading (its progress kept)."""

    total: int
    done: int = 0
    started: bool = False
    samples: tuple[tuple[float, int], ...] = ()
    paused: bool = False

    @property
    def reading(self) -> bool:
        """Being read now (begun, and not paused)."""
        return self.started and not self.paused

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


@dataclass(frozen=True)
class Place:
    """A document's place in the reading queue: ``position`` (1: being read now, or read next when
    nothing is), ``tokens_ahead`` (tokens left to read of the documents before it) and ``tokens_left``
    (its own)."""

    position: int
    tokens_ahead: int
    tokens_left: int


@dataclass(frozen=True, slots=True)
class DocView:
    """What the engine knows of one document, read in one piece (``Engine.view``): ``progress``, the
    share of its prefix read (0..1; None: it is not being read, here or by OCR before it); ``reading``
    and ``place``, its reading and its place in the queue (None: not queued here); ``rate``, the
    server's measured reading rate (tokens/s; None: not measured yet); ``unfit``, why it must be read
    again before it can be asked (None: it fits the served context)."""

    progress: float | None = None
    reading: Reading | None = None
    place: Place | None = None
    rate: float | None = None
    unfit: str | None = None


class Readings:
    """The readings in progress, by document id. ``clock``: monotonic seconds (a test's own)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._by_doc: dict[str, Reading] = {}
        self._order: tuple[tuple[str, int], ...] = ()  # (doc id, tokens left), as the scheduler expects to read them
        self._chunks: tuple[tuple[float, int, float], ...] = ()  # (end s, tokens, seconds) of the recent chunks
        self._mark: float | None = None  # when the last chunk ended, or the reading began or went on

    def queued(self, doc_id: str, total: int) -> None:
        """``doc_id``'s prefill of ``total`` tokens (every segment's) waits for the ingest slot."""
        self._by_doc[doc_id] = Reading(total=total)

    def started(self, doc_id: str, done: int, total: int) -> None:
        """Its ingestion (of a segment) took the slot with ``done`` of ``total`` tokens read before."""
        old = self._by_doc.get(doc_id) or Reading(total=total)
        samples = old.samples or ((self.clock(), done),)
        self._by_doc[doc_id] = replace(old, total=total, done=done, started=True, samples=samples, paused=False)
        self._mark = self.clock()

    def paused(self, doc_id: str) -> None:
        """Its reading was set aside for a shorter one; it keeps what it read."""
        old = self._by_doc.get(doc_id)
        if old is not None:
            self._by_doc[doc_id] = replace(old, paused=True)

    def is_paused(self, doc_id: str) -> bool:
        r = self._by_doc.get(doc_id)
        return r is not None and r.paused

    def resumed(self, doc_id: str) -> None:
        """Its paused reading goes on (its rate is measured again from here: the pause is not reading)."""
        old = self._by_doc.get(doc_id)
        now = self.clock()
        if old is not None:
            self._by_doc[doc_id] = replace(old, paused=False, samples=((now, old.done),))
        self._mark = now

    def advanced(self, doc_id: str, done: int) -> None:
        """A chunk ended with ``done`` tokens of the document read; a finished reading is dropped."""
        old = self._by_doc.get(doc_id)
        if old is None:
            return
        now = self.clock()
        if done > old.done and self._mark is not None:
            chunks = (*self._chunks, (now, done - old.done, now - self._mark))
            while len(chunks) > 1 and now - chunks[0][0] >= WINDOW_S:
                chunks = chunks[1:]
            self._chunks = chunks
        self._mark = now
        if done >= old.total:
            self._by_doc.pop(doc_id, None)
            return
        samples = (*old.samples, (now, done))
        while len(samples) > 2 and now - samples[1][0] >= WINDOW_S:
            samples = samples[1:]
        self._by_doc[doc_id] = replace(old, done=done, samples=samples)

    def forget(self, doc_id: str) -> None:
        self._by_doc.pop(doc_id, None)

    def order(self, entries: list[tuple[str, int]]) -> None:
        """The documents to read, with their tokens left, in the order the scheduler expects to read
        them (the one being read first); the engine thread publishes it after each step."""
        entries = tuple(entries)
        if entries != self._order:
            self._order = entries

    @property
    def tokens_per_s(self) -> float | None:
        """The server's reading rate: tokens read per second of reading over the last WINDOW_S
        seconds (whichever documents they were); None before a chunk has been read."""
        chunks = self._chunks
        seconds = sum(c[2] for c in chunks)
        return sum(c[1] for c in chunks) / seconds if seconds > 0 else None

    def place(self, doc_id: str) -> Place:
        """``doc_id``'s place in the reading queue. The documents queued since the engine last
        published the order go after every document in it, in the order they were queued."""
        order = self._order
        ahead = 0
        for k, (doc, left) in enumerate(order):
            if doc == doc_id:
                return Place(k + 1, ahead, left)
            ahead += left
        listed, position = {doc for doc, _ in order}, len(order) + 1
        for doc, r in list(self._by_doc.items()):
            left = max(0, r.total - r.done)
            if doc == doc_id:
                return Place(position, ahead, left)
            if doc not in listed:
                position, ahead = position + 1, ahead + left
        return Place(position, ahead, 0)

    def ahead_of(self, doc_id: str) -> int:
        """Documents expected to be read before ``doc_id`` (one is read at a time)."""
        return self.place(doc_id).position - 1

    def of(self, doc_id: str) -> Reading | None:
        """The document's reading, or None when none is in progress."""
        return self._by_doc.get(doc_id)
