"""Whether a quote supports an answer, judged by the model (spec/quote.py asks it): after its quote the
model reads the passage the quote is in and the question again and is asked whether the passage answers
it; its probability of replying yes (against no) is compared with a threshold. Before that, one string
check: a number of two digits or more that the question names and the document never does cannot be
answered from it ("in the 1100s" of a document that never writes 1100).

The threshold was chosen on SQuAD 2.0's "Normans" article (crowd-written questions, half of them
written to look answerable and not be) and checked on sets written elsewhere and on ours
(bench/results/quality.md). Nothing here depends on the words of a language: the model judges a German
passage, a French one or a table row (read after its header row) the same way, and digits are digits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from spec.quote import THRESHOLD, QuoteConstraint, Verdict

_NUMBER = re.compile(r"\d{2,}")


def absent_numbers(question: str, numbers: frozenset[str]) -> list[str]:
    """The numbers of two digits or more in ``question`` that are not among the document's ``numbers``
    (spec/quote.py ``QuoteIndex.numbers``; leading zeros ignored), in question order.

    >>> absent_numbers("What happened in the 1100s and in 1066?", frozenset({"1066", "11"}))
    ['1100']
    """
    return [n for n in (str(int(m)) for m in _NUMBER.findall(question)) if n not in numbers]


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
        if self.numbers and (missing := absent_numbers(self.question, quote.index.numbers)):
            return Verdict(False, f"The document never gives {', '.join(missing)}, which the question names.")
        if p_yes >= self.threshold:
            return Verdict(True)
        return Verdict(False, "The passage that came closest does not answer the question.")
