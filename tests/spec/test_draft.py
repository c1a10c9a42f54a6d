"""The draft policy's choices, with a toy lookup index and fixed costs (no model needed)."""

import numpy as np

from spec.cost import StepCosts
from spec.draft import DraftConfig, DraftPolicy
from spec.lookup import LookupDrafter, NgramIndex

DOC = list(range(10, 60))  # a document of distinct tokens: every 2-gram has one continuation


def policy(window, costs, tail=(10, 11)) -> DraftPolicy:
    lookup = LookupDrafter(NgramIndex(np.array(DOC, dtype=np.int32), 2, 4))
    lookup.extend(list(tail))
    return DraftPolicy(DraftConfig(window, ("lookup",)), lookup, None, costs)


CPU = StepCosts.cpu_default()  # 17 rows cost 7.8x one row
GPU = StepCosts(tuple([1.0] * 17))  # rows are free up to 17


def test_fixed_window_takes_what_it_is_told():
    assert policy(4, CPU).propose(11, 2, 16).tokens == DOC[2:6]
    assert policy(16, CPU).propose(11, 2, 5).tokens == DOC[2:7]  # capped by the room left


def test_adaptive_drafts_long_when_rows_are_free_and_short_when_they_are_not():
    gpu = policy(None, GPU)
    assert len(gpu.propose(11, 2, 16).tokens) == 16
    cpu = policy(None, CPU)
    for _ in range(6):  # the weak (2-gram) match keeps failing on CPU costs
        draft = cpu.propose(11, 2, 16)
        cpu.observe(draft, 0, 99)
    assert len(cpu.propose(11, 2, 16).tokens) == 0  # plain decoding is the better bet


def test_adaptive_goes_long_while_copying_on_a_cpu():
    p = policy(None, CPU, tail=(10, 11, 12, 13))  # a full-length (4-gram) match: a strong source
    for _ in range(4):
        draft = p.propose(13, 4, 16)
        assert draft.tokens
        p.observe(draft, len(draft.tokens), DOC[DOC.index(draft.tokens[-1]) + 1])
        p.lookup.extend([*draft.tokens, DOC[DOC.index(draft.tokens[-1]) + 1]])
    assert len(p.propose(0, 0, 16).tokens) == 16


def test_per_source_counters():
    p = policy(8, CPU)
    draft = p.propose(11, 2, 16)
    p.observe(draft, 3, 77)
    assert p.stats.drafted["lookup"] == 8 and p.stats.accepted["lookup"] == 3
    assert p.stats.drafted["mtp"] == 0
