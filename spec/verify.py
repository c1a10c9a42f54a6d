"""One verify step: decode the last token plus the draft in a single call and accept a prefix.

Acceptance rule (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding",
specialised to deterministic drafts, as llama.cpp's ``common_sampler_sample_and_accept_n``):
row ``i`` of the verify call holds the target's distribution after ``[last, d_1..d_i]``. Choose the
target's token ``a_i`` from row ``i`` (argmax, or a sample with the request's sampler); accept
``d_{i+1}`` while ``a_i == d_{i+1}``. The first ``a_i`` that disagrees, or ``a_k`` when all ``k``
drafts agree, is emitted as the target's own next token. Every emitted token is therefore the
target's choice computed in this call (the project's lossless definition: docs/internals.md), and a step
always emits between 1 and k + 1 tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spec.sampling import Sampler


@dataclass(frozen=True, slots=True)
class VerifyResult:
    tokens: list[int]  # emitted: the n_accepted drafts, then the target's own token
    n_accepted: int


def accept_greedy(choices: np.ndarray, draft: list[int]) -> int:
    """Number of leading drafts equal to the target's choices; ``choices`` shape [k + 1]."""
    m = 0
    while m < len(draft) and int(choices[m]) == draft[m]:
        m += 1
    return m


def accept(
    sampler: Sampler, rows: np.ndarray, draft: list[int], reject_all: bool = False, accept_all: bool = False
) -> VerifyResult:
    """Accept from verify logits ``rows`` (float32 [k + 1, n_vocab]; row i follows ``[last, d_1..d_i]``).
    Debug settings (never both): ``reject_all`` (DOCQA_DEBUG_REJECT_DRAFTS) keeps only the target's choice
    at row 0, still lossless; ``accept_all`` (DOCQA_DEBUG_ACCEPT_DRAFTS) keeps every draft whatever the
    target says, then its choice after them: the speed of a drafter that is always right, not lossless."""
    if reject_all:
        return VerifyResult([sampler.choose(rows[0])], 0)
    if accept_all:
        return VerifyResult([*draft, sampler.choose(rows[len(draft)])], len(draft))
    if sampler.params.greedy:
        choices = rows.argmax(axis=1)
        m = accept_greedy(choices, draft)
        return VerifyResult(tokens=[*draft[:m], int(choices[m])], n_accepted=m)
    tokens: list[int] = []
    for i in range(len(draft) + 1):
        t = sampler.choose(rows[i])
        tokens.append(t)
        if i == len(draft) or t != draft[i]:
            break
    return VerifyResult(tokens=tokens, n_accepted=len(tokens) - 1)
