"""In-process readers for bench/quality.py, on the same model, prompt layout and answer loop as docqa.

* :class:`Rag`: the RAG baseline, what AnythingLLM and Open WebUI do by default: the document cut
  into ``chunk_tokens``-token chunks, the top ``k`` by BM25 for each question (the same FTS5 BM25 that
  ranks docqa's segments, store/index.py), laid out as the document of the prompt (best chunk first),
  and the whole prompt prefilled for every question: no saved state.
* :class:`Whole`: docqa's whole-document path without the server (the prefix prefilled once and kept
  in RAM, each question decoding only its suffix), to compare prompt wordings quickly.

Both answer greedily through spec.loop.Answer (lookup drafts from the prompt, so decoding is as fast as
docqa's and the repetition guard is the same); TTFT counts from the question's arrival, prefill included.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ingest.prompt import DEFAULT, PromptLayout, Wording, layout_for
from runtime.llama import Model
from spec.lookup import LookupDrafter, NgramIndex
from spec.loop import AnswerParams, AnswerRun, AnswerStats
from spec.sampling import SamplingParams
from store import index
from testkit.harness import generate, open_ctx


@dataclass
class Reply:
    text: str
    ttft_ms: float
    seconds: float
    finish_reason: str
    completion_tokens: int
    prompt_tokens: int


class Reader:
    """One model and context on ``threads`` threads, answering from a prefix it is given."""

    def __init__(self, model_path: Path, threads: int = 2, n_ctx: int = 8192, wording: Wording = DEFAULT) -> None:
        self.model = Model(model_path)
        self.ctx = open_ctx(self.model, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads)
        self.layout: PromptLayout = layout_for(self.model, wording)

    def answer(self, prefix: np.ndarray, question: str, max_tokens: int, t0: float, state: bytes | None) -> Reply:
        """Decode ``question`` after ``prefix``: restore ``state`` (the prefix's, None: prefill it
        too), prefill the suffix, answer greedily."""
        suffix = self.layout.question_suffix(self.model, question)
        ctx = self.ctx
        ctx.clear()
        if state is None:
            ctx.prefill(np.concatenate([prefix, suffix]).astype(np.int32), 0)
        else:
            ctx.state_set(state, 0)
            ctx.prefill(suffix, len(prefix))
        drafter = LookupDrafter(NgramIndex(prefix, 2, 4), self.model.piece, self.model.unspaced)
        drafter.extend(suffix.tolist())
        stats = AnswerStats()
        run = AnswerRun(ctx, self.model, {"lookup": drafter}, len(prefix) + len(suffix), stats, t0)
        params = AnswerParams(max_tokens, SamplingParams(temperature=0.0), None, stops=self.layout.stops)
        text = "".join(event.text for event in generate(run, params))
        return Reply(
            text, stats.ttft_ms, time.perf_counter() - t0, stats.finish_reason, stats.completion_tokens, len(suffix)
        )

    def close(self) -> None:
        self.ctx.close()
        self.model.close()


class Rag(Reader):
    """The RAG baseline: ``k`` chunks of ``chunk_tokens`` tokens, chosen per question by BM25."""

    def __init__(self, model_path: Path, threads: int = 2, chunk_tokens: int = 512, k: int = 4, **kw) -> None:
        super().__init__(model_path, threads, **kw)
        self.chunk_tokens, self.k = chunk_tokens, k
        self._dir = Path(tempfile.mkdtemp(prefix="docqa-rag-"))
        self.chunks: list[str] = []

    def index(self, text: str) -> int:
        """Cut ``text`` into chunks of ``chunk_tokens`` tokens and index them; returns the count."""
        ids = self.model.tokenize(text, parse_special=False)
        n = self.chunk_tokens
        self.chunks = [self.model.detokenize(ids[i : i + n].tolist()) for i in range(0, len(ids), n)]
        index.build(self._dir, self.chunks)
        return len(self.chunks)

    def ask(self, question: str, max_tokens: int) -> Reply:
        t0 = time.perf_counter()
        ranked = [i for i, _ in index.rank(self._dir, question)][: self.k]
        if len(ranked) < self.k:  # fewer chunks match than k: fill with the first ones, as a vector store would
            ranked += [i for i in range(len(self.chunks)) if i not in ranked][: self.k - len(ranked)]
        context = "\n\n".join(self.chunks[i].strip() for i in ranked)
        prefix = self.layout.document_prefix(self.model, context)
        reply = self.answer(prefix, question, max_tokens, t0, state=None)
        reply.prompt_tokens += len(prefix)
        return reply


class Whole(Reader):
    """The whole document prefilled once (state in RAM), each question decoding its suffix."""

    prefix: np.ndarray
    state: bytes

    def ingest(self, text: str) -> tuple[int, float]:
        """Prefill the document's prefix; returns (tokens, seconds)."""
        t0 = time.perf_counter()
        self.prefix = self.layout.document_prefix(self.model, text)
        self.ctx.clear()
        self.ctx.prefill(self.prefix, 0)
        self.state = self.ctx.state_get(0)
        return len(self.prefix), time.perf_counter() - t0

    def ask(self, question: str, max_tokens: int) -> Reply:
        return self.answer(self.prefix, question, max_tokens, time.perf_counter(), self.state)
