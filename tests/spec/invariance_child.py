"""Row-count measurements for tests/spec/test_invariance.py, run in a fresh process: ggml reads its
matmul kernel switch (runtime/numerics.py) once per process, at the first K-quant matmul, so the test
sets GGML_CPU_TILED_MM in this process's environment. Prints one JSON line.

Usage: python -m tests.spec.invariance_child regimes MODEL CASES
       python -m tests.spec.invariance_child speculative MODEL CASES N_PROMPTS N_TOKENS
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from runtime.llama import Model
from spec.limits import INVARIANT_MAX_ROWS, MAX_WINDOW
from testkit.harness import Prompt, open_ctx, plain_greedy, prompt_tokens, speculative

SPEC03 = "synthetic/agreement-880-tokens.txt"
QUESTIONS = [
    "What is the vault combination, and what colour is the vault?",
    "Who signed clause 3 of the storage agreement, and when?",
    "List every clause that mentions copper.",
]
INVARIANT = dict(type_k="q8_0", type_v="q8_0", flash_attn="on")


def prompts(cases: Path) -> list[tuple[str, str]]:
    """20 (document, question) pairs: SPEC-03 (880 tokens, past Gemma's 512-token window), crazyones,
    and quotes across Alice."""
    from ingest.extract import extract

    alice = extract((cases / "text/gutenberg/alice-in-wonderland-pg11.txt").read_bytes()).text
    crazy = extract((cases / "pdf/pypdf-resources/crazyones.pdf").read_bytes()).text
    spec03 = (cases / SPEC03).read_text(encoding="utf-8")
    out = [(spec03, q) for q in QUESTIONS]
    out += [(crazy, q) for q in ("Quote the whole text of the document verbatim.", "Who are the crazy ones?")]
    for start in range(0, 20_000, 1_300):  # 16 more: quotes and questions across Alice
        chunk = alice[start : start + 2_500]
        first = " ".join(chunk.split()[40:46])
        out.append((chunk, f'Quote the paragraph that contains "{first}".'))
    return out[:20]


def speculative_mismatches(model: Model, pairs: list[tuple[str, str]], n_tokens: int, max_window: int) -> list:
    """Windows 1, 4, 16 and adaptive (each at most ``max_window`` drafts) against plain greedy decoding
    under DOCQA_BATCH_INVARIANT's numerics: the (question, window) pairs whose output differs."""
    ctx = open_ctx(model, n_ctx=4096, **INVARIANT)
    bad = []
    try:
        for document, question in pairs:
            prompt = Prompt(ctx, *prompt_tokens(model, document, question))
            plain, _ = plain_greedy(ctx, prompt, n_tokens)
            for window in (1, 4, 16, None):
                spec, _ = speculative(ctx, prompt, n_tokens, window, max_window=max_window)
                if spec != plain[: len(spec)] or len(spec) < min(len(plain), n_tokens):
                    bad.append([question, window])
    finally:
        ctx.close()
    return bad


def regimes(model: Model, cases: Path) -> dict[str, float]:
    """The crazyones prompt's 16 greedy tokens decoded 1, 7, 8 and 16 per call: the largest logit
    difference of 7, 8 and 16 per call against one per call, and of 16 against 8."""
    ctx = open_ctx(model, n_ctx=1024, **INVARIANT)
    try:
        document, question = prompts(cases)[4]
        prompt = Prompt(ctx, *prompt_tokens(model, document, question))
        tokens, _ = plain_greedy(ctx, prompt, 17)
        n_past = len(prompt.prefix) + len(prompt.suffix)

        def rows(per_call: int) -> np.ndarray:
            prompt.start(ctx)
            out = []
            for i in range(0, 16, per_call):
                ids = tokens[i : min(i + per_call, 16)]
                ctx.decode(ids, n_past + i, outputs="all")
                out.extend(ctx.logits()[: len(ids)].copy())
            return np.stack(out)

        one, eight, sixteen = rows(1), rows(INVARIANT_MAX_ROWS + 1), rows(16)
        return {
            str(INVARIANT_MAX_ROWS): float(np.abs(rows(INVARIANT_MAX_ROWS) - one).max()),
            str(INVARIANT_MAX_ROWS + 1): float(np.abs(eight - one).max()),
            "16": float(np.abs(sixteen - one).max()),
            "8 against 16": float(np.abs(sixteen - eight).max()),
        }
    finally:
        ctx.close()


def main() -> None:
    what, path, cases = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    model = Model(path, extra_bufts=False)
    try:
        if what == "regimes":
            out: object = regimes(model, cases)
        else:
            out = speculative_mismatches(model, prompts(cases)[: int(sys.argv[4])], int(sys.argv[5]), MAX_WINDOW)
    finally:
        model.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
