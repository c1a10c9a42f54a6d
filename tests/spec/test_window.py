import numpy as np

from spec.verify import accept_greedy
from spec.window import AdaptiveWindow


def test_accept_greedy_table():
    # choices[i] is the target's token after [last, d_1..d_i]
    assert accept_greedy(np.array([4, 5, 6, 7]), [4, 5, 6]) == 3  # all accepted; choices[3] is the bonus
    assert accept_greedy(np.array([4, 9, 6, 7]), [4, 5, 6]) == 1  # stop at the first disagreement
    assert accept_greedy(np.array([1, 5, 6, 7]), [4, 5, 6]) == 0  # 0 accepted: emit choices[0]
    assert accept_greedy(np.array([3]), []) == 0  # no draft: a plain decode step


def test_adaptive_window_grows_and_shrinks():
    w = AdaptiveWindow(initial=8)
    w.observe(8, 8)
    assert w.next() == 16
    w.observe(16, 16)
    assert w.next() == 16  # capped
    w.observe(16, 2)
    assert w.next() == 4  # at least the minimum
    w.observe(4, 3)
    assert w.next() == 4
    w.observe(0, 0)  # no draft found: unchanged
    assert w.next() == 4


def test_adaptive_window_backs_off_after_empty_drafts():
    w = AdaptiveWindow(initial=8)
    pauses = []
    for _ in range(6):
        w.observe(w.next(), 0)
        steps = 0
        while w.next() == 0:
            steps += 1
        pauses.append(steps)
    assert pauses == [1, 2, 4, 8, 16, 16]
    w.observe(4, 2)  # an accepted draft ends the back-off
    w.observe(w.next(), 0)
    assert [w.next() for _ in range(2)] == [0, 4]
