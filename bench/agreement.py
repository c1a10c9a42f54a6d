"""Agreement of speculative and plain greedy decoding on the shipped Q4_K_M (notes §14): tokens equal
before the first divergence, per prompt and window. Reported, not asserted: on Q4_K_M the row count of
a decode call moves logits, so the two may legitimately part at a near-tie (tests/spec/test_lossless.py
asserts exact equality on the F16 copy instead).

Usage: .venv/bin/python -m bench.agreement [--tokens 40]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from ingest.extract import extract
from runtime.embedded import embedded_model_path
from runtime.llama import Model
from testkit.harness import Prompt, first_divergence, open_ctx, plain_greedy, prompt_tokens, speculative

CASES = Path(__file__).resolve().parent.parent.parent / "shared/cases"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=40)
    args = parser.parse_args()
    crazy = extract((CASES / "pdf/pypdf-resources/crazyones.pdf").read_bytes()).text
    alice = extract((CASES / "text/gutenberg/alice-in-wonderland-pg11.txt").read_bytes()).text[:2500]
    texts = [
        (crazy, "Quote the whole text of the document verbatim."),
        (crazy, "Who are the crazy ones?"),
        (alice, "Quote the first paragraph of the document."),
    ]
    model = Model(embedded_model_path(Path(tempfile.gettempdir()) / "docqa-bench"))
    ctx = open_ctx(model, n_ctx=2048)
    for window in (1, 4, 16, None):
        agree = []
        for document, question in texts:
            prompt = Prompt(ctx, *prompt_tokens(model, document, question))
            plain, _ = plain_greedy(ctx, prompt, args.tokens)
            spec, _ = speculative(ctx, prompt, args.tokens, window)
            agree.append(first_divergence(plain, spec))
        print(f"Q4_K_M window {window or 'adaptive'} vs plain: tokens equal before the first divergence = {agree}")
    ctx.close()
    model.close()


if __name__ == "__main__":
    main()
