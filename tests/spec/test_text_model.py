"""Whole characters on the real answer loop (issue 27): the embedded Gemma spells an Egyptian
hieroglyph as four byte-fallback tokens, so most ``max_tokens`` cut points fall inside a character.
Every answer must end at a whole character, with no U+FFFD, whatever the cut."""

from __future__ import annotations

import time

import pytest

from spec.lookup import LookupDrafter, NgramIndex
from spec.loop import AnswerParams, AnswerRun, AnswerStats
from spec.sampling import SamplingParams
from testkit.harness import Prompt, generate, open_ctx, plain_greedy, prompt_tokens

GLYPHS = "".join(chr(0x13000 + i) for i in range(40))  # U+13000..: 4 UTF-8 bytes, 4 tokens each
DOCUMENT = f"The scribe's line reads: {GLYPHS}\nThat is the whole inscription."
QUESTION = "Copy the scribe's line exactly, nothing else."


@pytest.fixture(scope="module")
def hieroglyphs(gemma):
    ctx = open_ctx(gemma, 2048)
    prompt = Prompt(ctx, *prompt_tokens(gemma, DOCUMENT, QUESTION))
    yield ctx, prompt
    ctx.close()


def _answer(ctx, prompt, max_tokens: int, stops: tuple[str, ...] | None = None) -> tuple[str, list[int]]:
    """The text the loop emits (the concatenated events, as every route sends them) and its tokens."""
    prompt.start(ctx)
    drafter = LookupDrafter(NgramIndex(prompt.prefix, 2, 4), ctx.model.piece, ctx.model.unspaced)
    drafter.extend(prompt.suffix.tolist())
    n_past = len(prompt.prefix) + len(prompt.suffix)
    run = AnswerRun(ctx, ctx.model, {"lookup": drafter}, n_past, AnswerStats(), time.perf_counter())
    params = AnswerParams(max_tokens=max_tokens, sampling=SamplingParams(), window=None, stops=stops)
    text, tokens = "", []
    for event in generate(run, params):
        text += event.text
        tokens.extend(event.token_ids)
    return text, tokens


def _whole_prefix(data: bytes) -> str:
    """The longest prefix of ``data`` that is whole UTF-8 characters."""
    for cut in range(len(data), max(len(data) - 4, -1), -1):
        try:
            return data[:cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    raise AssertionError(f"not UTF-8 even without its tail: {data!r}")


def test_no_cut_point_leaves_part_of_a_character(gemma, hieroglyphs):
    ctx, prompt = hieroglyphs
    reference, _ = plain_greedy(ctx, prompt, 40)
    pieces = [gemma.piece(t) for t in reference]
    byte_token = [len(p) == 1 and p[0] >= 0x80 for p in pieces]
    assert True in byte_token, f"the model must answer in byte tokens: {pieces}"
    first = byte_token.index(True)  # the answer may begin with words before it copies the line
    assert sum(byte_token[first : first + 16]) >= 12, "the model must copy the hieroglyphs"
    inside = 0
    for n in range(first + 1, first + 17):  # four hieroglyphs: 12 of 16 cuts inside one (issue 27: 11 of 15)
        text, tokens = _answer(ctx, prompt, n)
        assert tokens == reference[:n], "greedy and lossless: the same tokens as plain decoding"
        data = b"".join(pieces[:n])
        inside += _whole_prefix(data).encode() != data
        assert "\ufffd" not in text, f"max_tokens={n} left U+FFFD: {text!r}"
        assert text == _whole_prefix(data).lstrip(), f"max_tokens={n}"  # an answer starts at its first word
    assert inside >= 10, "most cut points must fall inside a character, or this tests nothing"


def test_a_stop_string_after_a_cut_character_leaves_no_fragment(gemma, hieroglyphs):
    # The stop string ends the answer; the bytes of a character begun before it are not emitted.
    ctx, prompt = hieroglyphs
    text, _ = _answer(ctx, prompt, 24, stops=(GLYPHS[4],))
    assert "\ufffd" not in text and GLYPHS[5] not in text
