"""Lossless speculation (notes §14): on an F16 copy of the embedded model, speculative greedy output
equals plain one-token-per-call greedy output up to the first near-tie of the plain run.

Checked in its strict form: the first position where the two runs differ must itself be a near-tie
of the plain run (top-2 margin below NEAR_TIE), so every token before it was compared exactly.
On the shipped Q4_K_M the row count of a decode call moves logits by up to ~4, so there agreement
is measured by bench/agreement.py, not asserted.
"""

from __future__ import annotations

import pytest

from testkit.harness import Prompt, first_divergence, open_ctx, plain_greedy, prompt_tokens, speculative

NEAR_TIE = 0.5  # logits; ~4x the F16 row-count noise measured in notes §14
N_TOKENS = 40


@pytest.fixture(scope="module")
def texts(cases):
    from ingest.extract import extract

    crazy = extract((cases / "pdf/pypdf-resources/crazyones.pdf").read_bytes()).text
    alice = extract((cases / "text/gutenberg/alice-in-wonderland-pg11.txt").read_bytes()).text[:2500]
    return [
        (crazy, "Quote the whole text of the document verbatim."),
        (crazy, "Who are the crazy ones?"),
        (alice, "Quote the first paragraph of the document."),
    ]


@pytest.fixture(scope="module")
def f16_runs(gemma_f16_path, texts):
    """(ctx, [(prompt, plain tokens, plain margins)]) on the F16 copy, plain runs computed once."""
    from runtime.llama import Model

    model = Model(gemma_f16_path)
    ctx = open_ctx(model, n_ctx=2048)
    runs = []
    for document, question in texts:
        prompt = Prompt(ctx, *prompt_tokens(model, document, question))
        runs.append((prompt, *plain_greedy(ctx, prompt, N_TOKENS)))
    yield ctx, runs
    ctx.close()
    model.close()


# Windows 2 and 8 (3-4 s each on 2 cores) lie between the ones make test keeps: in make test-slow.
@pytest.mark.parametrize(
    "window", [1, pytest.param(2, marks=pytest.mark.slow), 4, pytest.param(8, marks=pytest.mark.slow), 16, None]
)
def test_speculative_equals_plain_greedy_on_f16(f16_runs, window):
    ctx, runs = f16_runs
    compared = []
    for prompt, plain, margins in runs:
        spec, _ = speculative(ctx, prompt, N_TOKENS, window)
        d = first_divergence(plain, spec)
        if d < min(len(plain), len(spec)):
            assert margins[d] < NEAR_TIE, f"window {window}: diverged at {d} where the plain margin was {margins[d]}"
        else:
            assert len(spec) == len(plain)
        compared.append(d)
    print(f"window {window}: tokens equal before divergence/end per prompt = {compared}")
    assert sum(compared) >= N_TOKENS  # the comparison covers a real stretch of output


def test_quoting_accepts_most_drafts(f16_runs):
    ctx, runs = f16_runs
    _, stats = speculative(ctx, runs[0][0], N_TOKENS, 16)
    assert stats.accepted_tokens >= 0.6 * stats.drafted_tokens
    assert stats.verify_steps <= N_TOKENS // 3
