"""How a document's reading goes (server/engine/reading.py): waiting its turn, then the tokens read
at the measured rate and the time left (issue 36 item 7; issue 39 items 6 and 12: "preparing 0 %" for
minutes behind questions, and "0.0 tok/s" on a busy machine)."""

from __future__ import annotations

from server.engine.reading import WINDOW_S, Readings


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_a_reading_waits_then_reports_its_rate_and_the_time_left():
    clock = Clock()
    readings = Readings(clock)
    readings.queued("a", 3000)
    r = readings.of("a")
    assert not r.started and r.tokens_per_s is None and r.seconds_left is None  # never "0.0 tok/s"
    readings.started("a", 0, 3000)
    assert readings.of("a").started and readings.of("a").tokens_per_s is None  # no chunk read yet
    clock.t += 10
    readings.advanced("a", 500)  # 500 tokens in 10 s
    assert readings.of("a").tokens_per_s == 50 and readings.of("a").seconds_left == 50
    clock.t += 10
    readings.advanced("a", 1500)
    assert readings.of("a").tokens_per_s == 75 and readings.of("a").seconds_left == 20
    readings.advanced("a", 3000)  # done: no reading left to show
    assert readings.of("a") is None


def test_the_rate_follows_the_last_thirty_seconds():
    clock = Clock()
    readings = Readings(clock)
    readings.started("a", 0, 100_000)
    for done in range(1000, 11_000, 1000):  # 100 tok/s for 100 s ...
        clock.t += 10
        readings.advanced("a", done)
    for done in range(10_500, 13_000, 500):  # ... then 50 tok/s (the machine got busy)
        clock.t += 10
        readings.advanced("a", done)
    r = readings.of("a")
    assert r.samples[-1][0] - r.samples[0][0] <= WINDOW_S + 10
    assert r.tokens_per_s == 50


def test_a_segment_starts_where_the_last_one_ended_and_the_wait_between_counts():
    clock = Clock()
    readings = Readings(clock)
    readings.queued("a", 2000)
    readings.started("a", 0, 2000)
    clock.t += 10
    readings.advanced("a", 1000)  # the first segment, at 100 tok/s
    clock.t += 10  # a question ran before the second segment's turn
    readings.started("a", 1000, 2000)
    clock.t += 10
    readings.advanced("a", 1500)
    assert round(readings.of("a").tokens_per_s, 1) == 50.0  # 1,500 tokens in 30 s: the user waited through it


def test_readings_ahead_and_forget():
    readings = Readings(Clock())
    readings.queued("a", 10)
    readings.queued("b", 10)
    assert readings.ahead_of("b") == 1 and readings.ahead_of("a") == 0
    readings.forget("a")
    assert readings.ahead_of("b") == 0 and readings.of("a") is None
