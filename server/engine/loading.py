"""What the engine thread loads at start: the model, its contexts and what depends on them."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from ingest.prompt import QUOTE_REPLIES, PromptLayout, layout_for
from runtime.llama import Context, Model
from runtime.model import acquire, release
from runtime.models import ModelUnavailable, model_path
from runtime.numerics import PROBE_TEXT, TILED_ENV, restore_kernels_env, rows_agree, use_row_invariant_kernels
from runtime.plan_fit import format_size
from runtime.system import backends
from server.config.memory import check_fits, context_config, judging_config, judging_cost, reader_cost
from server.config.settings import Settings
from server.engine.calibration import step_costs
from server.engine.contexts import Contexts
from server.engine.draft_model import DraftModelError
from server.engine.drafters import load_companions, why_off
from spec.cost import CostModel
from spec.limits import INVARIANT_MAX_ROWS, MAX_WINDOW
from spec.quote import PASSAGES, QuoteTokens

log = logging.getLogger("docqa.engine")


class LoadError(Exception):
    """The model or its contexts cannot be loaded with these settings; the message says why."""


@dataclass(slots=True)
class Loaded:
    model: Model
    contexts: Contexts  # the target's (the document sequence plus one per question) and its companions'
    max_window: int  # widest draft window: rollback limit (n_rs_seq on hybrid models), batch-invariant cap
    max_rows: int  # rows per decode call (n_batch; INVARIANT_MAX_ROWS under DOCQA_BATCH_INVARIANT's fallback)
    costs: CostModel  # verify and draft step costs (adaptive window): calibrated, corrected by real steps
    layout: PromptLayout
    drafters: dict[str, str | None] = field(default_factory=dict)  # source -> None (active) or why it is off
    reader: str | None = None  # what the reader costs (DOCQA_CPU_REPACK=pair; None: documents are read in the target)
    quote_tokens: QuoteTokens = field(init=False)  # line-break, "none" and yes/no tokens, for quote-first answers

    def __post_init__(self) -> None:
        self.quote_tokens = QuoteTokens.of(lambda text: self.model.tokenize(text, parse_special=False), **QUOTE_REPLIES)

    @property
    def ctx(self) -> Context:
        """The target context."""
        return self.contexts.target

    def close(self) -> None:
        """Free the contexts; the model is kept loaded for a server started again in this process
        (runtime/model.py ``release``)."""
        self.contexts.close()
        release(self.model)


def load(settings: Settings, doc_seq: int) -> Loaded:
    """Load the model and create the contexts ``settings`` describe; measure (or read back) the step
    costs on ``doc_seq``, which is left empty. Raises LoadError with a reason a user can act on."""
    s = settings
    try:
        path = s.model_path or model_path(s.model, s.data_dir)
    except ModelUnavailable as exc:
        raise LoadError(str(exc)) from None
    try:
        check_fits(s, path)  # DOCQA_VRAM_BYTES: refuse a configuration that cannot fit, with the numbers
    except ValueError as exc:
        raise LoadError(str(exc)) from None
    if not s.batch_invariant:
        return _load(s, path, doc_seq)
    previous = use_row_invariant_kernels()  # before the first decode of this process (runtime/numerics.py)
    try:
        return _load(s, path, doc_seq)
    finally:
        restore_kernels_env(previous)  # latched by the probe's decodes


def _judging(s: Settings, model: Model, path: Path) -> Context | None:
    """The small context where quote-first passages are judged before their quote (spec/support.py), made
    where the server answers quote first by default (DOCQA_ANSWER_MODE) with a threshold above 0; None
    elsewhere, or where it does not fit what the model leaves of DOCQA_VRAM_BYTES (server/config/memory.py
    ``judging_cost``) or cannot be made, with a warning: a quote-first answer is then judged after its
    quote, in its own turn."""
    if s.answer_mode_for_model() != "quote" or not s.quote_support:
        return None
    cost, left = judging_cost(s, path, PASSAGES)
    if left is not None and cost > left:
        log.warning(
            "the context where quote-first passages are judged needs %s of GPU memory and DOCQA_VRAM_BYTES "
            "leaves %s after the model: quote-first answers are judged after their quote instead",
            format_size(cost),
            format_size(max(left, 0)),
        )
        return None
    try:
        return Context(model, judging_config(s, PASSAGES))
    except Exception as exc:
        log.warning(
            "the context where quote-first passages are judged could not be made (%s): quote-first answers are "
            "judged after their quote instead",
            exc,
        )
        return None


def _load(s: Settings, path: Path, doc_seq: int) -> Loaded:
    model = acquire(path, n_gpu_layers=s.n_gpu_layers, load_mtp=s.mtp != "off", extra_bufts=s.extra_bufts)
    if s.mtp == "on" and not model.mtp_loaded:
        model.close()
        raise LoadError(
            f"DOCQA_MTP=on but {path.name} has no MTP layers (nextn_predict_layers is 0); use a GGUF "
            "with MTP layers, or set DOCQA_MTP=auto (lookup drafts only) or off"
        )
    if s.n_ctx > model.n_ctx_train > 0:
        log.warning(
            "DOCQA_N_CTX %d is more than %s was trained for (%d tokens): answers about text past that length "
            "may degrade; DOCQA_N_CTX=%d is the most it supports as trained",
            s.n_ctx,
            path.name,
            model.n_ctx_train,
            model.n_ctx_train,
        )
    config = context_config(s, model.is_recurrent)
    ctx = Context(model, config)
    # The effective n_rs_seq: llama.cpp clamps it to 0 on architectures without recurrent rollback (qwen3next).
    max_window = ctx.n_rs_seq if model.is_recurrent else MAX_WINDOW
    max_rows = config.n_batch
    if s.batch_invariant and not rows_agree(
        ctx, model.tokenize(PROBE_TEXT, parse_special=False, add_bos=True), doc_seq
    ):
        # The per-row kernels could not be chosen (a decode ran in this process before, or another
        # llama.cpp build): keep every call in the few-rows regime instead (spec/limits.py).
        log.warning(
            "DOCQA_BATCH_INVARIANT: a row's logits differ between calls of 1 and of 8+ rows in this process "
            "(%s=0 was set too late, or this llama.cpp has another kernel switch); decode calls are capped "
            "at %d rows and the draft window at %d, which costs speed",
            TILED_ENV,
            INVARIANT_MAX_ROWS,
            INVARIANT_MAX_ROWS - 1,
        )
        max_rows = min(max_rows, INVARIANT_MAX_ROWS)
        max_window = min(max_window, INVARIANT_MAX_ROWS - 1)
    try:
        companions, models_off = load_companions(s, model, ctx, config, doc_seq)
    except DraftModelError as exc:
        ctx.close()
        model.close()
        raise LoadError(str(exc)) from None
    try:
        reader = _reader(s, path, config, mtp="mtp" in companions.names)
    except Exception as exc:
        companions.close()
        ctx.close()
        model.close()
        why = f"the reader of DOCQA_CPU_REPACK=pair could not be loaded ({exc}); set DOCQA_CPU_REPACK=on"
        raise LoadError(why) from None
    judging = _judging(s, model, path)
    contexts = Contexts(ctx, companions, reader, judging)
    costs = CostModel(step_costs(contexts, model, s.calibration_file or s.data_dir / "calibration.json", doc_seq))
    off = why_off(s, models_off)
    loaded = Loaded(model, contexts, max_window, max_rows, costs, layout_for(model), off)
    loaded.reader = None if reader is None else reader_note(s, path)
    log.info(
        "model %s loaded (%s layout, n_ctx %d, %d concurrent questions, max window %d%s); drafters: %s",
        model.description,
        loaded.layout.kind,
        ctx.n_ctx,
        s.n_seq_max,
        max_window,
        "" if reader is None else f"; {loaded.reader}",
        "; ".join(f"{n} {'on' if why is None else 'off (' + why + ')'}" for n, why in off.items()),
    )
    return loaded


def _reader(s: Settings, path: Path, config, mtp: bool) -> Context | None:
    """With DOCQA_CPU_REPACK=pair (server/engine/layout.py): a second instance of the model with plain
    weights and a context shaped as the target's, which documents are read in; None otherwise. With
    an MTP head it exports its hidden states, which the head follows while a document is read."""
    if not s.read_plain:
        return None
    if gpus := backends():  # the extra CPU buffer types are a CPU layout; a GPU would hold the weights twice
        raise ValueError(f"a layout pair is for CPU builds, and this one runs on {', '.join(gpus)}")
    plain = Model(path, n_gpu_layers=s.n_gpu_layers, extra_bufts=False)
    try:
        reader = Context(plain, config)
    except Exception:
        plain.close()
        raise
    if mtp:
        reader.export_hidden(masked=False)
    return reader


def reader_note(s: Settings, path: Path) -> str:
    """What the reader costs, in one line (server/config/memory.py ``reader_cost``)."""
    mapped, own = reader_cost(s, path)
    return (
        f"documents read with plain weights by a second instance: +{mapped / 2**20:.0f} MiB of mapped "
        f"weights (page cache) and +{own / 2**20:.0f} MiB for its KV cache and buffers"
    )
