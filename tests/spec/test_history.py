"""Drafts from earlier answers (spec/history.py), with toy token ids: what is kept, what is proposed."""

from __future__ import annotations

import numpy as np
import pytest

from spec.history import QUESTION_TAIL, SEP, AnswerHistory, HistoryDrafter
from spec.lookup import AGREE_CAP

Q = [100, 101, 102, 9]  # a question ending in the scaffolding token 9 ("Answer:")
A = [20, 21, 22, 23, 24, 25]


def drafter(history: AnswerHistory, context: list[int], **kw) -> HistoryDrafter:
    d = HistoryDrafter(history, **kw)
    d.extend(context)
    return d


def test_the_same_question_again_drafts_the_earlier_answer_from_its_first_token():
    h = AnswerHistory().add(Q, A)
    d = drafter(h, [1, 2, *Q])  # the document prefix is not the history's business; the suffix is
    assert d.propose(4) == A[:4]
    d.verified(4, A[4])  # all four accepted, and the target's own token was the next one
    d.extend([*A[:4], A[4]])
    assert d.propose(8) == A[5:], "the copy goes on from the cursor, and stops at the entry's end"


def test_an_earlier_answer_to_the_same_question_is_replayed_not_the_newest_answer():
    """Answers share their first tokens (the scaffolding, "The"), so the longest n-gram match at an
    answer's start continues the newest answer of any question; the answer to the same question
    (its tail, at least MIN_QUESTION tokens) is the one replayed, and for as long as it agrees."""
    q1, a1 = [*range(100, 112), 9], [20, 21, 22, 23, 24]
    q2, a2 = [*range(200, 212), 9], [20, 21, 30, 31]  # asked later, answered with the same first tokens
    h = AnswerHistory().add(q1, a1).add(q2, a2)
    other = drafter(h, list(range(300, 313)))  # a question never asked: the newest answer's n-gram
    other.extend([9, 20])
    assert other.propose(3) == [21, 30, 31]
    d = drafter(h, q1)  # the question, as spec/loop.py gives it, then the first answer token
    d.extend([20])
    assert d.strong() and d.propose(3) == [21, 22, 23]
    assert d.agreement() == AGREE_CAP, "the whole question and the answer so far agree: a long copy"
    d.extend([21, 99])  # the answer departs from the earlier one: no more replay
    assert not d.strong() and d.propose(3) == []


def test_a_draft_never_runs_past_an_entry_into_the_next():
    h = AnswerHistory().add(Q, A).add([7, 7, 9], [30, 31])
    d = drafter(h, [*Q, *A[:-2]])
    draft = d.propose(16)
    assert draft == A[-2:] and SEP not in draft


def test_the_context_is_not_matched_in_itself():
    """Continuing the answer from its own earlier tokens is prompt lookup's job, not history's."""
    d = drafter(AnswerHistory(), [5, 6, 7, 5, 6])
    assert d.propose(4) == []


def test_a_conversations_earlier_answers_are_history_for_that_request():
    earlier = [[*Q, *A]]  # what the request's history rendered: its question and its answer
    d = drafter(AnswerHistory(), [40, 9, 20, 21], earlier=earlier)
    assert d.propose(3) == [22, 23, 24]


def test_the_latest_of_several_matches_wins():
    h = AnswerHistory().add([5, 9], [50, 51]).add([5, 9], [60, 61])  # asked twice, answered twice
    assert drafter(h, [5, 9]).propose(2) == [60, 61]


def test_the_history_is_bounded_and_drops_the_oldest_first():
    h = AnswerHistory(max_tokens=25)
    for i in range(5):
        h = h.add([i, 9], [10 * i + j for j in range(8)])  # 10 tokens + a separator each
    assert len(h) == 2 and h.n_tokens <= 25
    assert [int(e[0]) for e in h.entries] == [3, 4]


def test_only_the_end_of_a_long_question_is_kept_and_empty_answers_are_not():
    h = AnswerHistory().add(list(range(500)), [7])
    assert len(h.entries[0]) == QUESTION_TAIL + 1
    assert len(h.add([1, 2], [])) == 1


def test_a_history_round_trips_and_damaged_bytes_are_refused():
    h = AnswerHistory().add(Q, A).add([3, 9], [4, 5])
    again = AnswerHistory.from_bytes(h.to_bytes())
    assert [e.tolist() for e in again.entries] == [e.tolist() for e in h.entries]
    assert len(AnswerHistory.from_bytes(AnswerHistory().to_bytes())) == 0
    for bad in (b"", b"not numpy", h.to_bytes()[:-3]):
        with pytest.raises(ValueError):
            AnswerHistory.from_bytes(bad)
    import io

    other = io.BytesIO()
    np.save(other, np.array([2, 1, 2, SEP], np.int32))  # another format version
    with pytest.raises(ValueError):
        AnswerHistory.from_bytes(other.getvalue())
