"""Answer first, then the quote (bench/answer_first.py): the answer is held until its quote is judged,
and speculative decoding stays exact under it (tiny f32 qwen35)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from bench.answer_first import AnswerThenQuote
from ingest.prompt import QUOTE_REPLIES
from spec.constraint import decide
from spec.lookup import LookupDrafter, NgramIndex
from spec.loop import AnswerParams, AnswerRun, AnswerStats
from spec.quote import QuoteIndex, QuoteParams, QuoteTokens
from spec.sampling import SamplingParams
from spec.support import Judgment
from testkit.harness import generate
from tests.spec.test_quote import DOC, GREEDY, PIECES, TOKENS, piece, row

EOG = 0
PIECES |= {0: b"<eog>", 15: b"The document does not say."}


def answering(threshold=0.5, max_answer=8) -> AnswerThenQuote:
    """An answer-first quote of DOC: the answer ends at EOG, then "Q?" is forced before ``Quote:``'s
    first row (the scaffolding), then the quote, judged with "Q?" too."""
    return AnswerThenQuote(
        QuoteIndex(DOC, piece), TOKENS, QuoteParams(threshold=threshold), piece,
        "The document does not say.", judge=lambda passage: [13], support=Judgment("", threshold),
        then_quote=[13, 14], ends=lambda t: t == EOG, max_answer=max_answer,
    )  # fmt: skip


def _answer_then_quote(q: AnswerThenQuote, answer: list[int], yes: bool) -> list:
    shown = []
    for t in answer:  # the answer: the model's free choice, held
        assert q.choose(GREEDY, row([t, 8])) == t
        shown += q.push(t)
    assert shown == [] and q.answer_ids == answer
    end = q.choose(GREEDY, row([EOG]))  # the model ends its answer: the scaffolding starts instead
    assert end == 13 and q.forced() == [14] and q.push(end) == [] and q.forced() == [14]
    q.push(14)
    for t in (6, 9, 4):  # the quote " dog ran."
        shown += q.push(q.choose(GREEDY, row([t])))
    assert shown == [] and q.forced() == [13]
    q.push(13)
    shown += q.push(q.choose(GREEDY, row([11, 12] if yes else [12, 11])))
    return shown


def test_answer_first_holds_the_answer_until_its_quote_is_judged():
    q = answering()
    shown = _answer_then_quote(q, [6, 9], yes=True)  # " dog ran"
    assert [e.part for e in shown] == ["quote", "answer"] and [e.text for e in shown] == ["the dog ran.", "dog ran"]
    assert shown[1].token_ids == (6, 9) and q.done and q.finish == "stop" and not q.refused
    q = answering()
    shown = _answer_then_quote(q, [6, 9], yes=False)
    assert [e.text for e in shown] == ["The document does not say."] and q.refused and q.reason


def test_answer_first_ends_the_answer_at_its_limit_and_an_answer_that_refuses_is_not_quoted():
    q = answering(max_answer=2)
    for t in (6, 9):
        q.push(q.choose(GREEDY, row([t])))
    assert q.choose(GREEDY, row([1])) == 13  # the third answer token is over the limit: the quote is asked
    refusing = answering()
    refusing.push(15)  # the model's answer is the refusal itself: given at once, nothing quoted
    events = refusing.push(refusing.choose(GREEDY, row([EOG])))
    assert [e.text for e in events] == ["The document does not say."] and refusing.done and refusing.ids == []


@pytest.mark.parametrize("window", [4, 16])
def test_speculative_answer_first_equals_plain(tiny_quoting, window):
    """The held answer, the quote and the judgment are the same with drafts verified as without."""
    model, ctx = tiny_quoting
    doc = model.tokenize("the cat sat on the mat. the dog of Tom ran to the hat. " * 6, parse_special=False)
    question = model.tokenize(" where did the dog run?", parse_special=False)
    prompt = np.concatenate([doc, question]).astype(np.int32)
    tokenize = lambda s: model.tokenize(s, parse_special=False)  # noqa: E731
    params = QuoteParams(max_tokens=12, threshold=0.0)
    got = []
    for w in (0, window):
        ctx.clear()
        ctx.prefill(prompt, 0)
        lookup = LookupDrafter(NgramIndex(prompt, 2, 4), model.piece, model.unspaced)
        quote = AnswerThenQuote(
            QuoteIndex(doc, model.piece), QuoteTokens.of(tokenize, **QUOTE_REPLIES), params, model.piece, "none",
            judge=lambda p: tokenize(f" Does {p} answer? Reply yes or no:"), support=Judgment("", 0.0),
            then_quote=tokenize(" Quote:"), ends=model.is_eog, max_answer=10,
        )  # fmt: skip
        run = AnswerRun(ctx, model, {"lookup": lookup}, len(prompt), AnswerStats(), time.perf_counter())
        events = list(generate(run, AnswerParams(24, SamplingParams(), w, quote=params), constraint=quote))
        got.append(([(e.part, e.token_ids) for e in events], quote.answer_ids, quote.ids, quote.p_yes))
    # The same tokens; p(yes) to float rounding (rows decoded in batches of other sizes).
    assert got[0][:3] == got[1][:3] and 1 <= len(got[0][1]) <= 10 and abs(got[0][3] - got[1][3]) < 1e-6


def test_scaffolding_that_starts_with_the_end_of_a_turn_does_not_end_the_answer():
    """In a chat layout the turn that asks for the quote starts with the end-of-turn token, which
    decide() would otherwise take for the end of the answer."""
    q = AnswerThenQuote(
        QuoteIndex(DOC, piece), TOKENS, QuoteParams(threshold=None), piece, "no",
        then_quote=[EOG, 13, 14], ends=lambda t: t == EOG, max_answer=8,
    )  # fmt: skip
    q.push(q.choose(GREEDY, row([6])))
    tokens, took, events, finish = decide(q, GREEDY, [], row([EOG]), lambda t: t == EOG)
    assert tokens == [EOG] and took == 1 and events == [] and finish is None
    assert q.forced() == [13, 14] and q.phase == "quoting" and q.answer_ids == [6]
