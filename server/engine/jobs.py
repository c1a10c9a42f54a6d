"""Jobs handed from the asyncio side to the engine thread, and the event channel back.

The engine thread never touches asyncio objects directly: it calls ``loop.call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import bisect
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from ingest.segments import key as segment_key
from server.engine.events import Event, Failed
from spec.loop import AnswerParams


@dataclass(eq=False)
class IngestJob:
    """The prefill of a document, or of one segment of it (``key``: ingest/segments.key)."""

    doc_id: str
    n_tokens: int  # its prefix tokens: the KV cells its prefill needs
    key: str = ""  # the document (default) or one of its segments
    tokens_before: int = 0  # progress: prefix tokens of the segments before this one
    tokens_total: int = 0  # progress: prefix tokens of every segment (0: this job's own)
    attempts: int = 0  # times it met an unreachable store (server/engine/engine.py retries it)

    def __post_init__(self) -> None:
        self.key = self.key or self.doc_id
        self.tokens_total = self.tokens_total or self.n_tokens


def ingest_jobs(doc_id: str, n_tokens: int, segments: list | None) -> list[IngestJob]:
    """The prefill jobs of a stored document: one (``n_tokens``: its prefix length), or one per segment
    (``segments``: ingest/segments.Segment records) with their share of the progress."""
    if segments is None:
        return [IngestJob(doc_id, n_tokens)]
    total, before, jobs = sum(s.n_tokens for s in segments), 0, []
    for s in segments:
        jobs.append(IngestJob(doc_id, s.n_tokens, segment_key(doc_id, s.index), before, total))
        before += s.n_tokens
    return jobs


@dataclass(frozen=True, slots=True)
class Pages:
    """A document's pages as its stored text has them: ``starts[i]`` is the character offset where page
    ``first + i`` begins (store/files.py ``read_text``)."""

    starts: tuple[int, ...]
    first: int = 1

    def at(self, char: int) -> int:
        """The page holding character ``char``."""
        return self.first + max(0, bisect.bisect_right(self.starts, char) - 1)

    @property
    def last(self) -> int:
        return self.first + max(0, len(self.starts) - 1)


@dataclass(eq=False)
class AnswerJob:
    """One question, tokenized by the route: its events (server/engine/events.py) go to ``events``.

    ``suffix``: the token ids after the document prefix (the earlier turns, the question, and the
    scaffolding the answer follows: ingest/prompt.py ``question_suffix``), so the scheduler reserves
    exactly its KV cells. ``n_prefix``: the document's (or segment's) prefix tokens.
    ``history``: earlier (question, answer) turns of a conversation about the same document, and
    ``earlier`` their token ids (each question with the scaffolding, then its answer), which the
    answer-history drafter matches for this request (spec/history.py).
    ``segment``: the segment of a segmented document to answer from (server/service/segmented.py).
    ``n_constrained``: the most tokens a constraint decodes before the answer (a quote-first
    answer's quote and scaffolding, ``params.quote``), which the scheduler reserves too.
    ``while_reading``: the document may still be in its first reading, and is then answered from the
    part read so far (server/engine/partial.py), with ``n_closing`` more tokens decoded before the
    suffix (the layout's after the document) and ``pages`` to say how far that part reaches.
    """

    doc_id: str
    question: str
    params: AnswerParams
    loop: asyncio.AbstractEventLoop
    suffix: np.ndarray  # int32 [n_suffix]
    n_prefix: int
    history: tuple[tuple[str, str], ...] = ()
    earlier: tuple[np.ndarray, ...] = ()
    segment: int | None = None
    n_constrained: int = 0
    while_reading: bool = False
    n_closing: int = 0
    pages: Pages | None = None
    t_start: float = field(default_factory=time.perf_counter)
    cancelled: threading.Event = field(default_factory=threading.Event)
    events: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)
    key: str = field(init=False)  # what the document sequence must hold for it: the document, or its segment

    def __post_init__(self) -> None:
        self.key = self.doc_id if self.segment is None else segment_key(self.doc_id, self.segment)

    def emit(self, event: Event) -> None:
        """Called from the engine thread (or the citation worker)."""
        self.loop.call_soon_threadsafe(self.events.put_nowait, event)

    def fail(self, error: Exception) -> None:
        """End the job with ``error`` (an ApiError, or an error server/config/errors.STATUS maps: a full
        disk); the route raises it, or sends it as an SSE ``error`` event."""
        self.emit(Failed(error))

    def cancel(self) -> None:
        self.cancelled.set()


Job = IngestJob | AnswerJob


class Deleted:
    """Documents deleted since the engine last looked: routes add, the engine thread takes. Thread-safe."""

    def __init__(self) -> None:
        self._ids: set[str] = set()
        self._lock = threading.Lock()

    def add(self, doc_id: str) -> None:
        with self._lock:
            self._ids.add(doc_id)

    def __contains__(self, doc_id: object) -> bool:
        with self._lock:
            return doc_id in self._ids

    def take(self) -> set[str]:
        """The ids added since the last call (the set is emptied)."""
        with self._lock:
            ids, self._ids = self._ids, set()
        return ids


class DocStates:
    """What the engine knows of each document from the signals it receives, in the order they come:
    deleted (``Engine.forget``: a DELETE, or a re-ingest dropping the old state), queued for prefill
    (``Engine.submit_ingest``), failed here, or ready again (its ingestion ended here). A document it
    has had no word of is as its row was when the route read it. Admission reads it instead of the
    row (server/engine/admission.py). Thread-safe."""

    DELETED, INGESTING, FAILED = "deleted", "ingesting", "failed"

    def __init__(self) -> None:
        self._states: dict[str, str] = {}
        self._lock = threading.Lock()

    def mark(self, doc_id: str, state: str) -> None:
        with self._lock:
            self._states[doc_id] = state

    def ready(self, doc_id: str) -> None:
        """Its ingestion ended and it is ready (nothing to say of it any more), unless it was deleted."""
        with self._lock:
            if self._states.get(doc_id) != self.DELETED:
                self._states.pop(doc_id, None)

    def get(self, doc_id: str) -> str | None:
        with self._lock:
            return self._states.get(doc_id)
