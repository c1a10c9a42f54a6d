"""Quote-first answers (spec/quote.py): the quote is a span of the document by construction; the
model's judgment of it (its probability of yes) refuses or lets the answer follow; the scaffolding is
forced; speculative decoding stays exact under the constraint (tiny f32 qwen35: a speculative run emits
what a plain run emits)."""

from __future__ import annotations

import codecs
import random
import re
import time

import numpy as np
import pytest

from ingest.prompt import QUOTE_REPLIES
from spec.lookup import LookupDrafter, NgramIndex
from spec.loop import AnswerParams, AnswerRun, AnswerStats
from spec.quote import Judged, QuoteConstraint, QuoteIndex, QuoteParams, QuoteTokens, Verdict, word_key
from spec.sampling import Sampler, SamplingParams
from spec.support import Judgment
from testkit.harness import generate

PIECES = {1: b" the", 2: b" cat", 3: b" sat", 4: b".", 5: b"\n", 6: b" dog", 7: b"The", 8: b" none", 9: b" ran"}
PIECES |= {10: b".\n", 11: b" yes", 12: b" no", 13: b"Q?", 14: b"A:"}
DOC = np.array([7, 2, 3, 4, 1, 6, 9, 4, 1, 2, 9, 10], np.int32)  # "The cat sat. the dog ran. the cat ran.\n"
TOKENS = QuoteTokens(
    breaks=np.array([5], np.int64), none=np.array([8], np.int64), yes=np.array([11], np.int64),
    no=np.array([12], np.int64),
)  # fmt: skip


def piece(t: int) -> bytes:
    return PIECES[int(t)]


def quoting(max_tokens=64, threshold=None) -> QuoteConstraint:
    """A quote of DOC; judged (asked "Q?") when ``threshold`` is given; "A:" forced before the answer."""
    params = QuoteParams(max_tokens=max_tokens, threshold=threshold)
    judged = threshold is not None
    return QuoteConstraint(
        QuoteIndex(DOC, piece), TOKENS, params, piece, "The document does not say.", answer=[14],
        judge=(lambda passage: [13]) if judged else None, support=Judgment("", threshold) if judged else None,
    )  # fmt: skip


def row(prefer: list[int], n_vocab: int = 15) -> np.ndarray:
    """Logits ranking ``prefer`` first, in that order."""
    r = np.zeros(n_vocab, np.float32)
    for rank, t in enumerate(prefer):
        r[t] = 10.0 - rank
    return r


GREEDY = Sampler(SamplingParams())


def test_index_positions_and_case_insensitive_starts():
    idx = QuoteIndex(DOC, piece)
    assert idx.positions(2).tolist() == [1, 9] and idx.positions(8).tolist() == []
    # A quote may start "the" where the document says "The" or " the": every such position.
    assert idx.starts(1).tolist() == [0, 4, 8] == idx.starts(7).tolist()
    assert word_key(b" The") == word_key(b"the ")


def test_constrained_quote_follows_the_document_and_ends_at_a_line_break():
    q = quoting()
    # After "the" the model prefers "sat", which follows no "the" of the document: its next choice
    # that does ("cat") is taken; after "the cat" it prefers "dog" (no such span), then "sat"; then
    # it ends the quote. Unjudged, the quote stands: it is shown, and "A:" is forced before the answer.
    shown = []
    for prefer in ([1], [3, 2], [6, 3], [5]):
        shown += q.push(q.choose(GREEDY, row(prefer)))
    assert q.ids == [1, 2, 3] and not q.refused and q.span == (0, 3)  # "The cat sat": tokens 0..2
    assert q.quote_text() == "the cat sat" and [e.part for e in shown] == ["quote"]
    assert shown[0].text == "The cat sat." and q.forced() == [14] and not q.done
    q.push(14)
    assert q.done and q.finish is None


def test_first_token_free_when_it_starts_a_document_word_and_none_refuses():
    q = quoting()
    assert q.choose(GREEDY, row([8])) == 8  # " none" as the first word: no passage answers
    events = q.push(8)
    assert q.none and q.refused and q.finish == "stop" and q.done
    assert [e.text for e in events] == ["The document does not say."] and "No passage" in q.reason
    q = quoting()
    assert q.allowed().tolist() == [1, 2, 3, 4, 6, 7, 8, 9, 10]  # no bare line break as a first token
    # A first choice that starts no word of the document: the likeliest document token instead, never
    # "none" unless it was the model's own first choice.
    assert q.choose(GREEDY, row([13, 8, 6])) == 6


def test_quote_ends_with_the_sentence_and_at_its_length_limit():
    q = quoting()
    for t in (6, 9, 4):  # " dog ran." then the document goes on with " the": a sentence ended
        q.push(q.choose(GREEDY, row([t])))
    assert q.ids == [6, 9, 4] and q.span == (5, 8) and q.forced() == [14]
    q = quoting(max_tokens=2)
    assert q.push(1) == [] and q.forced() == []
    q.push(2)
    assert q.ids == [1, 2] and q.forced() == [14]


def test_a_token_holding_the_break_ends_the_quote_and_keeps_its_head():
    q = quoting()
    for t in (2, 9, 10):  # " cat ran.\n": the last token is the document's, with the break
        q.push(t)
    assert q.span == (9, 12) and q.quote_text() == "cat ran." and q.forced() == [14]


@pytest.mark.parametrize("threshold", [0.5, 0.9])
def test_the_judgment_refuses_below_its_threshold_and_otherwise_lets_the_answer_follow(threshold):
    q = quoting(threshold=threshold)
    for t in (6, 9, 4):
        assert q.push(q.choose(GREEDY, row([t]))) == []  # judged first: nothing shown yet
    assert q.forced() == [13] and not q.done
    q.push(13)  # the judgment's question, forced
    logits = np.zeros(15, np.float32)
    logits[11], logits[12] = 1.0, 0.0  # p(yes) = e / (e + 1) = 0.73
    reply = q.choose(GREEDY, logits)
    assert abs(q.p_yes - 0.731) < 1e-3
    events = q.push(reply)
    if threshold == 0.5:  # yes: the quote is shown, "A:" is forced, then the answer is free
        assert reply == 11 and not q.refused and [e.part for e in events] == ["quote"]
        assert events[0].text == "the dog ran." and q.forced() == [14]
        q.push(14)
        assert q.done and q.finish is None
    else:  # no: the refusal, with a reason; the passage is still known (q.span) but supports nothing
        assert reply == 12 and q.refused and q.finish == "stop" and q.done
        assert [e.text for e in events] == ["The document does not say."] and q.reason
        assert q.span == (5, 8)


def test_passages_judged_before_the_quote_refuse_at_once_or_bound_where_it_starts():
    """Served: the passages are judged before the quote (spec/support.py). A refusal is the answer at
    once, nothing quoted; a supported passage is where the quote starts, and it stands with no turn after
    it, "A:" forced."""

    def judged_quote(verdict: Verdict, region: list[int]) -> QuoteConstraint:
        judged = Judged(0, 0.4 if not verdict.supported else 0.9, verdict)
        return QuoteConstraint(
            QuoteIndex(DOC, piece), TOKENS, QuoteParams(threshold=0.5), piece, "The document does not say.",
            answer=[14], region=np.array(region, np.int64), judged=judged, closest=(4, 8),
        )  # fmt: skip

    q = judged_quote(Verdict(False, "The passages closest to the question do not answer it."), [])
    assert q.refused and q.p_yes == 0.4
    token = q.choose(GREEDY, row([0, 1]))
    assert token == 8  # not the model's choice (it might end the answer before the refusal is said)
    events = q.push(token)
    assert [e.text for e in events] == ["The document does not say."] and q.done and q.finish == "stop"
    assert q.ids == [] and q.span is None and q.reason.startswith("The passages closest")
    assert q.sentence_text() == "the dog ran."  # named as the passage that came closest, not quoted
    q = judged_quote(Verdict(True), [4, 5, 6, 7])  # " the dog ran.": only there may the quote start
    assert 8 not in q.allowed()  # judged to answer: the quote may not be "none" (the judgment refuses)
    assert q.choose(GREEDY, row([8, 2, 7, 1])) == 1  # not " none", not " cat" (outside the passage): " the"
    shown = []
    for t in (1, 6, 9, 4):
        shown += q.push(t)
    assert q.span == (4, 8) and not q.refused and q.p_yes == 0.9
    assert [e.part for e in shown] == ["quote"] and q.forced() == [14]


def test_forced_tokens_longer_than_a_step_are_never_chosen_over():
    """A judgment turn (passage and question restated) is longer than a verify window: the step holds
    only part of it, and the row after that part must take the next forced token, not a choice (the
    judgment's reply chosen there replaced a token of the turn, and the turn read by the model was
    garbled; the answer after it wrote "yes-7948" for "TD-7948")."""
    from spec.constraint import decide

    params = QuoteParams(max_tokens=64, threshold=0.5)
    turn = [13, 1, 2, 13, 1, 6, 13]
    q = QuoteConstraint(
        QuoteIndex(DOC, piece), TOKENS, params, piece, "The document does not say.", answer=[14, 14, 14],
        judge=lambda passage: list(turn), support=Judgment("", 0.5),
    )  # fmt: skip
    for t in (6, 9, 4):
        q.push(q.choose(GREEDY, row([t])))
    assert q.forced() == turn
    yes = row([11, 12])
    tokens, n_took, _, finish = decide(q, GREEDY, turn[:3], yes, lambda t: False)  # a step of 3 forced rows
    assert tokens == turn[:4] and n_took == 4 and finish is None and q.p_yes is None
    tokens, n_took, _, _ = decide(q, GREEDY, turn[4:], yes, lambda t: False)  # the rest, then the reply
    assert tokens == [*turn[4:], 11] and n_took == 4 and q.p_yes > 0.5
    tokens, _, _, _ = decide(q, GREEDY, [14], row([2]), lambda t: False)  # part of the answer's scaffolding
    assert tokens == [14, 14] and not q.done
    tokens, n_took, _, _ = decide(q, GREEDY, [14], row([2]), lambda t: False)
    assert tokens == [14, 2] and n_took == 1 and q.done  # then the answer's first token is the model's


def _doc(text: str) -> tuple[np.ndarray, dict[int, bytes]]:
    """``text`` as tokens of one word (with its leading space) or one line break each."""
    pieces = [p.encode() for p in re.findall(r"\n| ?[^\s]+", text)]
    ids = {p: i for i, p in enumerate(dict.fromkeys(pieces), start=100)}
    return np.array([ids[p] for p in pieces], np.int32), {i: p for p, i in ids.items()}


def test_a_table_row_is_read_after_its_header_row():
    """A row alone does not say which value is the contract's end: the judgment reads the row after the
    table's header row."""
    text = (
        "# Contracts\n| 1 | Vendor (A) | End (B) |\n| --- | --- | --- |\n| 2 | Nordwind | 2026-02-28 |\n"
        "| 3 | Datenwerk | 2027-06-30 |\nAfter.\n"
    )
    doc, pieces = _doc(text)
    index = QuoteIndex(doc, pieces.get)
    at = {p.decode().strip(): i for i, p in ((i, pieces[int(t)]) for i, t in enumerate(doc))}
    header = index.header(at["Datenwerk"])
    assert header is not None and index.text(*header).strip() == "| 1 | Vendor (A) | End (B) |"
    assert index.header(at["Vendor"]) is None  # the header row itself
    assert index.header(at["After."]) is None and index.header(at["Contracts"]) is None
    q = QuoteConstraint(index, TOKENS, QuoteParams(threshold=None), pieces.get, "no", answer=[])
    for t in doc[at["Nordwind"] - 2 : at["2026-02-28"] + 3].tolist():  # "| 2 | Nordwind | 2026-02-28 |\n"
        q.push(t)
    assert q.passage() == "# Contracts\n| 1 | Vendor (A) | End (B) |\n| 2 | Nordwind | 2026-02-28 |"


def test_a_sentence_is_read_after_its_sections_heading():
    """The README's sample, in the new-user trial: "How long does the crossing to Morrow take?" was judged
    to be answered by the heading "# The ferry to Morrow", whose sentence "It takes 35 minutes." does not
    name Morrow. A sentence is read after its section's heading, as a cell after its header row."""
    text = "Intro line.\n# Ferries to Morrow\nIt takes 35 minutes.\n## Museum\nOpen daily.\n| 1 | Day |\n| 2 | Mon |\n"
    doc, pieces = _doc(text)
    index = QuoteIndex(doc, pieces.get)
    read = {index.text(a, b).strip(): index.reading(a, b) for a, b in index.passages()}
    assert read["It takes 35 minutes."] == "# Ferries to Morrow\nIt takes 35 minutes."
    assert "# Ferries to Morrow" not in read and "## Museum" not in read  # a heading is no passage of its own
    assert read["Intro line."] == "Intro line."  # before any heading
    assert read["Open daily."] == "## Museum\nOpen daily."  # the nearest heading, whatever its level
    assert read["| 2 | Mon |"] == "## Museum\n| 1 | Day |\n| 2 | Mon |"  # the heading, then the header row


def test_a_comment_in_fenced_code_is_no_heading():
    """``# `` in fenced code starts a comment (a shell prompt, Python), not a section."""
    text = "# Setup\nRun this.\n```\n# install first\napt-get install docqa\n```\nThen ask.\n"
    doc, pieces = _doc(text)
    index = QuoteIndex(doc, pieces.get)
    read = {index.text(a, b).strip(): index.reading(a, b) for a, b in index.passages()}
    assert read["# install first"] == "# Setup\n# install first"  # a passage, under the real heading
    assert read["apt-get install docqa"] == "# Setup\napt-get install docqa"
    assert read["Then ask."] == "# Setup\nThen ask."


def test_passages_are_sentences_and_table_rows_and_a_region_bounds_the_start():
    text = (
        "# Ferries\nThe first ferry leaves at 07:40. It takes 35 minutes!\n\n| 1 | Day (A) | Closed (B) |\n"
        "| 2 | Museum | Monday |\n"
    )
    doc, pieces = _doc(text)
    index = QuoteIndex(doc, pieces.get)
    spans = index.passages()
    assert [index.text(a, b) for a, b in spans] == [
        "The first ferry leaves at 07:40.", " It takes 35 minutes!\n\n",
        "| 1 | Day (A) | Closed (B) |\n", "| 2 | Museum | Monday |\n",
    ]  # fmt: skip
    region = index.region([spans[1]])
    assert region.tolist() == list(range(*spans[1]))
    tokens = QuoteTokens(breaks=np.array([pieces_id(pieces, "\n")], np.int64), none=np.empty(0, np.int64))
    q = QuoteConstraint(index, tokens, QuoteParams(threshold=None), pieces.get, "no", answer=[], region=region)
    the, it = pieces_id(pieces, "The"), pieces_id(pieces, " It")
    # The model's first choice, "The", starts no word of the region: the likeliest token that does is taken.
    assert q.choose(GREEDY, row([the, it], n_vocab=200)) == it
    assert q.allowed().tolist() == sorted(set(doc[region].tolist()) - {pieces_id(pieces, "\n")})


def test_a_period_between_a_label_and_its_number_ends_no_sentence():
    """ "at No." is not a sentence: a quote of it answered "Where did Phileas Fogg live?" with "No."
    (bench/ask_while_reading.py). A year before a number still ends one."""
    text = "Fogg lived at No. 7, Saville Row. He was a member. Back in 1872. 7 men came.\n"
    doc, pieces = _doc(text)
    index = QuoteIndex(doc, pieces.get)
    assert [index.text(a, b) for a, b in index.passages()] == [
        "Fogg lived at No. 7, Saville Row.", " He was a member.", " Back in 1872.", " 7 men came.\n",
    ]  # fmt: skip
    no = pieces_id(pieces, " No.")
    at = int(np.flatnonzero(doc == no)[0])
    assert index.text(*index.sentence(at, at + 1)) == "Fogg lived at No. 7, Saville Row."
    q = QuoteConstraint(index, TOKENS, QuoteParams(threshold=None), pieces.get, "no", answer=[])
    for t in doc[: at + 1].tolist():
        assert not q.push(t), "the quote goes on after 'No.'"
    for t in doc[at + 1 : at + 4].tolist():
        q.push(t)
    assert q.quote_text() == "Fogg lived at No. 7, Saville Row."


def test_a_sentence_does_not_end_inside_a_quotation_the_quote_opened():
    """Issue 48: "Copy the paragraph that begins with 'There was nothing so VERY remarkable'" was quoted
    up to “Oh dear! (the first "!" followed by a space), not to the Rabbit's whole line."""
    text = "The Rabbit said “Oh dear! Oh dear! I shall be late!” and ran. He said “Go.” Then left.\n"
    doc, pieces = _doc(text)
    index = QuoteIndex(doc, pieces.get)
    q = QuoteConstraint(index, TOKENS, QuoteParams(threshold=None), pieces.get, "no", answer=[])
    ended = next(i for i, t in enumerate(doc.tolist()) if q.push(t))
    assert q.quote_text() == "The Rabbit said “Oh dear! Oh dear! I shall be late!”", ended
    q = QuoteConstraint(index, TOKENS, QuoteParams(threshold=None), pieces.get, "no", answer=[])
    start = pieces_id(pieces, " He")
    for t in doc[int(np.flatnonzero(doc == start)[0]) :].tolist():
        if q.push(t):
            break
    assert q.quote_text() == "He said “Go.”", "a closing mark ends the sentence its period ended"


def test_quotation_marks_nest_in_any_of_their_conventions():
    from spec.quote import nest

    for text, still_open in (
        ("“Oh dear!", ["\u201c"]), ("“a” and «b»", []), ("„Wer?“", []), ('"x" "y', ['"']),
        ("the end.” Then", []),  # closing a quotation the quote started inside of: passed over
        ('Run." Then he left.', []), ("Je pars. » Puis", []),  # the same with a straight " and a French »
    ):  # fmt: skip
        marks: list[str] = []
        nest(marks, text)
        assert marks == still_open, text


def test_a_quote_that_starts_with_its_opening_mark_runs_to_the_closing_one():
    """The model may start its quote with the mark alone (a lead token, before the first word), and a
    mark may come in two tokens: either way the quotation is open until its closing mark."""
    words = [
        " said",
        " \u201c",
        "Oh",
        " dear",
        "!",
        " Oh",
        " dear",
        "!",
        " I",
        " shall",
        " be",
        " late",
        "!\u201d",
        " and",
        " ran",
        ".",
    ]
    pieces = {100 + i: w.encode() for i, w in enumerate(words)}
    doc = np.arange(100, 100 + len(words), dtype=np.int32)
    tokens = QuoteTokens(TOKENS.breaks, TOKENS.none, TOKENS.yes, TOKENS.no, marks=np.array([101], np.int64))
    q = QuoteConstraint(QuoteIndex(doc, pieces.get), tokens, QuoteParams(threshold=None), pieces.get, "no", answer=[])
    assert not q.push(101)  # the opening mark, as a lead
    for t in doc[2:].tolist():
        if q.push(t):
            break
    assert q.quote_text() == "Oh dear! Oh dear! I shall be late!\u201d"

    from spec.quote import nest

    marks: list[str] = []
    decode = codecs.getincrementaldecoder("utf-8")("ignore")
    before = nest(marks, decode.decode("\u201clate!".encode() + b"\xe2\x80"))
    nest(marks, decode.decode(b"\x9d and"), before)  # ” split over two tokens
    assert marks == []


def pieces_id(pieces: dict[int, bytes], text: str) -> int:
    return next(i for i, p in pieces.items() if p == text.encode())


# -- the answer loop on the tiny f32 qwen35 ----------------------------------------------------------


def answer(model, ctx, doc: np.ndarray, question: np.ndarray, window, params: QuoteParams, temperature=0.0):
    """A quote-first answer after ``doc + question`` (the quote may come from ``doc``); returns (quote
    ids, answer events' token ids, the constraint)."""
    prompt = np.concatenate([doc, question]).astype(np.int32)
    ctx.clear()
    ctx.prefill(prompt, 0)
    lookup = LookupDrafter(NgramIndex(prompt, 2, 4), model.piece, model.unspaced)
    tokenize = lambda s: model.tokenize(s, parse_special=False)  # noqa: E731
    judged = params.threshold is not None
    quote = QuoteConstraint(
        QuoteIndex(doc, model.piece), QuoteTokens.of(tokenize, **QUOTE_REPLIES), params, model.piece, "none",
        answer=tokenize(" Answer:"),
        judge=(lambda p: tokenize(f" Does {p} answer? Reply yes or no:")) if judged else None,
        support=Judgment("", params.threshold) if judged else None,
    )  # fmt: skip
    run = AnswerRun(ctx, model, {"lookup": lookup}, len(prompt), AnswerStats(), time.perf_counter())
    sampling = SamplingParams(temperature=temperature, seed=7)
    out = {"quote": [], "answer": []}
    for event in generate(run, AnswerParams(24, sampling, window, quote=params), constraint=quote):
        out[event.part].extend(event.token_ids)
    return out["quote"], out["answer"], quote


def _is_span(doc: list[int], ids: list[int]) -> bool:
    return any(doc[i : i + len(ids)] == ids for i in range(len(doc) - len(ids) + 1))


def test_constrained_quotes_are_spans_of_the_document_on_random_prompts(tiny_quoting):
    model, ctx = tiny_quoting
    rng = random.Random(34)
    unjudged, judged = QuoteParams(max_tokens=12, threshold=None), QuoteParams(max_tokens=12, threshold=0.5)
    vocab = ["cat", "sat", "the", "on", "mat", "dog", "ran", "far", "a", "hat", "Tom", "Ann.", "Rex."]
    for k in range(300):
        words = [rng.choice(vocab) for _ in range(30)]
        doc = model.tokenize(" ".join(words) + ".", parse_special=False)
        question = model.tokenize(f" question {k}: " + " ".join(rng.sample(words, 4)), parse_special=False)
        params = judged if k % 3 == 0 else unjudged
        _, _, quote = answer(model, ctx, doc, question, None, params, temperature=0.8 * (k % 2))
        if quote.verdict is not None and not quote.none and params is judged:  # asked, and decided by p_yes
            assert quote.p_yes is not None and quote.refused == (quote.p_yes < 0.5)
        if quote.span is not None:  # the document's tokens, but the first may differ in case or a space
            a, b = quote.span
            assert doc[a + 1 : b].tolist() == quote.ids[1:] and _is_span(doc.tolist(), quote.ids[1:])
            assert word_key(model.piece(int(doc[a]))) == word_key(model.piece(quote.ids[0]))


@pytest.mark.parametrize("window", [4, 16])
def test_speculative_quote_first_equals_plain(tiny_quoting, window):
    model, ctx = tiny_quoting
    doc = model.tokenize("the cat sat on the mat. the dog of Tom ran to the hat. " * 6, parse_special=False)
    question = model.tokenize(" where did the dog run?", parse_special=False)
    for params in (QuoteParams(max_tokens=16, threshold=None), QuoteParams(max_tokens=16, threshold=0.0)):
        plain = answer(model, ctx, doc, question, window=0, params=params)
        spec = answer(model, ctx, doc, question, window=window, params=params)
        assert (plain[0], plain[1]) == (spec[0], spec[1])
        assert plain[2].p_yes == spec[2].p_yes


def test_a_number_the_document_never_has_refuses_whatever_the_model_says():
    """spec/support.py: "in the 1100s" of a document that never writes 1100 cannot be answered from it."""
    q = QuoteConstraint(
        QuoteIndex(DOC, piece), TOKENS, QuoteParams(threshold=0.5), piece, "no", answer=[14],
        judge=lambda passage: [13], support=Judgment("Which cat sat in the 1100s?", 0.5),
    )  # fmt: skip
    for t in (2, 3, 4, 13):
        q.push(t)
    q.push(q.choose(GREEDY, row([11, 12])))  # the model says yes
    assert q.refused and "1100" in q.reason
