"""The benchmark's sets: sizes, and a set added later leaves the earlier ones as they were."""

from __future__ import annotations

from collections import Counter

from bench.sets import build_sets


def test_needle_sets_sizes_and_a_later_set_changes_no_earlier_one(cases):
    first = build_sets(34, ("needles",))
    both = build_sets(34, ("needles", "needles-b", "needles-c"))
    assert [d.text for d in both if d.set == "needles"] == [d.text for d in first]
    kinds = Counter((d.set, i.kind) for d in both for i in d.items)
    assert kinds == {("needles", "exact"): 60, ("needles", "refusal"): 40,
                     ("needles-b", "exact"): 40, ("needles-b", "refusal"): 40,
                     ("needles-c", "exact"): 40, ("needles-c", "refusal"): 40}  # fmt: skip
    for d in both:  # every needle is planted in its text, once
        assert all(d.text.count(i.needle) == 1 for i in d.items if i.needle)


def test_multiple_choice_questions_have_no_topics(cases):
    """The topic check (spec/quote.py ``topics``) leaves every TPO and QuALITY question alone, so the
    served quote answers them as the keyed quote did before it."""
    from spec.quote import topics

    items = [i for d in build_sets(34, ("tpo", "quality")) for i in d.items]
    assert len(items) == 308 and not any(topics(i.question) for i in items)
