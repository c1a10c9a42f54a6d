"""Passages judged before the quote (spec/support.py): the number check, the choice among the judged
passages, and the model's probabilities of yes read for several prompts in one batch, each the same as
read alone (tiny f32 qwen35, one sequence per prompt)."""

from __future__ import annotations

import numpy as np
import pytest

from ingest.prompt import QUOTE_REPLIES
from runtime.config import ContextConfig
from runtime.llama import Context, Model
from spec.quote import QuoteIndex, QuoteTokens
from spec.support import (
    NO_PASSAGE,
    NOT_ANSWERED,
    Judgment,
    PassageJudge,
    absent_numbers,
    judge_passages,
    lists_options,
)


def test_the_passage_with_the_highest_probability_is_chosen_and_the_threshold_decides():
    judged = Judgment("Q?", threshold=0.7).choose([0.4, 0.9, 0.9, 0.2])
    assert judged.best == 1 and judged.p_yes == pytest.approx(0.9) and judged.verdict.supported
    low = Judgment("Q?", threshold=0.95).choose([0.4, 0.9])
    assert low.best == 1 and not low.verdict.supported and low.verdict.reason == NOT_ANSWERED
    none = Judgment("Q?").choose([])
    assert none.best is None and none.p_yes is None and none.verdict.reason == NO_PASSAGE
    with pytest.raises(ValueError):
        Judgment("Q?", threshold=1.5)


class _Index:
    """The parts of a QuoteIndex that judge_passages reads."""

    numbers = frozenset({"1066", "12"})

    def reading(self, a: int, b: int) -> str:
        return f"passage {a}-{b}"


class _NoModel:
    def p_yes(self, prompts):
        raise AssertionError("the model is not asked when the number check refuses")


def test_a_number_the_document_never_has_refuses_before_the_model_is_asked():
    assert absent_numbers("In 1066 or in the 1100s, page 012?", frozenset({"1066", "12"})) == ["1100"]
    judged = judge_passages(_NoModel(), Judgment("What happened in 1100?"), _Index(), [(0, 4)], lambda p: [])
    assert judged.best is None and not judged.verdict.supported and "1100" in judged.verdict.reason


class _Judge:
    def __init__(self, p):
        self.p, self.asked = p, []

    def p_yes(self, prompts):
        self.asked = list(prompts)
        return self.p


def test_each_candidate_is_asked_in_rank_order_with_its_reading():
    judge = _Judge([0.3, 0.8])
    judged = judge_passages(judge, Judgment("When in 1066?", 0.5), _Index(), [(5, 9), (0, 4)], lambda p: p.upper())
    assert judge.asked == ["PASSAGE 5-9", "PASSAGE 0-4"] and judged.best == 1 and judged.verdict.supported


@pytest.fixture(scope="module")
def tiny(tiny_qwen35_path):
    model = Model(tiny_qwen35_path)
    yield model
    model.close()


def _context(model: Model, n_seq: int, n_batch: int) -> Context:
    config = ContextConfig(
        n_ctx=n_seq * 64, n_batch=n_batch, n_ubatch=min(64, n_batch), n_threads=1, n_threads_batch=1, n_seq_max=n_seq
    )
    return Context(model, config)


def test_prompts_judged_together_read_as_each_alone_and_the_context_is_left_empty(tiny):
    tokenize = lambda s: tiny.tokenize(s, parse_special=False)  # noqa: E731
    tokens = QuoteTokens.of(tokenize, **QUOTE_REPLIES)
    prompts = [
        np.asarray(tokenize(f" the cat sat on the mat {i}. does it answer? yes or no:" + " the" * i), np.int32)
        for i in range(3)
    ]
    together = _context(tiny, 3, 48)  # 48 rows a call: the prompts cross the calls' edges
    alone = _context(tiny, 1, 64)
    try:
        judge = PassageJudge(together, tokens)
        p = judge.p_yes(prompts)
        assert len(p) == 3 and all(0.0 <= x <= 1.0 for x in p) and judge.last == p
        assert all(together.pos_max(s) == -1 for s in range(3))  # emptied for the next question
        each = [PassageJudge(alone, tokens).p_yes([q])[0] for q in prompts]
        assert np.allclose(p, each, atol=1e-4)
        with pytest.raises(ValueError):
            judge.p_yes(prompts + prompts[:1])  # more prompts than sequences
        with pytest.raises(ValueError):
            judge.p_yes([np.ones(judge.capacity[1] + 1, np.int32)])  # longer than a sequence's share
    finally:
        together.close()
        alone.close()


def test_a_table_row_is_judged_after_its_header_row(tiny):
    text = "Contracts\n| Vendor | Ends |\n| --- | --- |\n| Nordwind | 2026-02-28 |\n"
    ids = np.asarray(tiny.tokenize(text, parse_special=False), np.int32)
    index = QuoteIndex(ids, tiny.piece)
    (row,) = [(a, b) for a, b in index.passages() if "Nordwind" in index.text(a, b)]
    reading = index.reading(*row)
    assert reading.startswith("| Vendor | Ends |") and reading.endswith("| Nordwind | 2026-02-28 |")


@pytest.mark.parametrize(
    ("question", "options"),
    [
        ("Why did she go?\nA. to paint\nB. to earn money\nC. to meet people\nD. to study", True),
        ("Warum?\n(a) Geld\n(b) Zeit", True),  # any language: the labels, not the words
        ("Which is right?\n  A) one\n  B) two\n\nAnswer with the letter only.", True),
        ("What does section A. 3 say?", False),  # one label-like line is not a choice
        ("Compare\nA. one\nC. three", False),  # not consecutive
        ("Steps:\nB. first\nC. second", False),  # not from A
        ("What is the price of the Adult return?", False),
    ],
)
def test_a_question_lists_options_by_consecutive_letters_from_a(question, options):
    assert lists_options(question) is options
