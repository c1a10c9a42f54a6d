"""Prefill slices follow the measured prefill rate (server/engine/slices.py)."""

from __future__ import annotations

from server.engine.slices import PrefillSlices


def test_a_slice_holds_what_the_measured_rate_prefills_in_its_time():
    slices = PrefillSlices(0.5)
    assert slices.tokens(512) == 128  # not measured yet: a quarter of n_ubatch
    slices.observe(512, 4.0)  # 128 tok/s, as the 1.5B reader on 2 cores
    assert slices.tokens(512) == 64
    slices.observe(64, 0.1)  # 640 tok/s: the average moves a third of the way
    assert slices.rate == 0.7 * 128 + 0.3 * 640 and slices.tokens(512) == int(0.5 * (0.7 * 128 + 0.3 * 640))


def test_slices_stay_between_the_least_worth_a_call_and_n_ubatch():
    slow, fast = PrefillSlices(0.5), PrefillSlices(0.5)
    slow.observe(64, 64.0)  # 1 tok/s: a machine under heavy load
    fast.observe(512, 0.05)  # 10,240 tok/s: a GPU
    assert slow.tokens(512) == PrefillSlices.MIN_TOKENS and fast.tokens(512) == 512
    slow.observe(8, 0.001)  # too small a chunk to say anything: ignored
    assert slow.rate == 1.0
