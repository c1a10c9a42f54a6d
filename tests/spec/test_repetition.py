"""spec/repetition.py: table tests of the loop guard on tiny integer token streams."""

from __future__ import annotations

import numpy as np
import pytest

from spec.lookup import NgramIndex
from spec.repetition import RepetitionGuard


def first_loop(tokens: list[int], index: NgramIndex | None = None, **kw) -> int | None:
    """1-based count of tokens after which the guard reports a loop (None: never)."""
    guard = RepetitionGuard(index, **kw)
    for n, t in enumerate(tokens, start=1):
        if guard.push(t):
            return n
    return None


SMALL = dict(max_period=4, min_span=6, repeats=3)


@pytest.mark.parametrize(
    "tokens, expected, why",
    [
        ([7, 1, 2, 1, 2, 1, 2], 7, "the docstring's example: period 2, 6 tokens, 3 copies"),
        ([7, 1, 2, 1, 2, 1], None, "5 periodic tokens: under min_span"),
        ([5, 5, 5, 5, 5, 5], 6, "period 1 needs min_span tokens, not just 3 copies"),
        ([1, 2, 3, 1, 2, 3, 1, 2], None, "two copies and a bit of a 3-token block: not yet 3 copies"),
        ([1, 2, 3, 1, 2, 3, 1, 2, 3], 9, "three copies of a 3-token block"),
        ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], None, "no repetition at all"),
        ([1, 2, 1, 2, 9, 1, 2, 1, 2, 9], None, "the runs are broken before they get long enough"),
        ([1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3, 4, 5], None, "period 5 is over max_period 4"),
    ],
)
def test_loops(tokens, expected, why):
    assert first_loop(tokens, **SMALL) == expected, why


def test_default_thresholds_stop_a_repeated_line():
    line = [11, 12, 13, 14, 15, 16, 17]  # "They are a good thing.\n" as 7 tokens
    answer = [1, 2, 3, 4] + line * 7
    n = first_loop(answer)
    assert n == 4 + 3 * len(line)  # right after the third copy, not at max_tokens


def test_quote_of_a_repeated_passage_is_not_a_loop():
    refrain = [21, 22, 23]
    document = np.array([1, 2, 3, *refrain * 4, 9, 8], dtype=np.int32)  # the refrain 4 times, then more text
    index = NgramIndex(document, 2, 4)
    # Quoting the refrain 4 times, then going on with the document: no loop.
    assert first_loop([*refrain * 4, 9, 8], index, **SMALL) is None
    # A fifth copy is more than the document has: a loop, at its first token past the quote.
    assert first_loop(refrain * 5, index, **SMALL) == 3 * 4 + 1


def test_without_the_document_the_same_quote_is_a_loop():
    refrain = [21, 22, 23]
    assert first_loop(refrain * 4, None, **SMALL) == 9  # no index: no exemption


def test_unrelated_document_gives_no_exemption():
    index = NgramIndex(np.array([1, 2, 3, 4, 5, 6, 7, 8], dtype=np.int32), 2, 4)
    assert first_loop([7, 1, 2, 1, 2, 1, 2], index, **SMALL) == 7


def test_document_checks_stay_rare_while_quoting():
    """While the answer follows the quoted passage, each token is one comparison, not a new search."""
    document = np.array([30, *([41, 42] * 50), 31], dtype=np.int32)
    guard = RepetitionGuard(NgramIndex(document, 2, 4), **SMALL)
    assert not any(guard.push(t) for t in [41, 42] * 50)
    assert guard.doc_checks == 1
    assert guard.push(41)  # a 51st copy: more than the document has


def test_bad_thresholds_are_refused():
    with pytest.raises(ValueError, match="max_period"):
        RepetitionGuard(max_period=0)
