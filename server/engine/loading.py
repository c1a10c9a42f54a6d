"""What the engine thread loads at start: the model, its contexts and what depends on them."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path

from ingest.prompt import PromptLayout, layout_for
from runtime.llama import Context, Model
from runtime.models import ModelUnavailable, model_path
from runtime.numerics import PROBE_TEXT, TILED_ENV, restore_kernels_env, rows_agree, use_row_invariant_kernels
from server.config.memory import check_fits, context_config
from server.config.settings import Settings
from server.engine.calibration import step_costs
from server.engine.companions import NONE, Companions
from server.engine.draft_model import DraftModel, DraftModelError
from spec.cost import CostModel
from spec.limits import INVARIANT_MAX_ROWS, MAX_WINDOW
from spec.sources import REGISTRY

log = logging.getLogger("docqa.engine")


class LoadError(Exception):
    """The model or its contexts cannot be loaded with these settings; the message says why."""


@dataclass(slots=True)
class Loaded:
    model: Model
    ctx: Context  # the target context: the document sequence plus one per question
    mtp_ctx: Context | None  # the MTP draft context, when the model drafts with its MTP head
    max_window: int  # widest draft window: rollback limit (n_rs_seq on hybrid models), batch-invariant cap
    max_rows: int  # rows per decode call (n_batch; INVARIANT_MAX_ROWS under DOCQA_BATCH_INVARIANT's fallback)
    costs: CostModel  # verify and MTP step costs (adaptive window): calibrated, corrected by real steps
    layout: PromptLayout
    companions: Companions = NONE  # contexts that follow the target's sequences (a draft model)
    drafters: dict[str, str | None] = field(default_factory=dict)  # source -> None (active) or why it is off

    def close(self) -> None:
        self.companions.close()
        if self.mtp_ctx is not None:
            self.mtp_ctx.close()
        self.ctx.close()
        self.model.close()


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


def _load(s: Settings, path: Path, doc_seq: int) -> Loaded:
    model = Model(path, n_gpu_layers=s.n_gpu_layers, load_mtp=s.mtp != "off", extra_bufts=s.extra_bufts)
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
    mtp_ctx = None
    if model.mtp_loaded:
        mtp_ctx = Context(model, replace(config, mtp=True, n_rs_seq=0))
        ctx.export_hidden(masked=False)  # the target's h for every row feeds the MTP head
        mtp_ctx.export_hidden(masked=True)  # the MTP's own h of its output rows chains its drafts
    companions = NONE
    if s.draft_model_path is not None:
        try:
            draft = DraftModel.load(
                s.draft_model_path,
                model,
                config,
                doc_seq,
                s.draft_model_tokens,
                n_gpu_layers=s.n_gpu_layers,
                extra_bufts=s.extra_bufts,
            )
        except DraftModelError as exc:
            ctx.close()
            model.close()
            raise LoadError(str(exc)) from None
        companions = Companions((draft,))
    costs = CostModel(step_costs(ctx, model, mtp_ctx, s.calibration_file or s.data_dir / "calibration.json", doc_seq))
    drafters = _drafters(s, model, mtp_ctx is not None, bool(companions))
    loaded = Loaded(model, ctx, mtp_ctx, max_window, max_rows, costs, layout_for(model), companions, drafters)
    log.info(
        "model %s loaded (%s layout, n_ctx %d, %d concurrent questions, max window %d); drafters: %s",
        model.description,
        loaded.layout.kind,
        ctx.n_ctx,
        s.n_seq_max,
        max_window,
        "; ".join(f"{n} {'on' if why is None else 'off (' + why + ')'}" for n, why in drafters.items()),
    )
    return loaded


def _drafters(s: Settings, model: Model, mtp: bool, draft: bool) -> dict[str, str | None]:
    """Each draft source (spec/sources.py), and why it is off (None: on): said at start-up and in /health."""
    off = {
        "lookup": None,
        "history": None if s.answer_history else "DOCQA_ANSWER_HISTORY=false",
        "mtp": None
        if mtp
        else "DOCQA_MTP=off"
        if s.mtp == "off"
        else f"the model has no MTP layers (nextn_predict_layers = {model.n_layer_nextn})",
        "draft": None if draft else "no draft model (DOCQA_DRAFT_MODEL_PATH is not set)",
    }
    return {source.name: off.get(source.name) for source in REGISTRY}
