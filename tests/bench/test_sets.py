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


def test_squad_normans_is_one_document_of_208_questions(cases):
    """SQuAD 2.0's Normans article (bench/qa_sets.py): every paragraph in one document, its 96
    answerable questions with their gold answers and its 112 unanswerable ones, in the file's order."""
    (doc,) = build_sets(34, ("squad",))
    kinds = Counter(i.kind for i in doc.items)
    assert kinds == {"squad": 96, "refusal": 112}
    assert all(i.accept for i in doc.items if i.kind == "squad")
