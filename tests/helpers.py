"""Helpers for tests that drive the runtime and the answer loop directly (no HTTP)."""

from __future__ import annotations

import time

import numpy as np

from ingest.prompt import plain_layout
from runtime.llama import Context, ContextConfig, Model
from spec.lookup import LookupDrafter, NgramIndex
from spec.loop import AnswerParams, AnswerRun, AnswerStats, generate
from spec.sampling import SamplingParams

THREADS = 2


def open_ctx(model: Model, n_ctx: int = 4096, **overrides) -> Context:
    cfg = dict(n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_threads=THREADS, n_threads_batch=THREADS)
    cfg.update(overrides)
    return Context(model, ContextConfig(**cfg))


def prompt_tokens(model: Model, document: str, question: str) -> tuple[np.ndarray, np.ndarray]:
    layout = plain_layout(model.add_bos)
    return layout.document_prefix(model, document), layout.question_suffix(model, question)


class Prompt:
    """A document prefix prefilled once (state kept in RAM) plus a question suffix."""

    def __init__(self, ctx: Context, prefix: np.ndarray, suffix: np.ndarray) -> None:
        self.prefix, self.suffix = prefix, suffix
        ctx.clear()
        ctx.prefill(prefix, 0)
        self.state = ctx.state_get(0)

    def start(self, ctx: Context) -> None:
        """Restore the prefix and decode the suffix; the last row's logits are ready."""
        ctx.state_set(self.state, 0)
        ctx.prefill(self.suffix, len(self.prefix))


def plain_greedy(ctx: Context, prompt: Prompt, n: int) -> tuple[list[int], list[float]]:
    """Reference: one token per decode call. Returns tokens and the top-2 logit margin at each."""
    prompt.start(ctx)
    prefix, suffix = prompt.prefix, prompt.suffix
    pos = len(prefix) + len(suffix)
    tokens, margins = [], []
    row = ctx.logits()[-1]
    for _ in range(n):
        top2 = np.partition(row, -2)[-2:]
        tokens.append(int(np.argmax(row)))
        margins.append(float(top2[1] - top2[0]))
        if ctx.model.is_eog(tokens[-1]):
            break
        ctx.decode([tokens[-1]], pos, outputs="all")
        pos += 1
        row = ctx.logits()[0]
    return tokens, margins


def speculative(
    ctx: Context, prompt: Prompt, n: int, window: int | None, temperature: float = 0.0
) -> tuple[list[int], AnswerStats]:
    """The real answer loop (lookup drafts + verify) after the prompt; returns its tokens."""
    prompt.start(ctx)
    prefix, suffix = prompt.prefix, prompt.suffix
    drafter = LookupDrafter(NgramIndex(prefix, 2, 4), ctx.model.piece, ctx.model.unspaced)
    drafter.extend(suffix.tolist())
    stats = AnswerStats()
    run = AnswerRun(ctx, ctx.model, drafter, len(prefix) + len(suffix), stats, time.perf_counter())
    params = AnswerParams(max_tokens=n, sampling=SamplingParams(temperature=temperature, seed=1), window=window)
    tokens: list[int] = []
    for event in generate(run, params):
        tokens.extend(event.token_ids)
    return tokens, stats


def first_divergence(a: list[int], b: list[int]) -> int:
    """Index of the first differing token (the shorter length if one is a prefix of the other)."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
