"""Whether a passage answers a question, judged by the model. Two ways of asking it:

* **Before the quote** (served, :class:`PassageJudge`): each of the passages that best match the
  question (BM25, store/passages.py) is read with the question in a short prompt of its own, in a small
  context of its own, all of them in one batch; the model's probability of replying yes (against no)
  is each passage's support. The quote may start only in the passage with the highest one, and only
  when it reaches the threshold; otherwise the answer is refused before anything is quoted.
* **After the quote** (:class:`Judgment` called by spec/quote.py with ``judge``; measured in bench/,
  not served): the model reads the passage its quote is in, restated after the quote.

Before either, one string check: a number of two digits or more that the question names and the
document never does cannot be answered from it ("in the 1100s" of a document that never writes 1100).

The threshold was chosen on sets written elsewhere, SQuAD 2.0's "Normans" article (crowd-written
questions, half of them written to look answerable and not be) and bench/real_sets.py's real files
(spec/quote.py ``THRESHOLD``), and checked on ours (bench/results/quality.md). Nothing here depends
on the words of a language: the model judges a German passage, a French one or a table row (read
after its header row) the same way, and digits are digits.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from runtime.context import Context
from spec.quote import THRESHOLD, Judged, QuoteConstraint, QuoteIndex, QuoteTokens, Verdict, mass

_NUMBER = re.compile(r"\d{2,}")
#: A line that labels an option: "A. ...", "b) ...", "(C) ..." (one Latin letter, its closer, text).
_OPTION = re.compile(r"^\s*\(?([A-Za-z])[.)]\s+\S", re.MULTILINE)


def lists_options(question: str) -> bool:
    r"""Whether ``question`` gives its own options, one per line, labelled by consecutive letters from A
    ("A. ...", "B. ...", at least two; "(a) ...", "b) ..." alike): a choice among them, which "the
    document does not say" is not one of. Such a question is answered directly, not quote-first
    (server/api/answering.py ``answer_mode``): its best passage rarely answers a question that holds four
    options (TPO's lectures, bench/results/quality.md), and the question's structure, not a word of it,
    says so.

    >>> lists_options("Why did she go?\nA. to paint\nB. to earn money\nC. to meet people")
    True
    >>> lists_options("What does section A. 3 say?"), lists_options("Plan A. then B.")
    (False, False)
    """
    letters = [m.group(1).upper() for m in _OPTION.finditer(question)]
    if "A" not in letters:
        return False
    run = letters[letters.index("A") :]
    return len(run) >= 2 and run == [chr(ord("A") + i) for i in range(len(run))]


def absent_numbers(question: str, numbers: frozenset[str]) -> list[str]:
    """The numbers of two digits or more in ``question`` that are not among the document's ``numbers``
    (spec/quote.py ``QuoteIndex.numbers``; leading zeros ignored), in question order.

    >>> absent_numbers("What happened in the 1100s and in 1066?", frozenset({"1066", "11"}))
    ['1100']
    """
    return [n for n in (str(int(m)) for m in _NUMBER.findall(question)) if n not in numbers]


#: Why an answer is refused when no passage shares a word with the question, or none is judged to answer.
NO_PASSAGE = "No passage of the document shares a word with the question."
NOT_ANSWERED = "The passages closest to the question do not answer it."


@dataclass(frozen=True, slots=True)
class Judgment:
    """Decides whether a quote answers ``question``: no when the question names a number the document
    never has (``numbers``; off: not checked), else from the model's probability of yes (``p_yes``,
    against no) and ``threshold`` in [0, 1] (0 accepts every quote that is in the document)."""

    question: str
    threshold: float = THRESHOLD
    numbers: bool = True

    def __post_init__(self) -> None:
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"support threshold must be in [0, 1], got {self.threshold}")

    def __call__(self, quote: QuoteConstraint, p_yes: float) -> Verdict:
        """The verdict on a quote judged after it was written (``p_yes`` of its passage)."""
        if (missing := self.missing(quote.index)) is not None:
            return missing
        if p_yes >= self.threshold:
            return Verdict(True)
        return Verdict(False, "The passage that came closest does not answer the question.", "none")

    def missing(self, index: QuoteIndex) -> Verdict | None:
        """The refusal when the question names a number ``index``'s document never has; else None."""
        if self.numbers and (missing := absent_numbers(self.question, index.numbers)):
            return Verdict(False, f"The document never gives {', '.join(missing)}, which the question names.", "number")
        return None

    def choose(self, p_yes: Sequence[float]) -> Judged:
        """The passage to quote from, given each candidate's probability of yes (best BM25 rank first):
        the one with the highest (the earlier on a tie), supported when it reaches the threshold."""
        if not len(p_yes):
            return Judged(None, None, Verdict(False, NO_PASSAGE, "no_passage"))
        best = int(np.argmax(p_yes))
        p = float(p_yes[best])
        return Judged(best, p, Verdict(True) if p >= self.threshold else Verdict(False, NOT_ANSWERED, "not_answered"))


def judge_passages(
    judge: PassageJudge,
    support: Judgment,
    index: QuoteIndex,
    spans: Sequence[tuple[int, int]],
    prompt: Callable[[str], np.ndarray],
) -> Judged:
    """Judge a question's candidate passages ``spans`` (token positions of ``index``, best BM25 rank
    first) before its quote: the number check first (no model call when it refuses), then each passage
    as read with its table's header row (``QuoteIndex.reading``), asked through ``prompt`` (passage
    text -> token ids, ingest/prompt.py ``passage_judge``), all in one batch; ``support`` chooses."""
    if (missing := support.missing(index)) is not None:
        return Judged(None, None, missing)
    if not spans:
        return support.choose([])
    return support.choose(judge.p_yes([prompt(index.reading(a, b)) for a, b in spans]))


class PassageJudge:
    """Reads prompts that each ask whether a passage answers a question (ingest/prompt.py
    ``passage_judge``) in ``ctx``, a small context of their own (one sequence per prompt, ``n_seq_max``
    of them at most, all in one batch where ``n_batch`` allows), and returns the model's probability of
    yes against no for each (``tokens``: spec/quote.py QuoteTokens). The context is left empty.

    Cost: one prefill of the prompts' tokens together (a hundred or so each), once per question, not per
    step; nothing grows with the document's length."""

    def __init__(self, ctx: Context, tokens: QuoteTokens) -> None:
        self.ctx, self.tokens = ctx, tokens
        self.last: list[float] = []  # the probabilities of the last call (bench/ records them)

    @property
    def capacity(self) -> tuple[int, int]:
        """(prompts, tokens per prompt) the context holds."""
        n_seq = max(1, int(self.ctx.config.n_seq_max))
        return n_seq, self.ctx.n_ctx // n_seq

    def p_yes(self, prompts: Sequence[np.ndarray]) -> list[float]:
        """The probability of yes for each prompt (int32 token ids, each at most ``capacity[1]`` long;
        at most ``capacity[0]`` prompts). Raises ValueError beyond those, DecodeError from llama.cpp."""
        n_seq, n_each = self.capacity
        if len(prompts) > n_seq or any(not 0 < len(p) <= n_each for p in prompts):
            raise ValueError(f"a passage judgment takes 1..{n_seq} prompts of 1..{n_each} tokens")
        if not prompts:
            return []
        tokens = np.concatenate(prompts).astype(np.int32)
        pos = np.concatenate([np.arange(len(p), dtype=np.int32) for p in prompts])
        seq = np.concatenate([np.full(len(p), i, np.int32) for i, p in enumerate(prompts)])
        last = np.zeros(len(tokens), np.int8)
        last[np.cumsum([len(p) for p in prompts]) - 1] = 1
        out: list[float] = []
        ctx, n_batch = self.ctx, self.ctx.n_batch
        ctx.clear()
        try:
            for a in range(0, len(tokens), n_batch):
                b = min(len(tokens), a + n_batch)
                if ctx.decode_rows(tokens[a:b], pos[a:b], seq[a:b], last[a:b]):
                    for row in ctx.logits():
                        yes, no = mass(row, self.tokens.yes), mass(row, self.tokens.no)
                        out.append(yes / (yes + no) if yes + no > 0 else 0.0)
        finally:
            ctx.clear()
        self.last = out
        return out
