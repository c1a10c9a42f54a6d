"""A question's quote-first constraint and the answer after it (server/engine/quotes.py)."""

from __future__ import annotations

import numpy as np

from ingest.prompt import NOT_SAID
from server.engine.quotes import answer_params
from spec.loop import AnswerParams
from spec.quote import Judged, QuoteConstraint, QuoteIndex, QuoteParams, Verdict
from spec.sampling import SamplingParams
from spec.text import TextStream
from tests.spec.test_quote import DOC, TOKENS, piece


def _judged(supported: bool | None) -> QuoteConstraint:
    judged = None if supported is None else Judged(0, 0.9 if supported else 0.3, Verdict(supported, "why"))
    return QuoteConstraint(
        QuoteIndex(DOC, piece), TOKENS, QuoteParams(threshold=0.5), piece, NOT_SAID, answer=[14],
        region=np.array([4, 5, 6, 7], np.int64), judged=judged,
    )  # fmt: skip


def test_after_a_quote_judged_to_answer_the_models_refusal_is_never_shown():
    """Issue 48: the model answered a quote request ("Copy, word for word, the paragraph...") with the
    quote, then "The document does not say.". After passages judged before the quote, the refusal is a
    stop string: held back while it may be one, dropped when it is, so the quote is the answer."""
    params = AnswerParams(64, SamplingParams(), None, stops=("\nQuestion:",))
    stood = answer_params(params, _judged(True))
    assert stood.stops == ("\nQuestion:", NOT_SAID) and answer_params(stood, _judged(True)) == stood
    assert answer_params(params, None) is params  # answered directly
    assert answer_params(AnswerParams(64, SamplingParams(), None), _judged(True)).stops == (NOT_SAID,)
    stream = TextStream(stood.stops)
    shown = "".join(stream.push(p.encode()) for p in (" The", " document", " does", " not", " say", "."))
    assert shown == "" and stream.stopped  # nothing of the refusal reached the client
    stream = TextStream(stood.stops)
    shown = "".join(stream.push(p.encode()) for p in (" The", " document", " names", " 10 Euro."))
    assert shown + stream.flush() == "The document names 10 Euro."  # held only while it may be the refusal
