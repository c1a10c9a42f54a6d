"""server/engine/drafters.py, the one table of drafters: a text source is its module plus one
registration line (spec/sources.py ``register``), and then the engine makes it for every question's
sequence, says it is on, and the answer drafts with it; each model source says why it is off."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest

from server.config.settings import Settings
from server.engine import drafters
from spec import sources
from spec.lookup import NgramIndex
from spec.loop import AnswerParams, AnswerRun, AnswerStats
from spec.sampling import SamplingParams
from spec.sources import DraftInputs, Source
from testkit.harness import Prompt, generate, open_ctx, prompt_tokens

DOCUMENT = (
    "The lighthouse keeper Zebulon Quarry kept a blue parrot named Marigold. Every evening he climbed "
    "ninety-one steps to light the lamp, and the parrot rode on his shoulder the whole way up."
)


class Echo:
    """A text drafter of a test's own: what followed the newest token's latest occurrence in the document."""

    def __init__(self, document: np.ndarray) -> None:
        self.document = document.tolist()
        self.after = {token: i for i, token in enumerate(self.document)}  # the latest occurrence wins
        self.context: list[int] = []

    @classmethod
    def make(cls, inputs: DraftInputs) -> Echo:
        return cls(inputs.index.tokens)

    def extend(self, tokens) -> None:
        self.context.extend(int(t) for t in tokens)

    def propose(self, k: int, after=(), *, last: int = 0, pos: int = 0) -> list[int]:
        i = self.after.get([*self.context, *after][-1]) if self.context or after else None
        return [] if i is None else self.document[i + 1 : i + 1 + k]

    def strong(self) -> bool:
        return bool(self.context) and self.context[-1] in self.after

    def agreement(self) -> int:
        return 1 if self.strong() else 0

    def observe(self, used: int, accepted: int, target: int, step_drafted: int) -> None: ...

    def rollback(self, n_keep: int) -> None: ...


@pytest.fixture
def echo():
    yield sources.register(Source("echo", "text", "the document after the newest token", Echo.make))  # the one line
    sources.unregister("echo")


def test_a_text_source_registered_in_one_line_is_made_for_a_sequence_and_drafts(echo, gemma, tmp_path):
    prefix, suffix = prompt_tokens(gemma, DOCUMENT, "Copy the sentence about the parrot, word for word.")
    made = drafters.for_sequence(SimpleNamespace(earlier=()), NgramIndex(prefix, 2, 4), gemma, shared={})
    assert isinstance(made["echo"], Echo) and "lookup" in made, "the engine's table made it without an entry"
    assert drafters.why_off(Settings(data_dir=tmp_path), {})["echo"] is None, "and says it is on"

    ctx = open_ctx(gemma, n_ctx=1024)
    try:
        Prompt(ctx, prefix, suffix).start(ctx)
        made["echo"].extend(suffix.tolist())
        stats = AnswerStats()
        run = AnswerRun(ctx, gemma, made, len(prefix) + len(suffix), stats, time.perf_counter())
        params = AnswerParams(max_tokens=24, sampling=SamplingParams(), window=4, sources=("echo",))
        text = "".join(event.text for event in generate(run, params))
    finally:
        ctx.close()
    assert stats.drafted_by_source["echo"] > 0 and stats.accepted_by_source["echo"] > 0, (stats, text)
    assert set(stats.drafted_by_source) == set(sources.NAMES), "the stats name every source, the new one too"


def test_each_model_source_says_why_it_is_off(tmp_path):
    settings = Settings(data_dir=tmp_path, answer_history=False)
    reasons = drafters.why_off(settings, {"mtp": "DOCQA_MTP=off", "draft": "no draft model"})
    off = {"history": "DOCQA_ANSWER_HISTORY=false", "lookup": None, "mtp": "DOCQA_MTP=off", "draft": "no draft model"}
    assert reasons == off
