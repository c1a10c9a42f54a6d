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

from bench.answer_first import AnswerThenQuote, quote_after
from bench.demos import make_demos, render
from ingest.prompt import (
    DEFAULT,
    NOT_SAID,
    QUOTE_JUDGE,
    QUOTE_REPLIES,
    PromptLayout,
    Wording,
    layout_for,
    passage_judge,
    single_turn,
)
from runtime.llama import Context, Model
from server.config.memory import judging_config
from server.config.settings import Settings
from server.engine.quotes import answer_params, pointed, pointed_constraint
from spec.lookup import LookupDrafter, NgramIndex
from spec.loop import AnswerParams, AnswerRun, AnswerStats
from spec.quote import PASSAGES, THRESHOLD, QuoteConstraint, QuoteIndex, QuoteParams, QuoteTokens
from spec.sampling import SamplingParams
from spec.support import Judgment, PassageJudge, judge_passages
from store import index
from store.passages import PassageRanks
from testkit.harness import generate, open_ctx


@dataclass
class Reply:
    text: str
    ttft_ms: float
    seconds: float
    finish_reason: str
    completion_tokens: int
    prompt_tokens: int
    quote: str | None = None  # quote-first: the quote as written
    quote_verified: bool | None = None  # the quote is the document's and the model judged it answers
    quote_sentence: str | None = None  # the document's sentence the quote is in (after its table header)
    p_none: float | None = None  # the probability of "none" as the quote's first token
    p_yes: float | None = None  # the judgment's probability of yes
    accepted: int = 0
    steps: int = 0


#: ``a=2``'s question after the held answer (ingest/prompt.py QUOTE_JUDGE asks about the question alone).
JUDGE_ANSWER = "\n\nDoes the passage give this answer to the question? Reply with yes or no."

#: Ways of answering (the ``mode`` of :meth:`Reader.answer`): the answer alone; quote-first (spec/quote.py)
#: as served; ``quote:t=0.7/k=5/n=0``: with another threshold (``t=none``: not judged), number of passages
#: the quote may start in (``k=all``: anywhere), without the number check (``n=0``, spec/support.py), or
#: answering first and quoting after (``a=1``, bench/answer_first.py; ``a=2``: the judgment
#: reads the answer too), or judged after the quote in the answer's own turn (``j=after``; served: the
#: passages judged before it, spec/support.py ``judge_passages``).
MODES: dict[str, QuoteParams | None] = {"direct": None, "quote": QuoteParams()}


def mode_params(mode: str) -> QuoteParams | None:
    """The QuoteParams of ``mode``: a name of :data:`MODES`, or ``quote:t=<threshold>/k=<passages>/n=0``."""
    if not mode.startswith("quote:"):
        return MODES[mode]
    knobs = dict(kv.split("=", 1) for kv in mode.split(":", 1)[1].split("/"))
    t, k = knobs.get("t"), knobs.get("k")
    return QuoteParams(
        threshold=THRESHOLD if t is None else None if t == "none" else float(t),
        passages=PASSAGES if k is None else None if k == "all" else int(k),
    )


def answers_first(mode: str) -> bool:
    """``mode`` answers first and quotes after (``a=1`` or ``a=2``, bench/answer_first.py)."""
    return mode.startswith("quote:") and any(kv in ("a=1", "a=2") for kv in mode.split(":", 1)[1].split("/"))


class Reader:
    """One model and context on ``threads`` threads, answering from a prefix it is given."""

    def __init__(self, model_path: Path, threads: int = 2, n_ctx: int = 8192, wording: Wording = DEFAULT) -> None:
        self.model = Model(model_path)
        self.ctx = open_ctx(self.model, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads)
        self.layout: PromptLayout = layout_for(self.model, wording)
        self.quote_tokens = QuoteTokens.of(lambda text: self.model.tokenize(text, parse_special=False), **QUOTE_REPLIES)
        self.judging: Context | None = None  # made at the first question judged before its quote

    def answer(
        self,
        prefix: np.ndarray,
        question: str,
        max_tokens: int,
        t0: float,
        state: bytes | None,
        mode: str = "direct",
        text: str = "",
    ) -> Reply:
        """Decode ``question`` after ``prefix``: restore ``state`` (the prefix's, None: prefill it
        too), prefill the suffix, answer greedily (``mode``: :func:`mode_params`; ``text``: the
        document's text in the prefix, whose tokens a quote is found in)."""
        qp = mode_params(mode)
        suffix = self.layout.question_suffix(self.model, question, quote=qp is not None and not answers_first(mode))
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
        q = None
        if qp is not None:
            index = self._quotes(prefix, text)
            common = dict(
                judge=(lambda passage: self.layout.quote_judge(self.model, question, passage)) if qp.judged else None,
                support=Judgment(question, qp.threshold, numbers=":" not in mode or "n=0" not in mode)
                if qp.judged
                else None,
            )
            if answers_first(mode):
                q = AnswerThenQuote(
                    index,
                    self.quote_tokens,
                    qp,
                    self.model.piece,
                    NOT_SAID,
                    then_quote=quote_after(self.layout, self.model),
                    ends=self.model.is_eog,
                    max_answer=max_tokens,
                    locate=lambda answer: self._region(index, f"{question} {answer}", qp.passages),
                    **common,
                )
                if qp.judged and "a=2" in mode:  # the judgment reads the held answer too (tried, not kept)
                    q._judge = self._judge_answer(question, q)
            elif qp.passages is not None and (spans := self._pointed(index, question, qp.passages)):  # as served
                q = pointed_constraint(
                    (index, self.quote_tokens, qp, self.model.piece, NOT_SAID),
                    self.layout.quote_answer(self.model, judged=False),
                    spans,
                    index,
                )
            elif qp.threshold and qp.passages is not None and "j=after" not in mode:
                q = self._judged_first(index, qp, question, mode)
            else:
                q = QuoteConstraint(
                    index,
                    self.quote_tokens,
                    qp,
                    self.model.piece,
                    NOT_SAID,
                    answer=self.layout.quote_answer(self.model, judged=qp.judged),
                    region=self._region(index, question, qp.passages),
                    **common,
                )
        params = AnswerParams(max_tokens, SamplingParams(temperature=0.0), None, stops=self.layout.stops, quote=qp)
        params = answer_params(params, q if isinstance(q, QuoteConstraint) else None)  # as served
        parts: dict[str, list[str]] = {"answer": [], "quote": []}
        for event in generate(run, params, constraint=q):
            parts[event.part].append(event.text)
        text = "".join(parts["answer"])
        if q is not None and q.span is not None and not q.refused and not text.strip():  # as the API says it
            text = q.sentence_text()
        return Reply(
            text=text,
            ttft_ms=stats.ttft_ms,
            seconds=time.perf_counter() - t0,
            finish_reason=stats.finish_reason,
            completion_tokens=stats.completion_tokens,
            prompt_tokens=len(suffix),
            quote=q.quote_text() if q is not None else None,
            quote_verified=(q.span is not None and not q.refused) if q is not None else None,
            quote_sentence=q.passage() if q is not None else None,
            p_none=q.p_none if q is not None else None,
            p_yes=q.p_yes if q is not None else None,
            accepted=stats.accepted_tokens,
            steps=stats.verify_steps,
        )

    def _judge_answer(self, question: str, q: AnswerThenQuote):
        """passage -> the judgment turn of ingest/prompt.py ``quote_judge`` with ``q``'s held answer after
        the question, asking whether the passage gives that answer (``a=2``: measured in
        bench/results/quality.md, not served)."""

        tail = self.layout.tail if self.layout.kind == "chat" else " (yes or no):"
        n_ask = len(self.model.tokenize(QUOTE_JUDGE + tail, parse_special=True))  # quote_judge's last part
        ask = self.model.tokenize(JUDGE_ANSWER + tail, parse_special=True)

        def judge(passage: str) -> np.ndarray:
            head = self.layout.quote_judge(self.model, question, passage)[:-n_ask]
            answer = self.model.tokenize(f"\n\nAnswer: {q.answer_text()}", parse_special=False)
            return np.concatenate([head, answer, ask]).astype(np.int32)

        return judge

    def _judged_first(self, index: QuoteIndex, qp: QuoteParams, question: str, mode: str) -> QuoteConstraint:
        """The served quote-first constraint (server/engine/quotes.py ``constraint``): the ``qp.passages``
        passages that best match ``question`` judged first, in a judging context of their own, and the
        quote started only in the one chosen. The p(yes) of every passage is kept (``self.judged_all``)."""
        if self.judging is None:
            self.judging = Context(self.model, judging_config(Settings(n_threads=self.ctx.config.n_threads), PASSAGES))
        self._region(index, question, qp.passages)  # the ranks of this index
        spans = [self._spans[i] for i in self._ranks.best(question, qp.passages)]
        judge = PassageJudge(self.judging, self.quote_tokens)
        support = Judgment(question, qp.threshold, numbers="n=0" not in mode)
        prompt = lambda passage: passage_judge(self.model, question, passage, limit=judge.capacity[1])  # noqa: E731
        judged = judge_passages(judge, support, index, spans, prompt)
        self.judged_all = judge.last
        best = spans[judged.best] if judged.best is not None else None
        chosen = [best] if best is not None and judged.verdict.supported else []
        return QuoteConstraint(
            index,
            self.quote_tokens,
            qp,
            self.model.piece,
            NOT_SAID,
            answer=self.layout.quote_answer(self.model, judged=False),
            region=index.region(chosen),
            judged=judged,
            closest=best,
        )

    def _pointed(self, index: QuoteIndex, question: str, k: int) -> list[tuple[int, int]]:
        """The passages holding a text the question quotes (server/engine/quotes.py ``pointed``)."""
        self._region(index, question, k)  # the ranks of this index
        return pointed(question, self._ranks, self._spans, k)

    def _region(self, index: QuoteIndex, question: str, k: int | None) -> np.ndarray | None:
        """Where a quote may start: the ``k`` passages that best match ``question`` (None: anywhere)."""
        if k is None:
            return None
        if getattr(self, "_ranks_of", None) is not index:
            spans = index.passages()
            self._ranks_of, self._spans = index, spans
            self._ranks = PassageRanks([index.reading(a, b) for a, b in spans])
        return index.region([self._spans[i] for i in sorted(self._ranks.best(question, k))])

    def _quotes(self, prefix: np.ndarray, text: str) -> QuoteIndex:
        """The quote index of ``prefix``'s document tokens, kept for the last prefix."""
        if getattr(self, "_quote_key", None) is not prefix:
            n_head = self.layout.n_head(self.model)
            n_doc = len(self.model.tokenize(text, parse_special=False))
            self._quote_key = prefix
            self._quote_made = QuoteIndex(prefix[n_head : n_head + n_doc], self.model.piece)
        return self._quote_made

    def complete(self, prompt: str, max_tokens: int = 40) -> str:
        """The model's greedy reply to ``prompt`` (one user turn, ingest/prompt.py ``single_turn``),
        up to its first line break; decoded in sequence 0, which is cleared first."""
        ids = self.model.tokenize(single_turn(self.model, prompt), parse_special=True, add_bos=self.model.add_bos)
        self.ctx.clear()
        self.ctx.prefill(ids, 0)
        out: list[int] = []
        for _ in range(max_tokens):
            token = int(np.argmax(self.ctx.logits()[-1]))
            if self.model.is_eog(token) or (b"\n" in self.model.piece(token) and out):
                break
            out.append(token)
            self.ctx.decode([token], len(ids) + len(out) - 1)
        self.ctx.clear()
        return self.model.detokenize(out)

    def close(self) -> None:
        if self.judging is not None:
            self.judging.close()
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

    def ask_modes(self, question: str, max_tokens: int, modes: list[str]) -> dict[str, Reply]:
        """The question answered in each of ``modes`` from one prefill of its retrieved chunks; each
        reply's time includes that prefill, as a single answer's would."""
        t0 = time.perf_counter()
        prefix, context = self._prompt(question)
        self.ctx.clear()
        self.ctx.prefill(prefix, 0)
        state = self.ctx.state_get(0)
        spent = time.perf_counter() - t0
        out = {}
        for mode in modes:
            reply = self.answer(prefix, question, max_tokens, time.perf_counter(), state, mode, context)
            reply.seconds += spent
            reply.ttft_ms += spent * 1000
            reply.prompt_tokens += len(prefix)
            out[mode] = reply
        return out

    def _prompt(self, question: str) -> tuple[np.ndarray, str]:
        """The prompt prefix of ``question``'s best chunks, and their text."""
        ranked = [i for i, _ in index.rank(self._dir, question)][: self.k]
        if len(ranked) < self.k:  # fewer chunks match than k: fill with the first ones, as a vector store would
            ranked += [i for i in range(len(self.chunks)) if i not in ranked][: self.k - len(ranked)]
        context = "\n\n".join(self.chunks[i].strip() for i in ranked)
        return self.layout.document_prefix(self.model, context), context

    def ask(self, question: str, max_tokens: int, mode: str = "direct") -> Reply:
        return self.ask_modes(question, max_tokens, [mode])[mode]


class Whole(Reader):
    """The whole document prefilled once (state in RAM), each question decoding its suffix."""

    prefix: np.ndarray
    state: bytes

    def ingest(self, text: str, demos: bool = False, exclude: tuple[str, ...] = ()) -> tuple[int, float]:
        """Prefill the document's prefix (with ``demos``: bench/demos.py's examples after the
        document, written by the model first, from no sentence that holds a string of ``exclude``:
        a benchmark's planted facts); returns (tokens, seconds)."""
        t0 = time.perf_counter()
        self.text = text
        self.demos = make_demos(text, self.complete, exclude=exclude) if demos else []
        self.prefix = self.layout.document_prefix(self.model, text, render(self.demos, NOT_SAID))
        self.ctx.clear()
        self.ctx.prefill(self.prefix, 0)
        self.state = self.ctx.state_get(0)
        return len(self.prefix), time.perf_counter() - t0

    def ask(self, question: str, max_tokens: int, mode: str = "direct") -> Reply:
        return self.answer(self.prefix, question, max_tokens, time.perf_counter(), self.state, mode, self.text)

    def ask_modes(self, question: str, max_tokens: int, modes: list[str]) -> dict[str, Reply]:
        """The question answered in each of ``modes`` from the document's saved state."""
        return {mode: self.ask(question, max_tokens, mode) for mode in modes}
