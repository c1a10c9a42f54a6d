"""Context cell counts and the compute-buffer estimate of the memory planner (runtime/plan.py)."""

from __future__ import annotations

from runtime.plan_config import PlanConfig
from runtime.shape import ModelShape

#: llama-context.cpp pads n_ctx (and, without a unified cache, n_ctx per sequence) to 256 cells.
CTX_PAD = 256


def pad(n: int, to: int = CTX_PAD) -> int:
    return (n + to - 1) // to * to


def context_cells(n_ctx: int, n_seq_max: int, kv_unified: bool) -> tuple[int, int]:
    """(n_ctx, n_ctx_seq) as llama-context.cpp computes them: n_ctx padded to 256; without a unified
    cache each sequence gets its own stream of pad(n_ctx / n_seq_max, 256) cells."""
    n_ctx = pad(n_ctx)
    if kv_unified:
        return n_ctx, n_ctx
    n_ctx_seq = pad(n_ctx // n_seq_max)
    return n_ctx_seq * n_seq_max, n_ctx_seq


def compute_bytes(
    shape: ModelShape,
    cfg: PlanConfig,
    *,
    n_kv: int,
    n_kv_swa: int,
    cells: int,
    swa_cells: int,
    n_rs_seq: int,
    mtp: bool,
) -> int:
    """Estimated compute buffer of one context, bytes (the ``compute buffer size`` llama.cpp logs
    after ``sched_reserve`` in llama-context.cpp reserves the worst-case n_ubatch graph).

    ``n_kv``/``n_kv_swa`` are the cells one stream's attention sees, ``cells``/``swa_cells`` the
    cells of all streams. The graph allocator reuses memory, so the buffer is the larger of:

    * the layers: the attention masks (n_kv x n_ubatch, f16 with flash attention, f32 without),
      alive through every layer, plus the widest layer. Activations per token, in f32 values, were
      fitted on llama.cpp's own numbers for tiny qwen35 models of varied widths (within 2 % for the
      trunk): ``3 n_embd + 3 n_ff`` (FFN), ``3 n_embd + 3 conv_dim`` (Gated DeltaNet, plus its
      n_seq_max x (1 + n_rs_seq) output states of d_state x d_inner f32) and ``3 n_embd + 2 q_proj``
      (attention); an MTP context has ``2 n_embd`` instead of ``3 n_embd``. Without flash attention
      the attention layer also holds f32 scores, n_kv x n_ubatch x n_head. On CUDA, flash attention
      over a K or V cache that is not f16 converts one layer's whole K/V view to f16 inside the FA
      node (ggml-cuda/fattn.cu ``ggml_cuda_flash_attn_ext_get_alloc_size``): cells x n_embd_gqa x 2.
    * the output: logits of min(n_ubatch, n_outputs_max) rows, f32 x n_vocab, plus two n_embd rows
      per token (exact for the embedded Gemma 3, whose buffer this phase sets).
    """
    n_ub = effective_ubatch(cfg)
    n_out = min(n_ub, cfg.n_outputs_max) if cfg.n_outputs_max else n_ub  # default n_outputs_max = n_batch
    layers = [la for la in shape.layers if la.nextn == mtp]
    attn = [la for la in layers if la.kind == "attention"]
    mask_elt = 2 if cfg.flash_attn else 4
    masks = n_kv * n_ub * mask_elt if any(not la.swa for la in attn) else 0
    masks += n_kv_swa * n_ub * mask_elt if any(la.swa for la in attn) else 0
    base = (2 if mtp else 3) * shape.n_embd
    phases = [4 * n_ub * (base + 3 * shape.n_ff)]
    if shape.ssm is not None and any(la.kind == "recurrent" for la in layers):
        states = cfg.n_seq_max * (1 + n_rs_seq) * 4 * shape.ssm.state_size * shape.ssm.inner_size
        phases.append(4 * n_ub * (base + 3 * shape.ssm.conv_dim) + states)
    for la in attn:
        extra = 0
        if not cfg.flash_attn:
            extra = 4 * (n_kv_swa if la.swa else n_kv) * n_ub * la.n_head
        elif cfg.backend == "cuda":
            c = swa_cells if la.swa else cells
            extra = (
                2
                * c
                * ((la.n_embd_k_gqa if cfg.type_k != "f16" else 0) + (la.n_embd_v_gqa if cfg.type_v != "f16" else 0))
            )
        phases.append(4 * n_ub * (base + 2 * shape.q_proj) + extra)
    output_phase = 4 * n_out * shape.n_vocab + 2 * 4 * n_ub * shape.n_embd
    return max(masks + max(phases), output_phase)


def effective_ubatch(cfg: PlanConfig) -> int:
    """llama-context.cpp: n_batch = min(n_ctx, n_batch) for causal models; n_ubatch <= n_batch."""
    n_ctx, _ = context_cells(cfg.n_ctx, cfg.n_seq_max, cfg.kv_unified)
    return min(cfg.n_ubatch, cfg.n_batch, n_ctx)
