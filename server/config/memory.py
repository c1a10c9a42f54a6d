"""Settings -> memory plan: the check that a configuration fits the GPU, and the settings presets
(applied by :func:`with_preset`, outside the Settings validator, so settings never import the planner).

The engine creates its contexts from Settings (server/engine/engine.py); :func:`plan_config` mirrors that
mapping, so a plan made here is the plan of what the engine will allocate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from runtime.llama import ContextConfig
from runtime.plan import Plan, plan
from runtime.plan_config import PlanConfig
from runtime.plan_fit import format_size, largest_n_ctx, largest_n_seq_max
from runtime.presets import preset
from runtime.shape import ModelShape
from server.config.settings import MAX_SEQS, Settings
from spec.limits import MAX_WINDOW

#: Settings presets: the model shape planned for, the VRAM it assumes, the context wanted, and the
#: settings it fills when the user has not set them (DOCQA_PRESET).
PRESETS = {
    "rtx3090-27b": {
        "shape": "qwen3.6-27b-q4_k_m",
        "vram_bytes": 24 * 1024**3,
        "n_ctx": 139_264,  # 136 Ki tokens: the long-document target (4.5 GiB of q8_0 KV for a 27B hybrid)
        # One 139k-token document fills the card: a second one cannot be prefilled next to it.
        "fixed": {"type_k": "q8_0", "type_v": "q8_0", "flash_attn": "on", "parallel_ingest": False},
    },
}
#: n_rs_seq values a preset tries, widest first; 4 still covers MTP's 3-token drafts.
RS_CHOICES = (MAX_WINDOW, 12, 8, 6, 4)


def n_sequences(settings: Settings, recurrent: bool = False) -> int:
    """llama.cpp sequences: the document's, one per concurrent question, and with ``parallel_ingest``
    one to ingest into, and on a model without recurrent state one more, where a reading is paused
    for a shorter one (server/engine/scheduler.py; a recurrent model would pay a recurrent state and
    its rollback planes for it)."""
    return 1 + settings.n_seq_max + int(settings.parallel_ingest) + int(pause_seq(settings, recurrent))


def pause_seq(settings: Settings, recurrent: bool) -> bool:
    """Whether the engine keeps a second ingest sequence, to pause a reading in (:func:`n_sequences`)."""
    return settings.parallel_ingest and not recurrent


def context_config(settings: Settings, recurrent: bool) -> ContextConfig:
    """The target context the engine creates for ``settings`` (its MTP context is the same with
    ``mtp=True, n_rs_seq=0``): one sequence holds the document and each of ``n_seq_max`` concurrent
    questions gets its own, in one unified KV pool so the document prefix is stored once (with
    ``kv_unified``, ``seq_cp`` only tags the prefix's cells with another sequence id; without it each
    sequence has a stream of its own and a partial copy aborts). Hybrid/recurrent models roll back
    through per-token recurrent snapshots (``n_rs_seq``): one per draft token of the widest window,
    since a recurrent state can be rolled back by at most ``n_rs_seq`` tokens. :func:`plan_config`
    mirrors this mapping for the planner."""
    s = settings
    return ContextConfig(
        n_ctx=s.n_ctx,
        n_batch=s.n_batch,
        n_ubatch=s.n_ubatch,
        n_threads=s.n_threads,
        n_threads_batch=s.n_threads_batch or s.n_threads,
        type_k=s.type_k,
        type_v=s.type_v,
        flash_attn=s.flash_attn,
        swa_full=s.swa_full,
        n_rs_seq=(MAX_WINDOW if s.n_rs_seq is None else s.n_rs_seq) if recurrent else 0,
        n_seq_max=n_sequences(s, recurrent),
        kv_unified=True,
    )


#: Tokens of one passage judgment's prompt (ingest/prompt.py ``passage_judge``: the scaffolding, a table's
#: header row, the passage and the question, each cut to fit).
JUDGE_TOKENS = 768


def judging_config(settings: Settings, passages: int) -> ContextConfig:
    """The small context where a quote-first question's ``passages`` best passages are judged, one
    sequence each (spec/support.py ``PassageJudge``): :data:`JUDGE_TOKENS` cells per sequence, the
    target's cache types and threads, no rollback (a judgment is decoded once and cleared)."""
    s = settings
    n_ctx = passages * JUDGE_TOKENS
    return ContextConfig(
        n_ctx=n_ctx,
        n_batch=n_ctx,
        n_ubatch=min(s.n_ubatch, n_ctx),
        n_threads=s.n_threads,
        n_threads_batch=s.n_threads_batch or s.n_threads,
        type_k=s.type_k,
        type_v=s.type_v,
        flash_attn=s.flash_attn,
        n_seq_max=passages,
    )


def plan_config(settings: Settings, shape: ModelShape) -> PlanConfig:
    """The contexts server/engine/engine.py creates for ``settings`` on this model, as a PlanConfig: one
    sequence holds the document, each of ``n_seq_max`` concurrent questions gets its own, and with
    ``parallel_ingest`` one or two more take new documents' prefill (:func:`n_sequences`), in one unified
    KV pool; the MTP context has the same shape.
    Keep this in step with :func:`context_config`."""
    n_rs_seq = (MAX_WINDOW if settings.n_rs_seq is None else settings.n_rs_seq) if shape.is_recurrent else 0
    return PlanConfig(
        n_ctx=settings.n_ctx,
        n_seq_max=n_sequences(settings, shape.is_recurrent),
        n_rs_seq=n_rs_seq,
        type_k=settings.type_k,
        type_v=settings.type_v,
        flash_attn=settings.flash_attn != "off",
        swa_full=settings.swa_full,
        kv_unified=True,
        n_batch=settings.n_batch,
        n_ubatch=settings.n_ubatch,
        mtp=settings.mtp != "off" and shape.n_layer_nextn > 0,
        n_gpu_layers=settings.n_gpu_layers,
    )


def check_fits(settings: Settings, model_path: Path) -> None:
    """Raise ValueError when the model and contexts ``settings`` describe need more GPU memory than
    ``settings.vram_bytes`` (DOCQA_VRAM_BYTES); do nothing when that is unset.

    The message lists needed vs available bytes per component and the largest n_ctx that would fit.
    """
    if settings.vram_bytes is None:
        return
    shape = ModelShape.from_gguf(model_path)
    cfg = plan_config(settings, shape)
    p = plan(shape, cfg)
    if p.device_total <= settings.vram_bytes:
        return
    raise ValueError(_overflow_message(p, shape, cfg, settings))


def reader_cost(settings: Settings, model_path: Path) -> tuple[int, int]:
    """What the reader of ``DOCQA_CPU_REPACK=pair`` adds (server/engine/loading.py), in bytes: (the model
    file mapped a second time, its context's KV cache, recurrent states and compute buffers), from the
    same plan :func:`check_fits` uses. The mapped weights are page cache, shared with the answering
    instance's plain tensors; the rest is the reader's own memory."""
    shape = ModelShape.from_gguf(model_path)
    p = plan(shape, plan_config(settings, shape))
    own = sum(p.bytes(name) for name in ("kv", "rs", "compute") if any(r.name == name for r in p.rows))
    return model_path.stat().st_size, own


def judging_cost(settings: Settings, model_path: Path, passages: int) -> tuple[int, int]:
    """(bytes the judging context of :func:`judging_config` takes on the device: its KV cache, recurrent
    states and compute buffers; bytes the model and its contexts leave of ``DOCQA_VRAM_BYTES``, None when
    that is unset), from the same plans as :func:`check_fits`."""
    shape = ModelShape.from_gguf(model_path)
    main = plan(shape, plan_config(settings, shape))
    judging = judging_config(settings, passages)
    cfg = replace(
        plan_config(settings, shape), n_ctx=judging.n_ctx, n_seq_max=passages, n_rs_seq=0, mtp=False,
        n_batch=judging.n_batch, n_ubatch=judging.n_ubatch,
    )  # fmt: skip
    own = plan(shape, cfg)
    cost = sum(r.device for r in own.rows if r.name in ("kv", "rs", "compute"))
    left = None if settings.vram_bytes is None else settings.vram_bytes - main.device_total
    return cost, left


def _overflow_message(p: Plan, shape: ModelShape, cfg: PlanConfig, settings: Settings) -> str:
    budget = settings.vram_bytes
    parts = ", ".join(f"{r.name} {format_size(r.device)}" for r in p.rows if r.device)
    best = largest_n_ctx(shape, cfg, budget)
    hint = (
        f"DOCQA_N_CTX={best} fits with these settings"
        if best
        else "even the smallest context does not fit: offload fewer layers (DOCQA_N_GPU_LAYERS) or use a smaller model"
    )
    return (
        f"{shape.name} with n_ctx {p.n_ctx}, {settings.n_seq_max} concurrent questions, n_rs_seq {p.n_rs_seq}, KV "
        f"{cfg.type_k}/{cfg.type_v} needs {format_size(p.device_total)} of GPU memory ({parts}) but "
        f"DOCQA_VRAM_BYTES allows {format_size(budget)} ({format_size(p.device_total - budget)} over); {hint}, "
        "or lower DOCQA_N_SEQ_MAX / DOCQA_N_RS_SEQ, or quantize the KV cache (DOCQA_TYPE_K/V=q4_0). "
        "`docqa plan` prints the whole breakdown."
    )


def with_preset(settings: Settings) -> Settings:
    """``settings`` with its preset (DOCQA_PRESET) filled into the fields the user left unset; the
    same object when it names none. Idempotent: the filled fields count as set afterwards."""
    if settings.preset is None:
        return settings
    return settings.model_copy(update=preset_values(settings.preset, settings))


def preset_values(name: str, settings: Settings) -> dict[str, object]:
    """The values preset ``name`` gives the fields the user left unset (``model_fields_set``).

    Fixed values first (KV types, flash attention, the VRAM budget). Then, on the preset's model
    shape: the widest n_rs_seq of :data:`RS_CHOICES` with which the preset's n_ctx fits at least one
    question (or the user's n_seq_max questions); if none does, the narrowest and the largest n_ctx
    that fits with it (long documents first); then as many questions (n_seq_max) as fit.
    """
    spec = PRESETS[name]
    explicit = settings.model_fields_set
    values: dict[str, object] = {k: v for k, v in spec["fixed"].items() if k not in explicit}
    if "vram_bytes" not in explicit:
        values["vram_bytes"] = spec["vram_bytes"]
    budget = int(values.get("vram_bytes") or settings.vram_bytes or spec["vram_bytes"])
    shape = preset(spec["shape"])
    if "n_ctx" not in explicit:
        values["n_ctx"] = spec["n_ctx"]
    if "n_seq_max" not in explicit:
        values["n_seq_max"] = 1
    choices = [settings.n_rs_seq] if "n_rs_seq" in explicit else list(RS_CHOICES)

    def config(**update: object) -> PlanConfig:
        return plan_config(settings.model_copy(update={**values, **update}), shape)

    fitting = [rs for rs in choices if plan(shape, config(n_rs_seq=rs)).device_total <= budget]
    values["n_rs_seq"] = fitting[0] if fitting else choices[-1]
    if not fitting and "n_ctx" not in explicit:
        values["n_ctx"] = largest_n_ctx(shape, config(), budget) or spec["n_ctx"]
    if "n_seq_max" not in explicit:
        extra = n_sequences(settings.model_copy(update={**values, "n_seq_max": 0}), shape.is_recurrent)  # not questions
        contexts = largest_n_seq_max(shape, config(), budget, limit=MAX_SEQS + extra)
        values["n_seq_max"] = max(1, contexts - extra)
    if "n_rs_seq" in explicit:
        del values["n_rs_seq"]
    return values


def snapshot_estimate(settings: Settings, model_path: Path) -> Callable[[int], int]:
    """``bytes(n_tokens)``: an upper bound on the size of a document snapshot on disk (state.bin, and
    the MTP part), from the memory planner: every full-attention layer's K+V per token, the sliding-
    window layers' cells (at most n_swa + n_ubatch of them), one recurrent state, the token ids."""
    return snapshot_estimate_for(settings, ModelShape.from_gguf(model_path))


def snapshot_estimate_for(settings: Settings, shape: ModelShape) -> Callable[[int], int]:
    """:func:`snapshot_estimate` for a model shape (a GGUF's, or a preset's: bench/cluster.py)."""
    p = plan(shape, plan_config(settings, shape))
    per_token = p.kv_bytes_per_token + p.mtp_kv_bytes_per_token + 4
    swa_per_cell = (p.bytes("kv") - p.kv_bytes_per_token * p.n_ctx) // p.swa_cells if p.swa_cells else 0
    swa_window = shape.n_swa + p.n_ubatch

    def estimate(n_tokens: int) -> int:
        return n_tokens * per_token + min(n_tokens, swa_window) * swa_per_cell + p.rs_bytes_per_seq + 64 * 1024

    return estimate
