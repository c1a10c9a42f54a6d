"""Driving the answer loop outside the server: one sequence, one verify call per step.

Shared by the benchmarks and the tests (tests import it; it imports nothing from tests): a context
helper, a document prompt prefilled once, plain greedy decoding as the reference, the single-sequence
answer driver :func:`generate`, and :class:`TinyMtp`, the tiny qwen35 model's target + MTP contexts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import numpy as np

from ingest.prompt import plain_layout
from runtime.llama import Context, ContextConfig, Model
from spec.constraint import Constraint
from spec.cost import calibrate
from spec.events import TokenEvent
from spec.limits import MAX_WINDOW
from spec.lookup import LookupDrafter, NgramIndex
from spec.loop import Answer, AnswerParams, AnswerRun, AnswerStats, RollbackFailed
from spec.mtp import MtpDrafter
from spec.repetition import RepetitionGuard
from spec.sampling import Sampler, SamplingParams
from spec.verify import VerifyResult, accept

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
    """Reference: one token per decode call, ending where an answer ends (EOS, ``n`` tokens, or a
    loop: spec/repetition.py, with the prefix as the document). Returns tokens and the top-2 logit
    margin at each."""
    prompt.start(ctx)
    prefix, suffix = prompt.prefix, prompt.suffix
    guard = RepetitionGuard(NgramIndex(prefix, 2, 4))
    pos = len(prefix) + len(suffix)
    tokens, margins = [], []
    row = ctx.logits()[-1]
    for _ in range(n):
        top2 = np.partition(row, -2)[-2:]
        tokens.append(int(np.argmax(row)))
        margins.append(float(top2[1] - top2[0]))
        if ctx.model.is_eog(tokens[-1]) or guard.push(tokens[-1]):
            break
        ctx.decode([tokens[-1]], pos, outputs="all")
        pos += 1
        row = ctx.logits()[0]
    return tokens, margins


def speculative(
    ctx: Context,
    prompt: Prompt,
    n: int,
    window: int | None,
    temperature: float = 0.0,
    max_window: int = MAX_WINDOW,
    seed: int = 1,
    stops: tuple[str, ...] | None = None,
) -> tuple[list[int], AnswerStats]:
    """The real answer loop (lookup drafts + verify) after the prompt; returns its tokens. ``max_window``
    caps every window, as the server does (server/engine/loading.py)."""
    prompt.start(ctx)
    prefix, suffix = prompt.prefix, prompt.suffix
    drafter = LookupDrafter(NgramIndex(prefix, 2, 4), ctx.model.piece, ctx.model.unspaced)
    drafter.extend(suffix.tolist())
    stats = AnswerStats()
    n_past = len(prefix) + len(suffix)
    run = AnswerRun(ctx, ctx.model, {"lookup": drafter}, n_past, stats, time.perf_counter(), max_window=max_window)
    sampling = SamplingParams(temperature=temperature, seed=seed)
    params = AnswerParams(max_tokens=n, sampling=sampling, window=window, stops=stops)
    tokens: list[int] = []
    for event in generate(run, params):
        tokens.extend(event.token_ids)
    return tokens, stats


def is_control(model: Model, token: int) -> bool:
    """True for a control/special token (BOS, EOS, chat-template markers): what no document text may
    tokenize to."""
    from llama_cpp import llama_cpp as C

    return bool(C.llama_vocab_is_control(model.vocab, token))


def first_divergence(a: list[int], b: list[int]) -> int:
    """Index of the first differing token (the shorter length if one is a prefix of the other)."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def generate(
    run: AnswerRun,
    params: AnswerParams,
    rebuild: Callable[[list[int]], None] | None = None,
    constraint: Constraint | None = None,
) -> Iterator[TokenEvent]:
    """Yield TokenEvents until EOS, a stop string, ``max_tokens``, a full context or cancellation,
    decoding this one sequence alone (one verify call per step, then the MTP catch-up).

    ``rebuild(replay_ids)``: called when a rollback fails; it must leave the sequence holding the
    prompt plus ``replay_ids``. Raises RollbackFailed without it, or when the sequence then does not
    end at the expected position. ``run.stats`` is filled in as it goes; read it after the iterator
    ends.
    """
    ctx = run.ctx
    answer = Answer(run, params, constraint)
    try:
        yield from answer.begin(ctx.logits()[-1])
        while not answer.done:
            pos, rows = answer.n_past, answer.draft()
            t0 = time.perf_counter()
            ctx.decode(rows, pos, seq_id=run.seq_id, outputs="all")
            if (mtp := run.drafters.get("mtp")) is not None:
                mtp.process(rows, pos)
            step = answer.accept(ctx.logits())
            answer.costs.observe(len(rows), time.perf_counter() - t0)  # as server/engine/runner.py does
            yield from step.events
            if step.rebuild:
                if rebuild is None:
                    raise RollbackFailed(f"could not roll back sequence {run.seq_id} to {answer.n_past} tokens")
                rebuild(answer.replay_ids())
                if ctx.pos_max(run.seq_id) != answer.n_past - 1:
                    raise RollbackFailed(f"the rebuild ends at {ctx.pos_max(run.seq_id)}, expected {answer.n_past - 1}")
    finally:
        answer.close()


def verify(ctx: Context, sampler: Sampler, last: int, draft: list[int], pos: int, seq_id: int = 0) -> VerifyResult:
    """Decode ``[last, *draft]`` at positions ``pos..pos+k`` (k + 1 logits rows) and accept; the
    caller removes the rejected cells (positions ``>= pos + 1 + n_accepted``) afterwards."""
    ctx.decode([last, *draft], pos, seq_id=seq_id, outputs="all")
    return accept(sampler, ctx.logits(), draft)


TINY_PROMPTS = [
    "the cat sat on the mat and the dog ran in the sun. the cat sat on the mat",
    "an apple and an orange; an apple and a pear; a pear and an orange",
    "she sells sea shells on the sea shore",
]
TINY_N = 48  # tokens per tiny-model answer


class TinyMtp:
    """Target + MTP context on the tiny model, 1 thread (fast and stable under CPU contention)."""

    def __init__(self, model: Model, n_rs_seq: int = 16) -> None:
        cfg = dict(n_ctx=2048, n_batch=64, n_ubatch=64, n_threads=1, n_threads_batch=1)
        self.model = model
        self.t = open_ctx(model, n_rs_seq=n_rs_seq, **cfg)
        self.d = open_ctx(model, mtp=True, **cfg)
        self.mtp = MtpDrafter(self.t, self.d)
        zeros = np.zeros((1, self.d.n_embd), dtype=np.float32)

        def mtp_step() -> None:
            self.d.decode([0], 0, outputs="all", embd=zeros)
            self.d.logits()[0].argmax()
            self.d.seq_rm(0, 0)

        self.costs = calibrate(self.t, 0, {"mtp": mtp_step}, repeats=3)  # as the engine does at start-up

    def start(self, prompt: np.ndarray) -> None:
        self.t.clear()
        self.d.clear()
        self.mtp.reset()
        self.t.prefill(prompt, 0, on_chunk=self.mtp.process)

    def plain(self, prompt: np.ndarray, n: int = TINY_N) -> list[int]:
        """Greedy, one token per decode, ending after ``n`` tokens or a loop (as an answer ends)."""
        self.start(prompt)
        guard = RepetitionGuard(NgramIndex(prompt, 2, 4))
        pos, out = len(prompt), []
        token = int(self.t.logits()[-1].argmax())
        for _ in range(n):
            out.append(token)
            if guard.push(token):
                break
            self.t.decode([token], pos, outputs="all")
            pos += 1
            token = int(self.t.logits()[0].argmax())
        return out

    def speculative(
        self,
        prompt: np.ndarray,
        window: int | None,
        sources=("mtp", "lookup"),
        n: int = TINY_N,
        temperature: float = 0.0,
        seed: int | None = None,
        max_window: int = 16,
        rebuild=None,
        costs=None,
        accept_drafts: bool = False,
    ):
        self.start(prompt)
        self.mtp.depth = min(3, window or 2)
        lookup = LookupDrafter(NgramIndex(prompt, 2, 4), self.model.piece, self.model.unspaced)
        stats = AnswerStats()
        run = AnswerRun(
            self.t,
            self.model,
            {"lookup": lookup, "mtp": self.mtp},
            len(prompt),
            stats,
            time.perf_counter(),
            max_window=max_window,
            costs=costs,
        )
        params = AnswerParams(
            max_tokens=n,
            sampling=SamplingParams(temperature=temperature, seed=seed),
            window=window,
            sources=sources,
            accept_drafts=accept_drafts,
        )
        out = [t for event in generate(run, params, rebuild) for t in event.token_ids]
        return out, stats

    def close(self) -> None:
        self.d.close()
        self.t.close()


def seq1_rows(model: Model, document: str, questions: list[str], batch: bool, **cfg) -> np.ndarray:
    """Logits of sequence 1 (the first question) over 6 greedy steps, decoded alone or with sequences 2
    and 3 (the next two questions) in each call: float32 [6, n_vocab]. Equal either way on a
    batch-invariant configuration (tests/spec/test_invariance.py, bench/invariance.py)."""
    ctx = open_ctx(model, n_seq_max=4, kv_unified=True, **cfg)
    try:
        prefix = prompt_tokens(model, document, questions[0])[0]
        ctx.prefill(prefix, 0, seq_id=0)
        seqs = (1, 2, 3) if batch else (1,)
        pos, tok = {}, {}
        for s in seqs:
            suffix = prompt_tokens(model, document, questions[s - 1])[1]
            ctx.seq_cp(0, s, 0, len(prefix))
            ctx.prefill(suffix, len(prefix), seq_id=s)
            pos[s], tok[s] = len(prefix) + len(suffix), int(ctx.logits()[-1].argmax())
        rows = []
        for _ in range(6):
            ids = np.array([tok[s] for s in seqs], np.int32)
            ctx.decode_rows(
                ids, np.array([pos[s] for s in seqs], np.int32), np.array(seqs, np.int32), np.ones(len(seqs), np.int8)
            )
            logits = ctx.logits()
            rows.append(logits[0].copy())
            for i, s in enumerate(seqs):
                tok[s], pos[s] = int(logits[i].argmax()), pos[s] + 1
        return np.stack(rows)
    finally:
        ctx.close()
