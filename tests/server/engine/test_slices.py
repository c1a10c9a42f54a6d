"""Prefill chunks follow the fitted cost of a chunk (server/engine/slices.py)."""

from __future__ import annotations

import pytest

from server.engine.slices import PrefillSlices, ReadShare


def test_before_any_chunk_a_quarter_of_n_ubatch():
    assert PrefillSlices(0.5).tokens(512) == PrefillSlices(0.5).tokens(512, alone=True) == 128


def test_one_size_of_chunk_reads_as_time_proportional_to_tokens():
    slices = PrefillSlices(0.5, alone_s=2.0)
    for _ in range(3):
        slices.observe(512, 4.0)  # 128 tok/s, the 1.5B reader on 2 cores
    assert slices.cost() == pytest.approx((0.0, 4.0 / 512))
    assert slices.tokens(512) == 64 and slices.tokens(512, alone=True) == 256


def test_the_fixed_part_of_a_call_is_fitted_and_small_slices_do_not_run_over():
    """Measured beside a benchmark: 512 tokens in 8.7 s, 32 in 0.62 s. A rate taken from the big chunk
    (59 tok/s) would give 0.5 s slices of 29 tokens costing 0.6 s; the fitted line knows the fixed part."""
    slices = PrefillSlices(1.0, alone_s=4.0)
    fixed, per_token = 0.1, 0.016  # seconds: 512 tokens -> 8.29 s, 32 -> 0.61 s
    for n in (512, 32, 512, 64, 32):
        slices.observe(n, fixed + per_token * n)
    assert slices.cost() == pytest.approx((fixed, per_token))
    n = slices.tokens(512)
    assert n == int((1.0 - fixed) / per_token) and fixed + per_token * n <= 1.0
    assert slices.tokens(512, alone=True) == int((4.0 - fixed) / per_token)


def test_chunks_stay_between_the_least_worth_a_call_and_n_ubatch():
    slow, fast = PrefillSlices(0.5), PrefillSlices(0.5)
    slow.observe(64, 64.0)  # 1 tok/s: a machine under heavy load
    fast.observe(512, 0.05)  # 10,240 tok/s: a GPU
    assert slow.tokens(512) == PrefillSlices.MIN_TOKENS and fast.tokens(512) == 512
    assert fast.tokens(512, alone=True) == 512


def test_newer_chunks_weigh_more_so_the_cost_follows_the_load():
    slices = PrefillSlices(0.5)
    for _ in range(10):
        slices.observe(128, 1.0)  # 128 tok/s
    for _ in range(10):
        slices.observe(128, 4.0)  # the machine got busy: 32 tok/s
    assert slices.rate < 40


def test_a_reading_takes_at_most_its_share_while_questions_are_answered():
    """One reading chunk per answer step left an answer at ~1 token/s deep in a book (32 rows took 1-2 s
    there, an answer step 0.05 s): now the questions run as long as the reading's last chunk took."""
    share = ReadShare(0.5)
    assert share.may_read(asking=False)  # nobody asks: the reading goes on
    share.read(1.25, asking=True)  # a 1.25 s chunk while an answer runs
    steps = 0
    while not share.may_read(asking=True):
        share.asked(0.0625)  # answer steps
        steps += 1
    assert steps == 20  # 1.25 s of answering before the next chunk: half the time each
    share.read(1.0, asking=True)
    assert not share.may_read(asking=True)
    assert share.may_read(asking=False)  # the answer ended: no debt is kept for the next one
    assert share.may_read(asking=True)
    quarter = ReadShare(0.25)
    quarter.read(1.0, asking=True)
    quarter.asked(2.5)
    assert not quarter.may_read(asking=True)  # the questions get 3 s per 1 s of reading
    quarter.asked(0.5)
    assert quarter.may_read(asking=True)
    with pytest.raises(ValueError):
        ReadShare(0.0)
