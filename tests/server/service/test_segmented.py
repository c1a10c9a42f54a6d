"""A segmented answer read as one stream (server/service/segmented.py), with stand-in jobs: the order of
its events, the summed stats, an error that stops the rest, and the not-found answer."""

from __future__ import annotations

import asyncio
import threading

from ingest.segments import Segment
from server.engine.events import FINAL, Answers, Citations, Done, Event, EventKind, Failed, Stats, Token
from server.engine.events import Segment as SegmentEvent
from server.service.segmented import NOT_FOUND, Plan, SegmentedAnswer

STATS = {
    "prompt_tokens": 5, "cached_tokens": 100, "completion_tokens": 3, "ttft_ms": 10.0, "decode_tokens_per_s": 1.0,
    "drafted_tokens": 2, "accepted_tokens": 1, "verify_steps": 2, "finish_reason": "stop",
    "drafted_by_source": {}, "accepted_by_source": {}, "mean_accepted_per_step": 0.5,
}  # fmt: skip


class Job:
    """Stands in for an AnswerJob: its events are queued up front."""

    def __init__(self, *events: Event) -> None:
        self.events: asyncio.Queue[Event] = asyncio.Queue()
        for e in events:
            self.events.put_nowait(e)
        self.cancelled = threading.Event()

    def cancel(self) -> None:
        self.cancelled.set()


def answered(text: str, citation: dict) -> Job:
    return Job(
        Token(text),
        Citations([citation]),
        Stats(dict(STATS)),
        Done(),
    )


def segment(index: int, pages: list[int], chars: tuple[int, int] = (0, 10)) -> Segment:
    return Segment(index, chars[0], chars[1], pages[0], pages[1])


async def read(answer: SegmentedAnswer) -> list[Event]:
    answer.start()
    out = []
    while not out or not isinstance(out[-1], FINAL):
        out.append(await asyncio.wait_for(answer.events.get(), 5))
    return out


def test_two_segments_answer_in_turn_with_their_pages_and_summed_stats():
    jobs = [answered("Lyon.", {"start": 1}), answered("Paris.", {"start": 2})]
    plan = Plan([segment(3, [7, 9]), segment(0, [1, 2])], [2.0, 1.8], 5, paged=True)
    events = asyncio.run(read(SegmentedAnswer(jobs, plan)))
    kinds = [e.kind for e in events]
    # The fifth token: the parts answer differently (server/service/agreement.py).
    assert kinds == [
        EventKind.SEGMENT, EventKind.TOKEN, EventKind.TOKEN, EventKind.SEGMENT, EventKind.TOKEN, EventKind.TOKEN,
        EventKind.TOKEN, EventKind.CITATIONS, EventKind.ANSWERS, EventKind.STATS, EventKind.DONE,
    ]  # fmt: skip
    text = "".join(e.text for e in events if isinstance(e, Token))
    assert text == (
        "From pages 7–9: Lyon.\n\nFrom pages 1–2: Paris.\n\nThe parts answer differently: "
        "pages 7–9 say “Lyon.”; pages 1–2 say “Paris.”. Both are cited: check them."
    )
    assert isinstance(events[7], Citations) and [c["start"] for c in events[7].citations] == [1, 2]
    assert isinstance(events[8], Answers) and [a["text"] for a in events[8].answers] == ["Lyon.", "Paris."]
    stats = events[9].values
    assert stats["completion_tokens"] == 6 and stats["cached_tokens"] == 200
    assert stats["segments"] == [
        {"index": 3, "pages": [7, 9], "part": 4, "parts": 5, "chars": [0, 10], "label": "pages 7–9", "score": 2.0},
        {"index": 0, "pages": [1, 2], "part": 1, "parts": 5, "chars": [0, 10], "label": "pages 1–2", "score": 1.8},
    ]


def test_a_text_without_pages_names_its_segments_by_part_and_characters():
    """A .txt split in three: "part 2 of 3, characters 31,204–62,880", not "pages 1–1" (issue 29)."""
    jobs = [answered("Lyon.", {"start": 31_300}), answered("Paris.", {"start": 5})]
    plan = Plan([segment(1, [1, 1], (31_204, 62_880)), segment(0, [1, 1], (0, 31_900))], [2.0, 1.9], 3, paged=False)
    events = asyncio.run(read(SegmentedAnswer(jobs, plan)))
    text = "".join(e.text for e in events if isinstance(e, Token))
    assert text.startswith(
        "From part 2 of 3, characters 31,204–62,880: Lyon.\n\nFrom part 1 of 3, characters 0–31,900: Paris.\n\n"
        "The parts answer differently: part 2 of 3, characters 31,204–62,880 says “Lyon.”;"
    )
    assert "page" not in text
    first = events[0]
    assert isinstance(first, SegmentEvent) and first.where == {
        "index": 1, "pages": [1, 1], "part": 2, "parts": 3, "chars": [31_204, 62_880],
        "label": "part 2 of 3, characters 31,204–62,880",
    }  # fmt: skip
    by_kind = {type(e): e for e in events}
    assert [a["label"] for a in by_kind[Answers].answers] == [
        "part 2 of 3, characters 31,204–62,880",
        "part 1 of 3, characters 0–31,900",
    ]
    assert [u["chars"] for u in by_kind[Stats].values["segments"]] == [[31_204, 62_880], [0, 31_900]]


def test_an_error_in_one_segment_ends_the_stream_and_cancels_the_others():
    failing = Job(Failed(RuntimeError("boom")))
    later = answered("never", {"start": 0})
    events = asyncio.run(
        read(SegmentedAnswer([failing, later], Plan([segment(0, [1, 1]), segment(1, [2, 2])], [1, 1])))
    )
    assert isinstance(events[-1], Failed) and later.cancelled.is_set()


def test_no_matching_segment_answers_not_found_without_a_job():
    events = asyncio.run(read(SegmentedAnswer([], Plan([], []))))
    assert events[0].text == NOT_FOUND and events[-2].values["finish_reason"] == "not_found"


def test_a_refusal_from_the_segments_read_so_far_says_the_rest_is_not_read_yet():
    refused = {"text": "x", "verified": False, "citation": None, "passage": None, "support": 0.1}
    refused["reason"] = "No passage of the document answers the question."
    job = Job(Token("The document does not say."), Citations([], refused), Stats(dict(STATS)), Done())
    read_so_far = {"read_through": {"page": 3, "char": 900}, "share": 0.36, "pages": {"first": 1, "last": 9}}
    plan = Plan([segment(0, [1, 3])], [1.0], partial=read_so_far)
    events = asyncio.run(read(SegmentedAnswer([job], plan)))
    (cited,) = [e for e in events if isinstance(e, Citations)]
    assert cited.quote["reason"] == (
        "No passage of the document answers the question; only 36% of the document is read so far; "
        "the rest is not read yet."
    )
    assert cited.quote["refusal"] == "not_read_yet"
