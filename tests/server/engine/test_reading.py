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


def test_each_document_has_a_place_in_the_reading_queue_and_the_tokens_before_it():
    readings = Readings(Clock())
    for doc, n in (("book", 6000), ("memo", 500), ("note", 400)):
        readings.queued(doc, n)
    assert readings.place("note").position == 3, "before the engine publishes the order: as queued"
    readings.order([("book", 5000), ("note", 400), ("memo", 500)])  # scheduler.reading_order
    place = readings.place("memo")
    assert (place.position, place.tokens_ahead, place.tokens_left) == (3, 5400, 500)
    assert readings.ahead_of("book") == 0 and readings.ahead_of("note") == 1
    readings.queued("late", 100)
    assert readings.place("late").position == 4 and readings.place("late").tokens_ahead == 5900


def test_the_servers_rate_counts_reading_time_not_the_idle_gap_between_readings():
    clock = Clock()
    readings = Readings(clock)
    assert readings.tokens_per_s is None
    readings.queued("a", 1000)
    readings.started("a", 0, 1000)
    clock.t += 10
    readings.advanced("a", 1000)  # 100 tok/s, then nothing to read for a while
    clock.t += WINDOW_S / 2
    readings.queued("b", 1000)
    readings.started("b", 0, 1000)
    clock.t += 5
    readings.advanced("b", 500)  # 100 tok/s again: the gap is not reading time
    assert readings.tokens_per_s == 100.0


def test_a_paused_reading_keeps_its_progress_and_measures_its_rate_again_when_it_goes_on():
    clock = Clock()
    readings = Readings(clock)
    readings.queued("book", 6000)
    readings.started("book", 0, 6000)
    clock.t += 10
    readings.advanced("book", 1000)
    readings.paused("book")
    r = readings.of("book")
    assert r.paused and not r.reading and r.done == 1000 and readings.is_paused("book")
    clock.t += 60  # a shorter document is read meanwhile
    readings.resumed("book")
    assert readings.of("book").reading and readings.of("book").tokens_per_s is None, "the pause is not its rate"
    clock.t += 10
    readings.advanced("book", 2000)
    assert readings.of("book").tokens_per_s == 100.0
