"""Answering from a segmented document (ingest/segments.py): rank its segments for the question,
answer from the best one (or the best two), and give the route one stream of events, as one job.

The rule (store/index.py ``chosen``): the segments are ranked by FTS5 BM25 over their text. The best
one is answered from; the second best too when its score is at least DOCQA_SEGMENT_CLOSE_RATIO x the
best's (default 0.8: they hold the question's words about equally well), and both answers are given,
each after a "From ...:" line naming its segment (:func:`label`), with their citations. When no
segment holds any of the question's words (less stopwords), the answer says that the document does
not seem to contain it, and no model time is spent: answering from an arbitrary segment would only
invite a made-up answer.

A segment is named by what it is: in a document with pages by its pages ("pages 5–9"); in a text
without pages (a .txt or .md file is one page) by its part and its characters, "part 2 of 3, characters
31,204–62,880" ([start, end) offsets into the document text, as citations give them), since "pages
1–1" would say nothing.

Events, in addition to an answer job's: ``segment`` ({index, pages, part, parts, chars, label}) before
each segment's tokens, and, with two segments, ``answers`` ([{index, pages, part, parts, chars, label,
text, citations}]) before ``stats``. ``stats`` gains ``segments`` ([{index, pages, part, parts, chars,
label, score}]); its counts are the sums over the answers.

:class:`SegmentedAnswer` reads any list of :class:`Source` (what one job answers from, described for
people) this way: a collection's plan (server/service/collection.py) is one too, whose sources are its
documents or their segments, each description and citation naming its document as well.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from ingest import snapshot
from ingest.segments import Segment
from ingest.segments import key as segment_key
from server.config.errors import DocumentNotReady
from server.engine.citations import not_read_yet
from server.engine.events import Answers, Citations, Done, Event, Failed, Partial, Quote, Stats, Token
from server.engine.events import Segment as SegmentEvent
from server.engine.jobs import AnswerJob
from server.engine.repairs import Repairs
from server.service import agreement
from store import index
from store.docstore import DocRecord

NOT_FOUND = (
    "The document does not seem to contain this: none of its parts mentions any of the words of the "
    "question. Try asking with the words the document would use."
)
_SUMMED = ("prompt_tokens", "cached_tokens", "completion_tokens", "drafted_tokens", "accepted_tokens", "verify_steps")


def label(segment: Segment, parts: int, paged: bool) -> str:
    """What to call ``segment`` (of ``parts``) for people: "pages 5–9" ("page 5") in a document with
    pages (``paged``: more than one), else "part 2 of 3, characters 31,204–62,880".

    >>> label(Segment(1, 31204, 62880, 1, 1), 3, paged=False)
    'part 2 of 3, characters 31,204–62,880'
    >>> label(Segment(0, 0, 900, 5, 9), 2, paged=True), label(Segment(1, 800, 990, 9, 9), 2, paged=True)
    ('pages 5–9', 'page 9')
    """
    if paged:
        a, b = segment.pages
        return f"page {a}" if a == b else f"pages {a}–{b}"
    return f"part {segment.index + 1} of {parts}, characters {segment.start:,}–{segment.end:,}"


def describe(segment: Segment, parts: int, paged: bool) -> dict[str, Any]:
    """The fields every description of a segment carries: index, pages (kept for old clients), part
    (1-based) of parts, chars ([start, end)), label."""
    return {
        "index": segment.index, "pages": segment.pages, "part": segment.index + 1, "parts": parts,
        "chars": [segment.start, segment.end], "label": label(segment, parts, paged),
    }  # fmt: skip


def paged(doc: DocRecord) -> bool:
    """Whether ``doc``'s segments are named by pages: it has more than one."""
    return doc.pages > 1


@dataclass(frozen=True, slots=True)
class Source:
    """What one job answers from: document ``doc_id`` whole (``segment`` None) or one of its
    segments, ``n_tokens`` its prefix tokens; ``where`` its description (the ``segment`` event, an
    entry of ``answers`` and of the stats' ``segments``: index, pages, part, parts, chars, label, and
    more fields for a collection), ``score`` its BM25 score, ``cited``: fields added to each of its
    citations (a collection's: the document's id and name)."""

    doc_id: str
    segment: int | None
    n_tokens: int
    where: dict[str, Any]
    score: float
    cited: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Plan:
    """The segments to answer from, best first, with their BM25 scores ([] : not in the document);
    ``parts``: how many segments the document has, ``paged``: whether they are named by pages;
    ``doc_id``: the document."""

    segments: list[Segment]
    scores: list[float]
    parts: int = 0
    paged: bool = True
    doc_id: str = ""
    partial: dict[str, Any] | None = None  # answered from the segments read so far: a Partial event's fields

    @property
    def sources(self) -> list[Source]:
        return [
            Source(self.doc_id, s.index, s.n_tokens, describe(s, self.parts, self.paged), score)
            for s, score in zip(self.segments, self.scores, strict=True)
        ]

    @property
    def not_found(self) -> str:
        return NOT_FOUND


def plan(
    repairs: Repairs,
    doc: DocRecord,
    question: str,
    close: float,
    history: tuple[tuple[str, str], ...] = (),
    while_reading: bool = False,
) -> Plan | None:
    """Rank ``doc``'s segments for ``question``, a conversation's earlier turns (``history``) ranked
    with it, weighted lower (store/index.py ``rank_conversation``: a follow-up such as "Why did she
    do it?" stays on the segment its conversation is about); None for a document answered whole.
    Runs off the event loop (a small SQLite read). ``repairs``: the store's, read through the one
    repair path (a damaged segment list or index is repaired and read again, server/engine/repairs.py).
    Raises DocumentFilesDamaged beyond repair. ``while_reading``: the document is in its first
    reading; only the segments whose snapshot is complete are ranked, and the plan says how far they
    reach (``partial``); DocumentNotReady while none is."""
    store = repairs.store
    segments = repairs.read(doc.id, partial(store.read_segments, doc.id))
    if segments is None:
        return None
    ranked = repairs.read(doc.id, partial(store.rank_segments, doc.id, question, history))
    read_so_far = None
    if while_reading:
        done = [s for s in segments if _complete(store, doc.id, s)]
        if not done:
            raise DocumentNotReady(f"document {doc.id} is being read: none of its parts is read yet; retry soon")
        read_so_far = _read_so_far(segments, done)
        ranked = [(i, score) for i, score in ranked if i in {s.index for s in done}]
    scores = dict(ranked)
    picked = index.chosen(ranked, close)
    chosen, picked_scores = [segments[i] for i in picked], [scores[i] for i in picked]
    return Plan(chosen, picked_scores, len(segments), paged(doc), doc.id, read_so_far)


def _complete(store, doc_id: str, segment: Segment) -> bool:
    """``segment``'s snapshot is on disk, whole (the reading went past it)."""
    key = segment_key(doc_id, segment.index)
    return snapshot.describes(store.state_dir(key), store.read_prefix(key))


def _read_so_far(segments: list[Segment], done: list[Segment]) -> dict[str, Any]:
    """A Partial event's fields (server/engine/events.py) for the segments read so far."""
    last = max(done, key=lambda s: s.end)
    share = sum(s.n_tokens for s in done) / max(1, sum(s.n_tokens for s in segments))
    pages = {"first": segments[0].first_page, "last": segments[-1].last_page}
    return {"read_through": {"page": last.last_page, "char": last.end}, "share": round(share, 4), "pages": pages}


def _stats_zero() -> dict[str, Any]:
    return {
        "prompt_tokens": 0, "cached_tokens": 0, "completion_tokens": 0, "ttft_ms": 0.0, "decode_tokens_per_s": 0.0,
        "drafted_tokens": 0, "accepted_tokens": 0, "verify_steps": 0, "finish_reason": "not_found",
        "drafted_by_source": {}, "accepted_by_source": {}, "mean_accepted_per_step": 0.0,
    }  # fmt: skip


class Planned(Protocol):
    """What :class:`SegmentedAnswer` reads a plan for: its sources, best first ([]: nothing
    matched), and what to answer when nothing did."""

    @property
    def sources(self) -> list[Source]: ...

    @property
    def not_found(self) -> str: ...


@dataclass(eq=False)
class SegmentedAnswer:
    """The answer jobs of one question (one per chosen source, run one after the other by the
    engine: each needs its own segment or document in the document sequence) read as one answer
    stream (server/engine/events.py ``AnswerStream``), as the routes read an AnswerJob."""

    jobs: list[AnswerJob]
    plan: Planned
    events: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    _task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._pump())

    def cancel(self) -> None:
        self.cancelled.set()
        for job in self.jobs:
            job.cancel()
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def _pump(self) -> None:
        put = self.events.put_nowait
        if (read := getattr(self.plan, "partial", None)) is not None:  # answered from the parts read so far
            put(Partial(**read))
        if not self.jobs:
            put(Token(self.plan.not_found))
            put(Citations([]))
            put(Stats({**_stats_zero(), "segments": []}))
            put(Done())
            return
        many = len(self.jobs) > 1
        parts: list[dict[str, Any]] = []
        all_stats: list[dict[str, Any]] = []
        for i, (job, source) in enumerate(zip(self.jobs, self.plan.sources, strict=True)):
            where = source.where
            put(SegmentEvent(where))
            part: dict[str, Any] = {**where, "text": "", "citations": [], "quote": None}
            if many:
                put(Token(f"{chr(10) * 2 if i else ''}From {where['label']}: "))
            while True:
                match event := await job.events.get():
                    case Token(text=text):
                        part["text"] += text
                        put(event)
                    case Quote():
                        put(event)
                    case Citations(citations=cited, quote=quoted):
                        part["citations"] = [{**c, **source.cited} for c in cited]
                        if quoted is not None:  # its citation (or its passage) names the collection's document
                            part["quote"] = dict(quoted) | {
                                k: {**quoted[k], **source.cited} for k in ("citation", "passage") if quoted.get(k)
                            }
                    case Stats(values=values):
                        all_stats.append(dict(values))
                    case Failed():
                        for other in self.jobs:
                            other.cancel()
                        put(event)
                        return
                    case Done():
                        break
            parts.append(part)
        if many and (note := agreement.differ(parts)) is not None:  # "white" from one part, "pink" from the other
            put(Token(f"\n\n{note}"))
        quotes = [p["quote"] for p in parts if p["quote"] is not None]
        quote = next((q for q in quotes if q["verified"]), quotes[0] if quotes else None)
        read = getattr(self.plan, "partial", None)
        if quote is not None and not quote["verified"] and read and read.get("share") and not read.get("unread"):
            # refused from the segments read so far: the rest of the document is not read yet
            quote = {**quote, "reason": not_read_yet(quote["reason"] or "", read["share"]), "refusal": "not_read_yet"}
        put(Citations([c for p in parts for c in p["citations"]], quote))
        if many:
            put(Answers(parts))
        put(Stats(self._stats(all_stats)))
        put(Done())

    def _stats(self, all_stats: list[dict[str, Any]]) -> dict[str, Any]:
        """The first answer's stats, its counts summed over all answers, and the segments used."""
        stats = dict(all_stats[0])
        for name in _SUMMED:
            stats[name] = sum(s[name] for s in all_stats)
        stats["segments"] = [{**s.where, "score": round(s.score, 4)} for s in self.plan.sources]
        return stats


def submit(engine, plan: Planned, make_job) -> tuple[SegmentedAnswer, int]:
    """Queue a job per planned source (``make_job(source)`` -> AnswerJob) and start reading them;
    returns the answer and the queue position of its first job."""
    jobs = [make_job(s) for s in plan.sources]
    positions = [engine.submit_answer(job) for job in jobs]
    answer = SegmentedAnswer(jobs, plan)
    answer.start()
    return answer, positions[0] if positions else 0
