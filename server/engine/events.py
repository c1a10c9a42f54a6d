"""The answer stream, typed: what a question's job sends back to the route that waits for it, one
frozen dataclass per kind of event.

Events, in order: :class:`Partial` for a document still being read, a quote-first answer's
:class:`Quote` (spec/quote.py), :class:`Token` any number of times, then :class:`Citations`,
:class:`Stats` and :class:`Done`; or :class:`Failed` at any point (its ``error`` is the exception to
raise or send). A segmented answer (server/service/segmented.py) adds
:class:`Segment` before each segment's tokens and, when two segments were answered from,
:class:`Answers` before ``Stats``. :class:`Queued` (the first SSE event) and :class:`Heartbeat` (an
SSE comment while no token has come yet) are made by the route's stream, never by the engine. The
encoders (server/api/responses.py, the OpenAI route) ``match`` on these types and turn them into
dicts (``dataclasses.asdict``) only there, at the edge.

:class:`AnswerStream` is what a route reads: an engine job (server/engine/jobs.py ``AnswerJob``) and
a segmented answer both implement it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Protocol


class EventKind(StrEnum):
    """The kinds of answer events; their values are the SSE event names."""

    QUEUED = "queued"
    PARTIAL = "partial"
    QUOTE = "quote"
    TOKEN = "token"
    SEGMENT = "segment"
    CITATIONS = "citations"
    ANSWERS = "answers"
    STATS = "stats"
    DONE = "done"
    ERROR = "error"
    HEARTBEAT = "heartbeat"


@dataclass(frozen=True, slots=True)
class Queued:
    kind: ClassVar[EventKind] = EventKind.QUEUED
    position: int  # jobs waiting ahead of it


@dataclass(frozen=True, slots=True)
class Partial:
    """The answer comes from the part of the document read so far (its first reading goes on meanwhile:
    server/engine/partial.py): ``read_through`` ``{"page", "char"}``, the last page reached and the
    characters of the text read; ``share`` of the document's tokens read (0..1); ``pages``
    ``{"first", "last"}`` of the whole document. Sent once, before the answer.

    A collection's answer with documents still being read (server/service/collection.py) has no
    ``read_through`` nor ``pages``: ``unread`` names those documents, left out of the answer, each
    ``{"document_id", "document_name", "share"}`` (its share read), and ``share`` is of the
    collection's tokens that the answer could come from (None while one left out has no tokens yet)."""

    kind: ClassVar[EventKind] = EventKind.PARTIAL
    read_through: Mapping[str, int] | None
    share: float | None
    pages: Mapping[str, int] | None
    unread: tuple[Mapping[str, Any], ...] | None = None


@dataclass(frozen=True, slots=True)
class Quote:
    """A quote-first answer's quote, once it stands: the document's sentence it is in (spec/quote.py)."""

    kind: ClassVar[EventKind] = EventKind.QUOTE
    text: str


@dataclass(frozen=True, slots=True)
class Token:
    kind: ClassVar[EventKind] = EventKind.TOKEN
    text: str  # the next piece of the answer (UTF-8 safe)
    accepted: int = 0  # draft tokens accepted in the verify step that produced it


@dataclass(frozen=True, slots=True)
class Segment:
    """The part of the document (or the collection's document) the next tokens come from:
    server/service/segmented.py ``describe`` (index, pages, part, parts, chars, label; a collection's
    also its document's id and name)."""

    kind: ClassVar[EventKind] = EventKind.SEGMENT
    where: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Citations:
    kind: ClassVar[EventKind] = EventKind.CITATIONS
    citations: Sequence[Mapping[str, Any]]  # server/api/schemas.CitationPublic's fields
    quote: Mapping[str, Any] | None = None  # a quote-first answer's: server/api/schemas.QuotePublic's fields


@dataclass(frozen=True, slots=True)
class Answers:
    kind: ClassVar[EventKind] = EventKind.ANSWERS
    answers: Sequence[Mapping[str, Any]]  # server/api/schemas.SegmentAnswerPublic's fields


@dataclass(frozen=True, slots=True)
class Stats:
    kind: ClassVar[EventKind] = EventKind.STATS
    values: Mapping[str, Any] = field(default_factory=dict)  # server/api/schemas.AnswerStatsPublic's fields


@dataclass(frozen=True, slots=True)
class Done:
    kind: ClassVar[EventKind] = EventKind.DONE


@dataclass(frozen=True, slots=True)
class Failed:
    kind: ClassVar[EventKind] = EventKind.ERROR
    error: Exception  # an ApiError, or one server/config/errors.STATUS maps


@dataclass(frozen=True, slots=True)
class Heartbeat:
    kind: ClassVar[EventKind] = EventKind.HEARTBEAT


def read_so_far(partial: Mapping[str, Any]) -> str:
    """The one line that says an answer comes from the part of its document read so far (a Partial
    event's fields: server/engine/events.py), as the CLI and the OpenAI route show it
    (the page words it the same way: web/js/chat.js)."""
    if unread := partial.get("unread"):
        names = ", ".join(f"{d['document_name']} ({d['share']:.0%} read)" for d in unread)
        return f"Not read yet: {names}; this answer comes from the collection's other documents."
    first, last, page = partial["pages"]["first"], partial["pages"]["last"], partial["read_through"]["page"]
    share = f"{partial['share']:.0%}"
    whole = str(last) if first == 1 else f"{first}–{last}"  # a document cut to some pages keeps their numbers
    where = f"pages {first}–{page} of {whole} ({share})" if last > first else f"{share} of the document"
    return f"Read so far: {where}; the rest is not read yet, and this answer comes from the part read."


Event = Queued | Partial | Quote | Token | Segment | Citations | Answers | Stats | Done | Failed | Heartbeat
#: Event types after which a stream has ended.
FINAL = (Done, Failed)


class AnswerStream(Protocol):
    """What a route reads: ``events`` until Done or Failed; ``cancel()`` when its client goes away."""

    events: asyncio.Queue[Event]
    cancelled: threading.Event

    def cancel(self) -> None: ...
