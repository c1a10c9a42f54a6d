"""Table tests for the prompt-lookup drafter, on tiny integer token arrays."""

from __future__ import annotations

import numpy as np
import pytest

from spec.lookup import AGREE_CAP, LookupDrafter, NgramIndex, _rolling_hashes, ngram_hash


def drafter(doc: list[int], tail: list[int] = (), min_n: int = 2, max_n: int = 3) -> LookupDrafter:
    d = LookupDrafter(NgramIndex(np.array(doc, dtype=np.int32), min_n, max_n))
    d.extend(tail)
    return d


@pytest.mark.parametrize(
    ("doc", "tail", "k", "expected", "why"),
    [
        ([5, 6, 7, 8, 5, 6, 9], [5, 6], 4, [9, 5, 6], "latest (5, 6) wins; its continuation runs on into the tail"),
        ([1, 2, 3, 4, 5, 6], [2, 3], 3, [4, 5, 6], "copy the continuation of the match"),
        ([1, 2, 3, 4, 5, 6], [2, 3], 2, [4, 5], "never more than k tokens"),
        ([1, 2, 3, 4, 5, 6], [9, 3], 3, [], "the last 2-gram (9, 3) never occurred: no draft"),
        ([1, 2, 3, 9, 2, 3, 7], [1, 2, 3], 2, [9, 2], "the 3-gram (1,2,3) beats the more recent 2-gram (2,3)"),
        ([1, 2, 3], [], 3, [], "the prefix's own final n-gram has no continuation: no draft"),
        ([1, 2, 3, 4], [1, 2], 0, [], "k = 0 drafts nothing"),
        ([7, 7, 7, 7], [], 3, [7], "repeated tokens: the latest occurrence continues with one token"),
    ],
)
def test_propose(doc, tail, k, expected, why):
    assert drafter(doc, tail).propose(k) == expected, why


def test_answer_tokens_are_indexed_and_preferred():
    # (4, 5) occurs in the document followed by 6, and later in the answer followed by 8.
    d = drafter([4, 5, 6, 0, 0], [4, 5, 8, 1, 4, 5])
    assert d.propose(2) == [8, 1]


def test_continuation_spans_document_and_tail():
    d = drafter([1, 2, 3], [4, 1, 2])
    assert d.propose(4) == [3, 4, 1, 2]


def test_min_n_one():
    d = drafter([3, 8, 9], [3], min_n=1, max_n=2)
    assert d.propose(2) == [8, 9]


def test_rolling_hash_matches_scalar_hash():
    tokens = np.array([262143, 0, 17, 42, 99, 262143], dtype=np.int32)
    for n in (1, 2, 4):
        hashes = _rolling_hashes(tokens, n)
        assert [int(h) for h in hashes] == [ngram_hash(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def test_propose_cost_does_not_grow_with_document(benchmark=None):
    """Index once, then each proposal is a handful of dict lookups (no scan of the document)."""
    rng = np.random.default_rng(0)
    big = rng.integers(0, 50_000, size=200_000).astype(np.int32)
    d = LookupDrafter(NgramIndex(big, 2, 4))
    d.extend(big[1000:1003].tolist())
    assert d.propose(8) == big[1003:1011].tolist()


# Whitespace-tolerant copying. Toy vocabulary: ids -> bytes; 10/11 are " of"/"of", 20 is "\n".
PIECES = {
    1: b" the",
    2: b" bank",
    3: b",",
    4: b" and",
    10: b" of",
    11: b"of",
    12: b" having",
    20: b"\n",
    21: b"bank",
    30: b" nothing",
    31: b" to",
    40: b"\nconvers",
    41: b"ations",
    42: b" conversations",
}


def copy_drafter(doc: list[int], tail: list[int]) -> LookupDrafter:
    d = LookupDrafter(
        NgramIndex(np.array(doc, dtype=np.int32), 2, 3), PIECES.__getitem__, lambda t: {10: [11]}.get(t, [t])
    )
    d.extend(tail)
    return d


def test_copy_continues_after_a_substituted_token():
    # doc "... the\nbank , and of having": the target wrote " bank" where the document has "\n" "bank".
    d = copy_drafter([5, 1, 20, 21, 3, 4, 10, 12], [5, 1])
    assert d.propose(6) == [20, 21, 3, 4, 10, 12]
    d.verified(0, 2)  # nothing accepted; the target chose " bank" for "\n" + "bank"
    d.extend([2])
    assert d.propose(4) == [3, 4, 10, 12]  # resynchronised after "bank"


def test_copy_after_the_target_writes_a_line_break_drops_the_leading_space():
    d = copy_drafter([1, 2, 3, 4, 10, 12, 30], [1, 2])
    assert d.propose(3) == [3, 4, 10]
    d.verified(2, 20)  # accepted "," " and"; then the target wrote "\n" where the document has " of"
    d.extend([3, 4, 20])
    assert d.propose(3) == [11, 12, 30]  # "of" respelled without its space, then the rest


def test_one_target_token_can_stand_for_several_document_tokens():
    d = copy_drafter([5, 1, 40, 41, 3, 4, 30], [5, 1])
    assert d.propose(2) == [40, 41]
    d.verified(0, 42)  # " conversations" for "\nconvers" + "ations"
    d.extend([42])
    assert d.propose(2) == [3, 4]


def test_two_empty_steps_end_the_copy():
    d = copy_drafter([1, 2, 3, 4, 10, 12, 30, 31], [1, 2])
    d.propose(2)
    d.verified(0, 31)
    d.extend([31])
    d.propose(2)
    d.verified(0, 31)
    d.extend([31])
    assert d.propose(2) == []  # no cursor, and the 2-gram (31, 31) never occurred


def test_agreement_counts_how_far_back_the_context_follows_the_source():
    d = drafter(list(range(1, 11)), [3, 4, 5])
    assert d.propose(2) == [6, 7]
    assert d.agreement() == 3  # 3, 4, 5 agree; the token before them (2 in the document, 10 in the context) does not
    long = drafter(list(range(100)), list(range(50)))  # the context has followed the document for 50 tokens
    assert long.propose(4) == [50, 51, 52, 53]
    assert long.agreement() == AGREE_CAP
    assert drafter([1, 2, 3], [9, 9]).propose(2) == [] and drafter([1, 2, 3], [9, 9]).agreement() == 0
