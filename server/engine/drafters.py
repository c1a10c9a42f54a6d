"""Every draft source's drafters, in one table: for each source name, what makes its drafter for a
sequence and why it is off here.

A text source (spec/sources.py) is made for each answer from what the answer is about
(``DraftInputs``): a new one is its spec/ module and its registry line; it appears here only when a
setting can turn it off (:data:`OFF`). A model source drafts from a context of its own that follows
the target's sequences, a companion (server/engine/companions.py): its loader
(:data:`MODEL_SOURCES`) makes it at start-up or says why it cannot, and its drafter for a question
comes from the companion when the question's sequence shares the prefix.

The lookup source's n-gram index of each document is kept here too (:class:`LookupIndexes`), keyed
weakly by the document's cache entry, as the other features keep what they build for a document.
"""

from __future__ import annotations

from collections.abc import Callable
from weakref import WeakKeyDictionary

from runtime.llama import Context, ContextConfig, Model
from server.config.settings import Settings
from server.engine.companions import Companion, Companions
from server.engine.draft_model import DraftModel
from server.engine.hot import HotDoc
from server.engine.jobs import AnswerJob
from server.engine.mtp import MtpHead
from spec import sources
from spec.history import AnswerHistory
from spec.lookup import NgramIndex
from spec.sources import Drafter, DraftInputs, text_drafters

#: Text sources a setting turns off: why, given the settings (None: on).
OFF: dict[str, Callable[[Settings], str | None]] = {
    "history": lambda s: None if s.answer_history else "DOCQA_ANSWER_HISTORY=false",
}

#: (settings, model, target context, its config, the document sequence) -> the companion, or why not
Loader = Callable[[Settings, Model, Context, ContextConfig, int], Companion | str]


def _mtp(s: Settings, model: Model, target: Context, config: ContextConfig, doc_seq: int) -> MtpHead | str:
    if not model.mtp_loaded:
        if s.mtp == "off":
            return "DOCQA_MTP=off"
        return f"the model has no MTP layers (nextn_predict_layers = {model.n_layer_nextn})"
    return MtpHead.load(model, target, config, doc_seq, s.mtp_draft_tokens)


def _draft(s: Settings, model: Model, target: Context, config: ContextConfig, doc_seq: int) -> DraftModel | str:
    """Raises DraftModelError when the draft model cannot draft for this target."""
    if s.draft_model_path is None:
        return "no draft model (DOCQA_DRAFT_MODEL_PATH is not set)"
    path, depth = s.draft_model_path, s.draft_model_tokens
    return DraftModel.load(path, model, config, doc_seq, depth, n_gpu_layers=s.n_gpu_layers, extra_bufts=s.extra_bufts)


#: Model sources by name, with their companion's loader.
MODEL_SOURCES: dict[str, Loader] = {"mtp": _mtp, "draft": _draft}


def load_companions(
    s: Settings, model: Model, target: Context, config: ContextConfig, doc_seq: int
) -> tuple[Companions, dict[str, str]]:
    """The companions of the model sources that can draft here, and why each other one cannot. Closes
    what it loaded before raising (a draft model that cannot draft for this target: DraftModelError)."""
    loaded: list[Companion] = []
    off: dict[str, str] = {}
    try:
        for name, load in MODEL_SOURCES.items():
            made = load(s, model, target, config, doc_seq)
            if isinstance(made, str):
                off[name] = made
            else:
                loaded.append(made)
    except Exception:
        Companions(loaded).close()
        raise
    return Companions(loaded), off


def why_off(s: Settings, models_off: dict[str, str]) -> dict[str, str | None]:
    """Each registered source, and why it is off here (None: on): said at start-up and in /health."""
    reasons: dict[str, str | None] = {}
    for source in sources.REGISTRY:
        if source.kind == "model":
            loader = source.name in MODEL_SOURCES
            reasons[source.name] = models_off.get(source.name) if loader else "no companion loads it"
        else:
            reasons[source.name] = OFF[source.name](s) if source.name in OFF else None
    return reasons


class LookupIndexes:
    """The n-gram index (spec/lookup.py, sizes ``min_ngram..max_ngram``) of each document, segment or
    part read so far that questions are asked about, keyed weakly by its cache entry (a HotDoc: it goes
    with the entry). Engine thread only."""

    def __init__(self, min_ngram: int = 2, max_ngram: int = 4) -> None:
        self.min_ngram, self.max_ngram = min_ngram, max_ngram
        self._of: WeakKeyDictionary = WeakKeyDictionary()  # HotDoc -> its NgramIndex

    def attach(self, key: str, hot: HotDoc) -> None:
        """Index the new cache entry ``hot`` (HotDocs' ``on_new``): O(n_prefix) when the document comes
        into RAM (an ingestion's end, a restore), not at its first question."""
        self.of(hot)

    def of(self, hot: HotDoc) -> NgramIndex:
        """``hot``'s index, made now if it has none yet (a part read so far: server/engine/partial.py)."""
        if (index := self._of.get(hot)) is None:
            index = self._of[hot] = NgramIndex(hot.prefix, self.min_ngram, self.max_ngram)
        return index


def for_sequence(
    job: AnswerJob,
    index: NgramIndex,
    model: Model,
    shared: dict[str, Drafter],
    history: AnswerHistory | None = None,
) -> dict[str, Drafter]:
    """The drafters of question ``job``'s sequence: each text source's, made from its document's
    n-gram ``index`` and the turns the request brings, and the model sources' (``shared``: by the
    companions that share its prefix, Runner.share_prefix); ``history``: the earlier answers about it
    (None: none)."""
    inputs = DraftInputs(index, model.piece, model.unspaced, history, job.earlier)
    return {**text_drafters(inputs), **shared}
