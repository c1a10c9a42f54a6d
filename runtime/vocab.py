"""Whether two models share one vocabulary: a separate draft model's tokens must mean the same to
the target (issue 28). Compared: the vocabulary type (SPM, BPE, ...), its size, BOS and EOS, and every
token's text, in id order, so the first difference can be named."""

from __future__ import annotations

from llama_cpp import llama_cpp as C

from runtime.model import Model


def mismatch(target: Model, draft: Model) -> str | None:
    """Why ``draft`` cannot draft for ``target`` (their vocabularies differ), naming the first
    difference; None when they are the same. Reads both vocabularies (~0.5 s for 150k tokens)."""
    a, b = target.vocab, draft.vocab
    kinds = C.llama_vocab_type(a), C.llama_vocab_type(b)
    if kinds[0] != kinds[1]:
        return f"the vocabulary types differ (target {kinds[0]}, draft {kinds[1]})"
    if target.n_vocab != draft.n_vocab:
        return f"the vocabularies have {target.n_vocab} and {draft.n_vocab} tokens"
    for what, x, y in (("BOS", target.bos, draft.bos), ("EOS", C.llama_vocab_eos(a), C.llama_vocab_eos(b))):
        if x != y:
            return f"the {what} tokens differ (target {x}, draft {y})"
    for token in range(target.n_vocab):
        t, d = target.token_text(token), draft.token_text(token)
        if t != d:
            return f"token {token} differs: target {t!r}, draft {d!r}"
    return None
