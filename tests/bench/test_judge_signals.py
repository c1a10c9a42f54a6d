"""bench/judge_signals.py: the report's arithmetic (AUC, the gate beside the served judgment, the
threshold chosen on one half), with known answers."""

from __future__ import annotations

import numpy as np

from bench.judge_signals import _refused, _threshold, auc


def _row(answerable: bool, p_yes: float, qlike: list[float]) -> dict:
    return {"set": "squad", "answerable": answerable, "p_yes_rec": p_yes, "served": p_yes, "qlike": qlike}


def test_auc_is_one_half_for_ties_and_one_for_a_clean_split():
    positive = np.array([True, True, False, False])
    assert auc(np.array([0.9, 0.8, 0.2, 0.1]), positive) == 1.0
    assert auc(np.array([0.1, 0.2, 0.8, 0.9]), positive) == 0.0
    assert auc(np.array([0.5, 0.5, 0.5, 0.5]), positive) == 0.5


def test_the_gate_refuses_below_either_the_served_threshold_or_the_signal():
    rows = [
        _row(True, 0.9, [-1.0]),  # stands
        _row(True, 0.5, [-1.0]),  # refused by the served judgment
        _row(False, 0.9, [-5.0]),  # refused by the signal
        _row(False, 0.9, [-1.0]),  # stands: neither refuses it
    ]
    assert _refused(rows, "qlike_mean", -3.0) == (1, 2, 1, 2)
    assert _refused(rows, "qlike_mean", -np.inf) == (1, 2, 0, 2)


def test_the_threshold_keeps_at_most_a_tenth_of_the_answerable_refused():
    answerable = [_row(True, 0.9, [-float(k)]) for k in range(1, 11)]  # means -1 .. -10
    absent = [_row(False, 0.9, [-9.5])]
    t = _threshold(answerable + absent, "qlike_mean")
    assert t == -9.0  # one of ten answerable refused (-10), the absent one (-9.5) too
    assert _refused(answerable + absent, "qlike_mean", t) == (1, 10, 1, 1)
