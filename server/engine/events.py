"""The answer stream, typed: what a question's job sends back to the route that waits for it.

Events, in order: ``QUOTE`` (a quote-first answer's quote, spec/quote.py) any number of times, then
``TOKEN`` (text) any number of times, then ``CITATIONS``, ``STATS`` and ``DONE``; or
``ERROR`` at any point (its data is the exception to raise or send). A segmented answer
(server/api/segmented.py) adds ``SEGMENT`` before each segment's tokens and, when two segments were
answered from, ``ANSWERS`` before ``STATS``. ``QUEUED`` (the first SSE event) and ``HEARTBEAT`` (an
SSE comment while no token has come yet) are made by the route's stream, never by the engine.

:class:`AnswerStream` is what a route reads: an engine job (server/engine/jobs.py ``AnswerJob``) and
a segmented answer both implement it.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol


class EventKind(StrEnum):
    """The kinds of answer events; their values are the SSE event names."""

    QUEUED = "queued"  # {"position": jobs ahead}
    TOKEN = "token"  # {"text": str}
    QUOTE = "quote"  # {"text": str}: a quote-first answer's quote, as it is written (before its tokens)
    SEGMENT = "segment"  # {"index", "pages"}: the segment the next tokens come from
    CITATIONS = "citations"  # {"citations": [CitationPublic as dict]}
    ANSWERS = "answers"  # {"answers": [SegmentAnswerPublic as dict]}
    STATS = "stats"  # AnswerStatsPublic as dict
    DONE = "done"  # {}
    ERROR = "error"  # the exception (an ApiError, or one server/config/errors.STATUS maps)
    HEARTBEAT = "heartbeat"  # None: no token yet


#: Kinds after which a stream has ended.
FINAL = frozenset({EventKind.DONE, EventKind.ERROR})


@dataclass(frozen=True, slots=True)
class Event:
    kind: EventKind
    data: Any = None


class AnswerStream(Protocol):
    """What a route reads: ``events`` until DONE or ERROR; ``cancel()`` when its client goes away."""

    events: asyncio.Queue[Event]
    cancelled: threading.Event

    def cancel(self) -> None: ...
