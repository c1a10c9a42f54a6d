"""Answer first, then the quote it rests on, then the judgment: a quote-first variant measured in
bench/results/quality.md (``python -m bench.answer_modes --modes quote:a=1``) and not served: on held-out
SQuAD 2.0 questions it kept the direct answer's right answers but the judgment separated poorly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ingest.prompt import QUOTE_LEAD, PromptLayout
from runtime.llama import Model
from spec.events import TokenEvent
from spec.quote import DONE, QUOTING, QuoteConstraint, Verdict
from spec.sampling import Sampler

ANSWERING = "answering"

#: After the direct answer, the turn that asks for the quote it rests on.
QUOTE_AFTER_ANSWER = (
    "Copy, word for word, the sentence of the document that your answer rests on. If no sentence of the "
    'document gives it, write "none".'
)


def quote_after(layout: PromptLayout, tok: Model) -> np.ndarray:
    """Token ids decoded after an answer-first answer (where the model ended it): a turn asking for the
    sentence the answer rests on, then ``Quote:`` (:data:`QUOTE_AFTER_ANSWER`). int32 shape [n]."""
    if layout.next_turn is not None and layout.kind == "chat":
        text = layout.next_turn + QUOTE_AFTER_ANSWER + layout.tail + QUOTE_LEAD
    else:
        text = "\n" + QUOTE_AFTER_ANSWER + "\n" + QUOTE_LEAD
    return tok.tokenize(text, parse_special=True).astype(np.int32)


class AnswerThenQuote(QuoteConstraint):
    """Answer first, then the quote it rests on, then the judgment (bench/results/quality.md: the answer
    written after a quote was right half as often as the direct one on held-out SQuAD questions).

    The answer is the model's own free choice, token for token the direct answer (the question's suffix
    is the direct one), and is held, not shown: where the model ends it (``ends``: an end-of-generation
    token; or at ``max_answer`` tokens), ``then_quote`` is forced (a turn asking for the sentence the
    answer rests on, then ``Quote:``), the quote is written as in :class:`QuoteConstraint` (its start
    among the passages ``locate`` ranks best for the question and the answer together; None: where
    ``region`` says), and judged. A quote judged to answer the question shows the quote, then the held
    answer, and ends the answer; otherwise the answer is the refusal. An answer that is the refusal
    itself (``refusal``) is given at once, unquoted.
    """

    def __init__(
        self,
        *args,
        then_quote: Sequence[int],
        ends: Callable[[int], bool],
        max_answer: int,
        locate: Callable[[str], np.ndarray | None] | None = None,
        **kwargs,
    ) -> None:
        super().__init__(*args, answer=(), **kwargs)
        if not len(then_quote):
            raise ValueError("an answer-first quote needs the scaffolding that asks for the quote")
        self.phase = ANSWERING
        self._then = [int(t) for t in then_quote]
        self._ends, self._max_answer, self._locate = ends, max(1, max_answer), locate
        self._ending = False  # the answer's end was chosen: the next token pushed is the scaffolding's first
        self.answer_ids: list[int] = []

    def choose(self, sampler: Sampler, row: np.ndarray) -> int:
        if self.phase != ANSWERING:
            return super().choose(sampler, row)
        token = sampler.choose(row)
        if self._ends(token) or len(self.answer_ids) >= self._max_answer:
            self._ending, self._forced = True, self._then[1:]  # forced already: the first may end a turn
            return self._then[0]
        return token

    def push(self, token: int) -> list[TokenEvent]:
        if self.phase != ANSWERING:
            return super().push(token)
        if not self._ending:
            self.answer_ids.append(int(token))
            return []
        text = self.answer_text()
        if not text or text.rstrip(".") == self.refusal.rstrip("."):
            self.verdict, self._forced = Verdict(False, ""), []
            return self._refuse()
        if self._locate is not None:
            self.region = self._locate(text)
        self.phase = QUOTING
        return []

    def answer_text(self) -> str:
        """The held answer (UTF-8, invalid bytes replaced, surrounding whitespace stripped)."""
        return b"".join(self.piece(t) for t in self.answer_ids).decode("utf-8", errors="replace").strip()

    def _stands(self) -> list[TokenEvent]:
        self.phase, self.finish = DONE, "stop"
        quote = TokenEvent(self.sentence_text() or self.quote_text(), tuple(self.ids), 0, part="quote")
        return [quote, TokenEvent(self.answer_text(), tuple(self.answer_ids), 0)]
