"""Two parts of a long document that answer one question differently (server/service/agreement.py; issue
39 item 10: "white" from part 2 and "pink" from part 1, side by side, without a word)."""

from __future__ import annotations

import asyncio

from ingest.prompt import NOT_SAID
from server.engine.events import Answers, Citations, Done, Stats, Token
from server.service import agreement
from server.service.segmented import SegmentedAnswer


def _part(label: str, text: str) -> dict:
    return {"label": label, "text": text}


def test_parts_that_answer_differently_are_named_with_what_each_says():
    note = agreement.differ([_part("pages 1–5", "Pink."), _part("pages 6–9", "The White Rabbit's eyes were white.")])
    assert note == (
        "The parts answer differently: pages 1–5 say “Pink.”; pages 6–9 say “The White Rabbit's eyes were white.”. "
        "Both are cited: check them."
    )


def test_parts_that_agree_or_do_not_say_get_no_note():
    same = [_part("pages 1–5", "Pink eyes."), _part("pages 6–9", "The rabbit had pink eyes.")]
    assert agreement.differ(same) is None  # one answer's words are within the other's
    assert agreement.differ([_part("page 3", "Pink."), _part("page 9", NOT_SAID)]) is None  # claims nothing
    assert agreement.differ([_part("page 3", "Pink.")]) is None
    long = agreement.differ([_part("part 1 of 2", "x " * 100), _part("part 2 of 2", "y")])
    assert "part 1 of 2 says “" in long and "…”" in long and len(long) < 250


class _Job:
    """An answer job's event stream as the engine fills it (server/engine/jobs.py AnswerJob)."""

    def __init__(self, text: str, cited: list[dict]) -> None:
        self.events: asyncio.Queue = asyncio.Queue()
        for event in (Token(text), Citations(cited), Stats(dict(STATS)), Done()):
            self.events.put_nowait(event)

    def cancel(self) -> None:
        pass


STATS = {"prompt_tokens": 1, "cached_tokens": 2, "completion_tokens": 3, "drafted_tokens": 0, "accepted_tokens": 0,
         "verify_steps": 3}  # fmt: skip


class _Source:
    def __init__(self, label: str, start: int) -> None:
        self.where = {"label": label, "pages": [1, 1]}
        self.cited = {}
        self.score = 1.0
        self.start = start


class _Plan:
    def __init__(self, sources: list) -> None:
        self.sources, self.not_found = sources, "not found"


def test_a_segmented_answer_from_parts_that_differ_says_so_and_cites_both():
    sources = [_Source("pages 1–5", 0), _Source("pages 6–9", 100)]
    cited = [[{"start": 10, "end": 14, "text": "pink"}], [{"start": 110, "end": 115, "text": "white"}]]
    jobs = [_Job("Pink.", cited[0]), _Job("White.", cited[1])]

    async def read() -> list:
        answer = SegmentedAnswer(jobs, _Plan(sources))
        answer.start()
        out = []
        while not out or not isinstance(out[-1], Done):
            out.append(await answer.events.get())
        return out

    events = asyncio.run(read())
    text = "".join(e.text for e in events if isinstance(e, Token))
    assert text.startswith("From pages 1–5: Pink.\n\nFrom pages 6–9: White.\n\nThe parts answer differently: ")
    assert "pages 1–5 say “Pink.”; pages 6–9 say “White.”" in text
    (citations,) = [e for e in events if isinstance(e, Citations)]
    assert [c["text"] for c in citations.citations] == ["pink", "white"]  # both parts cited
    assert any(isinstance(e, Answers) for e in events)
