"""A question's quote-first constraint (spec/quote.py), made from what the engine keeps of its document:
the document's quote index and its passages ranked by BM25 (store/passages.py), built at the
document's first quote-first answer and kept as long as the document's cache entry (a HotDoc, the key
of a weak table written only on the engine thread)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from weakref import WeakKeyDictionary

import numpy as np

from ingest.prompt import NOT_SAID, passage_judge
from server.engine.jobs import AnswerJob
from spec.loop import AnswerParams
from spec.quote import PASSAGES, Judged, QuoteConstraint, QuoteIndex, QuoteParams, Verdict
from spec.support import Judgment, PassageJudge, judge_passages
from store.passages import PassageRanks, quoted


@dataclass(slots=True)
class DocumentQuotes:
    """Where a quote of one document (or segment) may come from: ``index`` over its document tokens,
    which start at prefix position ``at``; its passages (token spans of ``index``) and their BM25 ranks."""

    index: QuoteIndex
    at: int
    passages: list[tuple[int, int]]
    ranks: PassageRanks

    def region(self, question: str, k: int | None) -> np.ndarray | None:
        """The token positions of the ``k`` passages that best match ``question`` (None: anywhere;
        empty when no passage shares a word with it: only "none" can start the quote)."""
        if k is None:
            return None
        return self.index.region([self.passages[i] for i in sorted(self.ranks.best(question, k))])

    def pointed(self, question: str, k: int | None) -> list[tuple[int, int]]:
        """:func:`pointed` of this document's passages."""
        return pointed(question, self.ranks, self.passages, k)


Spans = list[tuple[int, int]]  # token spans [a, b) of a quote index


def pointed(question: str, ranks: PassageRanks, passages: Spans, k: int | None) -> Spans:
    """The ``passages`` (token spans, at most ``k``, best BM25 match first; ``ranks``: theirs) holding a
    text the question quotes (store/passages.py ``quoted``: in quotation marks, four words or more); []
    when it quotes none that the document has."""
    found: dict[int, None] = {}
    for text in quoted(question):
        found.update(dict.fromkeys(ranks.holding(text, k or PASSAGES)))
    return [passages[i] for i in list(found)[: k or PASSAGES]]


def pointed_constraint(common: tuple, answer, spans: Spans, index: QuoteIndex) -> QuoteConstraint:
    """The constraint of a question that quotes the document (:func:`pointed`): its quote starts in the
    ``spans`` holding the question's quote, unjudged (``common``: QuoteConstraint's first five arguments;
    ``answer``: the tokens forced before the answer)."""
    return QuoteConstraint(*common, answer=answer, region=index.region(spans), judged=POINTED, closest=spans[0])


#: The question pointed at the passages by quoting them: they stand, with no probability asked.
POINTED = Judged(0, None, Verdict(True))


#: HotDoc -> its DocumentQuotes; an entry goes with its cache entry (engine thread only).
_BUILT: WeakKeyDictionary = WeakKeyDictionary()


def document_quotes(hot, loaded) -> DocumentQuotes:
    """``hot``'s DocumentQuotes (``hot``: a server/engine/hot.HotDoc), built at its first quote-first
    answer: its document's tokens, located in the prefix by the prompt layout (the whole prefix past the
    head for one the layout does not frame: a document prefilled before a change of wording), and its
    passages ranked as the judgment reads them (``QuoteIndex.reading``: after their section's heading and
    table's header row, so "Where can I eat fish?" finds the sentences under "# Where to eat"). O(n_doc)
    once."""
    if (quotes := _BUILT.get(hot)) is None:
        span = loaded.layout.document_span(loaded.model, hot.prefix)
        n_head, n_doc = span if span is not None else (loaded.layout.n_head(loaded.model), len(hot.prefix))
        index = QuoteIndex(hot.prefix[n_head : n_head + n_doc], loaded.model.piece)
        passages = index.passages()
        quotes = DocumentQuotes(index, n_head, passages, PassageRanks([index.reading(a, b) for a, b in passages]))
        _BUILT[hot] = quotes
    return quotes


def document_at(hot) -> int:
    """The prefix position where ``hot``'s quote index starts (after its first quote-first answer)."""
    return _BUILT[hot].at


def answer_params(params: AnswerParams, constraint: QuoteConstraint | None) -> AnswerParams:
    """``params`` for the answer after ``constraint``'s quote: after passages judged before the quote,
    the refusal sentence is a stop string (held back while it may be one, never shown), so an answer
    that is only the model's refusal after a quote judged to answer leaves the quote as the answer,
    never a quote then a bare refusal (refusing is the judgment's; issue 48)."""
    stops = params.stops or ()
    if constraint is None or not constraint.judged_first or NOT_SAID in stops:
        return params
    return replace(params, stops=(*stops, NOT_SAID))


def judged_after(params: QuoteParams, loaded) -> bool:
    """A judged quote-first answer is judged after its quote, in its own turn (measured in bench/, the
    way left where no judging context could be made or the quote may start anywhere), not before it."""
    return bool(params.threshold) and (params.passages is None or loaded.contexts.judging is None)


def constraint(job: AnswerJob, hot, loaded) -> QuoteConstraint | None:
    """The quote-first constraint of ``job`` (None when it is answered directly). Judged (the served
    way): the passages that best match the question are judged first, in the judging context, and the
    quote may start only in the one chosen; an answer refused there quotes nothing. At threshold 0
    (every quote stands) nothing is judged, and the quote may start in any of those passages. A
    question that quotes the document (:meth:`DocumentQuotes.pointed`) is quoted from the passages
    holding its quote, unjudged, either way."""
    params = job.params.quote
    if params is None:
        return None
    quotes = document_quotes(hot, loaded)
    model, layout, judging = loaded.model, loaded.layout, loaded.contexts.judging
    common = (quotes.index, loaded.quote_tokens, params, model.piece, NOT_SAID)
    if spans := quotes.pointed(job.question, params.passages):  # the question quotes the document
        return pointed_constraint(common, layout.quote_answer(model, judged=False), spans, quotes.index)
    if not params.threshold:  # None or 0: every quote stands, unasked
        region = quotes.region(job.question, params.passages)
        return QuoteConstraint(*common, answer=layout.quote_answer(model, judged=False), region=region)
    if not judged_after(params, loaded):
        spans = [quotes.passages[i] for i in quotes.ranks.best(job.question, params.passages)]
        judge = PassageJudge(judging, loaded.quote_tokens)
        judged = judge_passages(
            judge,
            Judgment(job.question, params.threshold),
            quotes.index,
            spans,
            lambda passage: passage_judge(model, job.question, passage, limit=judge.capacity[1]),
        )
        best = spans[judged.best] if judged.best is not None else None
        region = quotes.index.region([best] if best is not None and judged.verdict.supported else [])
        answer = layout.quote_answer(model, judged=False)
        return QuoteConstraint(*common, answer=answer, region=region, judged=judged, closest=best)
    return QuoteConstraint(
        *common,
        answer=layout.quote_answer(model, judged=params.judged),
        region=quotes.region(job.question, params.passages),
        judge=(lambda passage: layout.quote_judge(model, job.question, passage)) if params.judged else None,
        support=Judgment(job.question, params.threshold) if params.judged else None,
    )
