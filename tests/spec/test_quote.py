"""Quote-first answers (spec/quote.py): the quote is a span of the document by construction when
constrained, a free quote is checked against the document, and the quote's end, its ``none`` and the
scaffolding after it behave as the answer loop needs; speculative decoding stays exact under the
constraint (tiny f32 qwen35: a speculative run emits what a plain run emits)."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest

from runtime.llama import Model
from spec.lookup import LookupDrafter, NgramIndex
from spec.loop import AnswerParams, AnswerRun, AnswerStats
from spec.quote import QuoteIndex, QuoteParams, QuoteTokens, Quoting, word_key
from spec.sampling import Sampler, SamplingParams
from testkit.harness import generate, open_ctx

PIECES = {1: b" the", 2: b" cat", 3: b" sat", 4: b".", 5: b"\n", 6: b" dog", 7: b"The", 8: b" none", 9: b" ran"}
PIECES[10] = b".\n"
DOC = np.array([7, 2, 3, 4, 1, 6, 9, 4, 1, 2, 9, 10], np.int32)  # "The cat sat. the dog ran. the cat ran.\n"
TOKENS = QuoteTokens(breaks=np.array([5], np.int64), none=np.array([8], np.int64))


def piece(t: int) -> bytes:
    return PIECES[int(t)]


def quoting(constrained=True, one_sentence=False, max_tokens=64, verify=None) -> Quoting:
    params = QuoteParams(constrained=constrained, one_sentence=one_sentence, max_tokens=max_tokens)
    return Quoting(QuoteIndex(DOC, piece), TOKENS, params, [5], piece, "The document does not say.", verify)


def row(prefer: list[int], n_vocab: int = 11) -> np.ndarray:
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
    # it ends the quote.
    for prefer in ([1], [3, 2], [6, 3], [5]):
        t = q.choose(GREEDY, row(prefer))
        q.push(t)
    assert q.ids == [1, 2, 3] and q.done and q.verified and not q.refuses
    assert q.span == (0, 3)  # "The cat sat": the document's tokens 0..2
    assert q.quote_text() == "the cat sat"


def test_first_token_free_when_it_starts_a_document_word_and_none_refuses():
    q = quoting()
    assert q.choose(GREEDY, row([8])) == 8  # " none" as the first word: no passage answers
    assert q.push(8) and q.none and q.refuses
    q = quoting()
    assert q.allowed().tolist() == [1, 2, 3, 4, 6, 7, 8, 9, 10]  # no bare line break as a first token


def test_quote_ends_with_the_sentence_and_at_its_length_limit():
    q = quoting(one_sentence=True)
    for t in (6, 9, 4):  # " dog ran." then the document goes on with " the": a sentence ended
        q.push(q.choose(GREEDY, row([t])))
    assert q.done and q.ids == [6, 9, 4] and q.span == (5, 8)
    q = quoting(max_tokens=2)
    q.push(1)
    assert not q.done and q.push(2) and q.ids == [1, 2]


def test_a_token_holding_the_break_ends_the_quote_and_keeps_its_head():
    q = quoting()
    for t in (2, 9, 10):  # " cat ran.\n": the last token is the document's, with the break
        q.push(t)
    assert q.done and q.verified and q.span == (9, 12) and q.quote_text() == "cat ran."


def test_free_quote_that_leaves_the_document_is_refused():
    q = quoting(constrained=False)
    for t in (1, 6, 3, 5):  # " the dog sat": no such span
        q.push(t)
    assert q.done and q.lost and not q.verified and q.refuses


def test_free_quote_checked_against_the_text_when_a_checker_is_given():
    q = quoting(constrained=False, verify=lambda text: text == "the dog sat")
    for t in (1, 6, 3, 5):
        q.push(t)
    assert q.verified and q.span is None  # in the text, though not a span of the document's tokens


# -- the answer loop on the tiny f32 qwen35 ----------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tiny_qwen35_path):
    model = Model(tiny_qwen35_path)
    ctx = open_ctx(model, n_ctx=1024, n_batch=64, n_ubatch=64, n_threads=1, n_threads_batch=1, n_rs_seq=16)
    yield model, ctx
    ctx.close()
    model.close()


def answer(model, ctx, doc: np.ndarray, question: np.ndarray, window, params: QuoteParams, temperature=0.0, text=""):
    """A quote-first answer after ``doc + question`` (the quote may come from ``doc``; ``text``: the
    question's words, for the names of a keyed quote); returns (quote ids, answer events' token ids,
    the Quoting)."""
    prompt = np.concatenate([doc, question]).astype(np.int32)
    ctx.clear()
    ctx.prefill(prompt, 0)
    lookup = LookupDrafter(NgramIndex(prompt, 2, 4), model.piece, model.unspaced)
    tokenize = lambda s: model.tokenize(s, parse_special=False)  # noqa: E731
    quote = Quoting(QuoteIndex(doc, model.piece), QuoteTokens.of(tokenize), params, tokenize("Answer:"),
                    model.piece, "none", question=text)  # fmt: skip
    run = AnswerRun(ctx, model, {"lookup": lookup}, len(prompt), AnswerStats(), time.perf_counter(), quote=quote)
    sampling = SamplingParams(temperature=temperature, seed=7)
    out = {"quote": [], "answer": []}
    for event in generate(run, AnswerParams(24, sampling, window, quote=params)):
        out[event.part].extend(event.token_ids)
    return out["quote"], out["answer"], quote


def _is_span(doc: list[int], ids: list[int]) -> bool:
    return any(doc[i : i + len(ids)] == ids for i in range(len(doc) - len(ids) + 1))


def test_constrained_quotes_are_spans_of_the_document_on_random_prompts(tiny):
    model, ctx = tiny
    rng = random.Random(34)
    plain = QuoteParams(max_tokens=12, one_sentence=False)
    keyed = QuoteParams(max_tokens=12, one_sentence=False, keyed=True)  # every third prompt: names asked for
    vocab = ["cat", "sat", "the", "on", "mat", "dog", "ran", "far", "a", "hat", "Tom", "Ann.", "Rex."]
    for k in range(300):
        words = [rng.choice(vocab) for _ in range(30)]
        doc = model.tokenize(" ".join(words) + ".", parse_special=False)
        question = model.tokenize(f" question {k}: " + " ".join(rng.sample(words, 4)), parse_special=False)
        params, text = (keyed, f"Where did Tom see {rng.choice(['Ann', 'Rex', 'Max'])}?") if k % 3 == 0 else (plain, "")
        ids, _, quote = answer(model, ctx, doc, question, None, params, temperature=0.8 * (k % 2), text=text)
        assert quote.done
        assert quote.none or quote.span is not None, (k, quote.ids)
        if params.keyed and quote.span is not None:  # it starts in a sentence naming both (or the next one)
            assert quote.span[0] in quote.region.tolist() and not quote.refuses
        if quote.span is not None:  # the document's tokens, but the first may differ in case or a space
            a, b = quote.span
            assert doc[a + 1 : b].tolist() == quote.ids[1:] and _is_span(doc.tolist(), quote.ids[1:])
            assert word_key(model.piece(int(doc[a]))) == word_key(model.piece(quote.ids[0]))


@pytest.mark.parametrize("window", [4, 16])
def test_speculative_quote_first_equals_plain(tiny, window):
    model, ctx = tiny
    doc = model.tokenize("the cat sat on the mat. the dog of Tom ran to the hat. " * 6, parse_special=False)
    question = model.tokenize(" where did the dog run?", parse_special=False)
    for params in (QuoteParams(max_tokens=16, one_sentence=False), QuoteParams(max_tokens=16, keyed=True)):
        text = "Where did the dog of Tom run?" if params.keyed else ""
        plain = answer(model, ctx, doc, question, window=0, params=params, text=text)
        spec = answer(model, ctx, doc, question, window=window, params=params, text=text)
        assert (plain[0], plain[1]) == (spec[0], spec[1])


# -- the checks of a quote against its question and answer --------------------------------------------


def test_question_keys_and_specifics_name_what_is_asked_and_claimed():
    from spec.quote import question_keys, specifics, words

    assert question_keys("Who was the cook of Noxfal Hall in 1802?") == {"noxfal", "hall", "1802"}
    assert question_keys("why did frantzen go to the sales barn") == set()  # a transcript's lower case
    # A multiple-choice question's options are not what the passage must name: only its stem is.
    choice = "Why does the Professor mention Mars?\n (A) To show that Venus is hot\n (B) Jupiter\n\nAnswer."
    assert question_keys(choice) == {"professor", "mars"}
    assert question_keys("Which is true?\nA. Paris in 1990\nB) Rome") == set()
    assert specifics("The Kazen rowing club has 1 member.") == {"kazen", "1"}
    assert specifics("B") == set() and specifics("It was Drami Drabriru.") == {"drami", "drabriru"}
    assert {"3", "three"} <= words("It was exactly three inches high.")
    assert {"zariski", "topologie"} <= words("Die Zariski-Topologie")  # a compound is its parts too
    assert question_keys("What was Austria's population?") == {"austria"} == words("Austria\u2019s")


def test_names_check_refuses_a_quote_about_another_entity():
    """The quote names the gardener of another Hall: the question's name is not in it, so no answer."""
    pieces = {1: b"The", 2: b" gardener", 3: b" of", 4: b" Noxfal", 5: b" Hall", 6: b" was", 7: b" Drami", 8: b"."}
    doc = np.array([1, 2, 3, 4, 5, 6, 7, 8], np.int32)
    params = QuoteParams(names=True)
    q = Quoting(
        QuoteIndex(doc, pieces.get),
        TOKENS,
        params,
        [5],
        pieces.get,
        "no",
        question="Who was the gardener of Tertor Hall?",
    )
    for t in (7, 8):  # the model quotes only " Drami." : widened to its sentence, which lacks "Tertor"
        q.push(t)
    assert q.sentence_text() == "The gardener of Noxfal Hall was Drami." and q.refuses
    q = Quoting(
        QuoteIndex(doc, pieces.get),
        TOKENS,
        params,
        [5],
        pieces.get,
        "no",
        question="Who was the gardener of Noxfal Hall?",
    )
    for t in (7, 8):
        q.push(t)
    assert q.verified and not q.refuses


def test_gate_reply_follows_its_threshold():
    tokens = QuoteTokens(
        breaks=TOKENS.breaks, none=TOKENS.none, yes=np.array([1], np.int64), no=np.array([2], np.int64)
    )
    logits = np.zeros(11, np.float32)
    logits[1], logits[2] = 1.0, 0.0  # p(yes) = e / (e + 1) = 0.73
    for threshold, answered in ((0.5, True), (0.9, False)):
        q = Quoting(QuoteIndex(DOC, piece), tokens, QuoteParams(gate=True, gate_yes=threshold), [5], piece, "no")
        assert q.gate_choice(logits) == 1 and abs(q.p_yes - 0.731) < 1e-3 and q.answered is answered


KEYED_PIECES = {
    1: b"The", 2: b" gardener", 3: b" of", 4: b" Noxfal", 5: b" Hall", 6: b" was", 7: b" Drami", 8: b".",
    9: b" Tertor", 10: b" Vel", 11: b"She", 12: b" wept", 13: b"\n", 14: b" none",
}  # fmt: skip
# "The gardener of Noxfal Hall was Drami.\nThe gardener of Tertor Hall was Vel.\n\nShe wept.\n": three
# passages (lines; the blank one belongs to the line before it).
KEYED_DOC = np.array([1, 2, 3, 4, 5, 6, 7, 8, 13, 1, 2, 3, 9, 5, 6, 10, 8, 13, 13, 11, 12, 8, 13], np.int32)
KEYED_TOKENS = QuoteTokens(breaks=np.array([13], np.int64), none=np.array([14], np.int64))


def _keyed(question: str, keyed: bool = True) -> Quoting:
    params = QuoteParams(names=True, keyed=keyed)
    index = QuoteIndex(KEYED_DOC, KEYED_PIECES.get)
    return Quoting(index, KEYED_TOKENS, params, [13], KEYED_PIECES.get, "no", question=question)


def _quote(q: Quoting, prefer: list[int]) -> None:
    while not q.done:
        q.push(q.choose(GREEDY, row(prefer, 16)))


def test_keyed_quote_starts_in_the_passage_that_holds_the_question_names():
    """The model would quote Noxfal's gardener (its first choice of every token): unkeyed, the names
    check refuses it; keyed, the quote can only start in Tertor's line (or the one after it) and answers."""
    prefer = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    q = _keyed("Who was the gardener of Tertor Hall?", keyed=False)
    _quote(q, prefer)
    assert q.sentence_text().startswith("The gardener of Noxfal") and q.refuses
    q = _keyed("Who was the gardener of Tertor Hall?")
    assert q.region.tolist() == list(range(9, 23))  # Tertor's line, its blank line, and the line after it
    _quote(q, prefer)
    assert q.span == (9, 17) and q.quote_text() == "The gardener of Tertor Hall was Vel." and not q.refuses


def test_keyed_quote_may_start_in_the_next_passage_and_refuses_a_name_no_passage_holds():
    q = _keyed("Why did Vel weep?")  # "She wept." is the line after the one naming Vel (a blank one between)
    _quote(q, [11, 12, 8])
    assert q.quote_text() == "She wept." and q.verified and not q.refuses
    q = _keyed("Who was the gardener of Quenby Hall?")  # no line names Quenby: only "none" is allowed
    assert len(q.region) == 0 and q.allowed().tolist() == [14]
    _quote(q, [1, 2, 3])
    assert q.none and q.refuses and q.ids == []
    q = _keyed("who wept")  # no names: the quote may start anywhere
    assert q.region is None


def _doc(text: str) -> tuple[np.ndarray, dict[int, bytes]]:
    """``text`` as tokens of one word (with its leading space) or one line break each."""
    import re as _re

    pieces = [p.encode() for p in _re.findall(r"\n| ?[^\s]+", text)]
    ids = {p: i for i, p in enumerate(dict.fromkeys(pieces), start=100)}
    return np.array([ids[p] for p in pieces], np.int32), {i: p for p, i in ids.items()}


def test_a_table_is_one_passage_and_a_heading_reaches_the_line_under_it():
    text = (
        "# Sizes\nPlain text.\n| | Austria | France |\n| --- | --- | --- |\n| Population | 8,935,112 | 67,413,000 |\n"
        "After.\n"
    )
    doc, pieces = _doc(text)
    index = QuoteIndex(doc, pieces.get)
    at = {p.decode().strip(): i for i, p in ((i, pieces[int(t)]) for i, t in enumerate(doc))}
    # Austria is named in the header row: the population row is in its passage (the table).
    assert at["8,935,112"] in index.keyed({"austria"}).tolist()
    assert at["After."] in index.keyed({"austria"}).tolist()  # the line after the table: reach 1
    assert at["Plain"] in index.keyed({"sizes"}).tolist() and at["Austria"] not in index.keyed({"sizes"}).tolist()
    assert index.keyed({"austria", "italy"}).tolist() == []


def test_an_answer_may_name_what_the_passages_around_its_quote_hold():
    """The quote stopped after its passage's first sentence; the value is in the next sentence or the
    next passage. A value two passages away, or in none, is a claim beyond the quote."""
    text = (
        "The ferry leaves for Morrow at 07:40. The crossing takes 35 minutes.\nTickets cost 9 euros.\n\n"
        "Dogs travel on a lead.\nThe museum is closed on Mondays.\n"
    )
    doc, pieces = _doc(text)
    q = Quoting(QuoteIndex(doc, pieces.get), KEYED_TOKENS, QuoteParams(specifics=True), [], pieces.get, "no")
    for t in doc[:7].tolist():  # "The ferry leaves for Morrow at 07:40."
        q.push(t)
    q.done = True
    assert q.quote_text() == "The ferry leaves for Morrow at 07:40." and q.span == (0, 7)
    question = "How long is the crossing to Morrow?"
    assert q.unsupported(question, "35 minutes") == set() and q.unsupported(question, "9 Euros") == set()
    assert q.unsupported(question, "On Mondays") == {"mondays"}
    assert {"55", "hook"} <= q.unsupported(question, "It takes 55 minutes, says Captain Hook.")


def test_topics_are_the_words_of_the_question_noun_phrases():
    from spec.quote import topics

    assert topics("What was the name of the dog of the keeper of the Falsel lighthouse?") == {
        "dog", "keeper", "falsel", "lighthouse"
    }  # fmt: skip
    assert topics("Who was the cook on the schooner Tortor?") == {"cook", "schooner", "tortor"}
    # a participle after the noun starts a clause; the kind of answer ("date") is not a topic
    assert topics("What serial number was stamped on the crate shipped from Kabri?") == {"crate"}
    assert topics("On what date was the treaty of Ruter signed?") == {"treaty"}
    # after an auxiliary, the subject's phrase ends in the bare verb, which the passage may put another way
    assert topics("In which ocean did the Titanic sink?") == {"titanic"}
    assert topics("How many ships did the keeper of the Falsel lighthouse count?") == {
        "ships", "keeper", "falsel", "lighthouse"
    }  # fmt: skip
    # a question about a quantity names what is counted
    assert topics("How many clerks worked at the telegraph office?") == {"clerks", "telegraph", "office"}
    # a phrase about the document itself, and a question without a determiner, ask for no topic
    assert topics("What is the date of the two-column document?") == set()
    assert topics("Who wrote it?") == set()
    # a multiple-choice stem speaks in its own words: no topics
    assert topics("Why does the professor mention the glaciers?\n(A) To compare\n(B) To contrast") == set()


def test_uncovered_allows_other_endings_longer_words_and_compound_parts():
    from spec.quote import uncovered

    text = "The keeper counted 313 ships. Tickets for children; two columns. The sun rises."
    assert uncovered({"ship", "count", "child", "ticket", "two-column", "keeper", "rise"}, text) == set()
    assert uncovered({"dog", "cook"}, text) == {"dog", "cook"}
    assert uncovered({"kee"}, text) == {"kee"}  # a short word must be whole


def test_topics_check_refuses_a_quote_about_the_entity_that_says_something_else():
    """The question asks for the keeper's dog; the passage around the only quote about the keeper
    speaks of his ships: refused (``gaps``). Asked for the ships, it answers."""
    text = (
        "It rained all week.\nThe keeper of the Falsel lighthouse counted 313 ships in a single night.\n\n"
        "The sea was calm.\nA dog barked in the village.\n"
    )
    doc, pieces = _doc(text)
    params = QuoteParams(names=True, keyed=True, topics=True)

    def ask(question: str) -> Quoting:
        q = Quoting(QuoteIndex(doc, pieces.get), KEYED_TOKENS, params, [], pieces.get, "no", question=question)
        for t in doc[5:18].tolist():  # "The keeper of the Falsel lighthouse counted 313 ships ... night."
            q.push(t)
        assert q.done and q.verified and q.quote_text().startswith("The keeper of the Falsel")
        return q

    q = ask(dog := "What was the name of the dog of the keeper of the Falsel lighthouse?")
    assert q.gaps == {"dog"} and q.refuses  # the dog of the last line is two passages away
    q = ask("How many ships did the keeper of the Falsel lighthouse count in a single night?")
    assert q.gaps == set() and not q.refuses
    plain = QuoteParams(names=True, keyed=True)
    unchecked = Quoting(QuoteIndex(doc, pieces.get), KEYED_TOKENS, plain, [], pieces.get, "no", question=dog)
    for t in doc[5:18].tolist():
        unchecked.push(t)
    assert unchecked.gaps == set() and not unchecked.refuses
