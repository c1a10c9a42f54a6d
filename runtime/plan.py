"""Memory planner: how many bytes a model and its contexts take, and the largest n_ctx / n_seq_max
that fit a VRAM budget.

Every rule follows the vendored llama.cpp of llama-cpp-python 0.3.36 (files under
``vendor/llama.cpp/src`` unless named otherwise). Weights, KV cache, recurrent state and the output
buffer are computed exactly from the shapes; compute buffers are an estimate (see
:func:`compute_bytes`). tests/runtime/test_plan.py checks every row against the sizes llama.cpp logs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime.plan_compute import compute_bytes, context_cells, effective_ubatch, pad
from runtime.plan_config import RS_ROLLBACK_ARCHS, PlanConfig
from runtime.shape import Layer, ModelShape, row_bytes


@dataclass(frozen=True, slots=True)
class Row:
    """One component of a plan: bytes on the GPU and in host memory, and where the rule comes from."""

    name: str
    device: int
    host: int
    rule: str

    @property
    def total(self) -> int:
        return self.device + self.host


@dataclass(frozen=True, slots=True)
class Plan:
    """What a model plus its context(s) take, in bytes.

    ``n_ctx`` is the padded cell count llama.cpp allocates (all sequences together), ``n_ctx_seq`` the
    cells one sequence may use. ``rows``: weights, kv, rs, mtp_kv, compute, mtp_compute, output,
    reserve (see :data:`Row.rule` for each rule's source).
    """

    model: str
    config: PlanConfig
    n_ctx: int
    n_ctx_seq: int
    n_ubatch: int  # effective: min(n_ubatch, n_batch, n_ctx)
    n_rs_seq: int  # effective: 0 on architectures without recurrent rollback
    kv_bytes_per_token: int  # K+V of one cell over the full-attention trunk layers
    swa_cells: int  # cells of each sliding-window layer (all streams), 0 without SWA layers
    rs_bytes_per_seq: int  # one snapshot plane of every recurrent layer (f32)
    mtp_kv_bytes_per_token: int
    weights_file: int  # every tensor in the file
    rows: tuple[Row, ...] = field(default=())

    def row(self, name: str) -> Row:
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(f"no {name!r} row in this plan (rows: {', '.join(r.name for r in self.rows)})")

    def bytes(self, name: str) -> int:
        """Total bytes (device + host) of one row."""
        return self.row(name).total

    @property
    def device_total(self) -> int:
        return sum(r.device for r in self.rows)

    @property
    def host_total(self) -> int:
        return sum(r.host for r in self.rows)


def _on_device(shape: ModelShape, cfg: PlanConfig, il: int) -> bool:
    """llama-model.cpp: the last n_gpu_layers of blocks + output go to the GPU (index n_layer_all is
    the output layer); -1 offloads everything."""
    if cfg.backend == "cpu":
        return False
    n_all = len(shape.layers)
    ngl = n_all + 1 if cfg.n_gpu_layers < 0 else cfg.n_gpu_layers
    return il >= max(n_all + 1 - ngl, 0)


def _kv_row(cfg: PlanConfig, layer: Layer, v_width: int) -> int:
    """K+V bytes of one cell of one layer (llama-kv-cache.cpp: K is [n_embd_k_gqa, cells], V is
    [n_embd_v_gqa, cells], or the widest layer's V when V is stored transposed without flash
    attention)."""
    return row_bytes(cfg.type_k, layer.n_embd_k_gqa) + row_bytes(cfg.type_v, v_width)


def plan(shape: ModelShape, cfg: PlanConfig) -> Plan:
    """The memory plan of ``shape`` with a target context (and an MTP context when ``cfg.mtp``)."""
    mtp = cfg.mtp and shape.n_layer_nextn > 0
    n_ctx, n_ctx_seq = context_cells(cfg.n_ctx, cfg.n_seq_max, cfg.kv_unified)
    n_stream = 1 if cfg.kv_unified else cfg.n_seq_max
    n_ub = effective_ubatch(cfg)
    n_rs_seq = cfg.n_rs_seq if shape.arch in RS_ROLLBACK_ARCHS else 0
    if shape.is_recurrent and n_rs_seq and n_ub <= n_rs_seq + 1:
        raise ValueError(f"n_ubatch ({n_ub}) must be > n_rs_seq + 1 ({n_rs_seq + 1}); llama.cpp aborts otherwise")
    # llama-kv-cache-iswa.cpp: SWA layers hold pad(min(n_ctx_seq, n_swa * (unified ? n_seq_max : 1)
    # + n_ubatch), 256) cells per stream unless swa_full.
    swa_seq = n_ctx_seq
    if not cfg.swa_full and shape.n_swa:
        swa_seq = pad(min(n_ctx_seq, shape.n_swa * (cfg.n_seq_max if cfg.kv_unified else 1) + n_ub))
    swa_cells = swa_seq * n_stream if any(la.swa for la in shape.layers) else 0
    v_width = max(la.n_embd_v_gqa for la in shape.layers)

    dev: dict[str, int] = {}
    host: dict[str, int] = {}

    def add(name: str, il: int, n: int) -> None:
        where = dev if _on_device(shape, cfg, il) else host
        where[name] = where.get(name, 0) + n

    kv_per_token = mtp_per_token = rs_per_seq = 0
    n_all = len(shape.layers)
    rs_rows = max(1, cfg.n_seq_max) * (1 + n_rs_seq)
    for la in shape.layers:
        if la.nextn and not mtp:
            continue  # TENSOR_SKIP without load_mtp (models/qwen35.cpp)
        add("weights", la.index, la.weight_bytes)
        if la.kind == "attention":
            row = _kv_row(cfg, la, la.n_embd_v_gqa if cfg.flash_attn else v_width)
            if la.nextn:
                mtp_per_token += row
                add("mtp_kv", la.index, row * n_ctx)
            else:
                kv_per_token += 0 if la.swa else row
                add("kv", la.index, row * (swa_cells if la.swa else n_ctx))
        elif shape.ssm is not None and not la.nextn:
            rs_per_seq += shape.ssm.bytes_per_layer
            add("rs", la.index, shape.ssm.bytes_per_layer * rs_rows)
    host["weights"] = host.get("weights", 0) + shape.input_bytes
    # A tied output reuses token_embd; llama.cpp copies it only onto a GPU (TENSOR_DUPLICATED).
    tied_copy = shape.input_bytes if shape.output_tied and _on_device(shape, cfg, n_all) else 0
    add("weights", n_all, shape.output_bytes + tied_copy)

    compute_dev = cfg.backend == "cuda" and cfg.n_gpu_layers != 0
    sizes = dict(n_kv=n_ctx_seq, n_kv_swa=swa_seq, cells=n_ctx, swa_cells=swa_cells, n_rs_seq=n_rs_seq)
    (dev if compute_dev else host)["compute"] = compute_bytes(shape, cfg, **sizes, mtp=False)
    if mtp:
        (dev if compute_dev else host)["mtp_compute"] = compute_bytes(shape, cfg, **sizes, mtp=True)
    # llama-context.cpp output_reserve(n_seq_max): host logits for n_seq_max rows (grows with use).
    host["output"] = 4 * shape.n_vocab * cfg.n_seq_max
    if cfg.backend == "cuda":
        dev["reserve"] = cfg.reserve

    fa_copy = cfg.backend == "cuda" and cfg.flash_attn and (cfg.type_k != "f16" or cfg.type_v != "f16")
    rules = {
        "weights": "tensor bytes in the GGUF; token_embd stays on the CPU (llama-model.cpp)",
        "kv": "K+V row bytes x cells per attention layer (llama-kv-cache.cpp, -iswa.cpp)",
        "rs": f"{max(1, cfg.n_seq_max)} seq x {1 + n_rs_seq} planes x conv+ssm f32 (llama-memory-recurrent.cpp)",
        "mtp_kv": "nextn layers' K+V x cells, MTP context (llama-model.cpp create_memory)",
        "compute": "estimate: masks + widest layer"
        + (" + f16 copy of a layer's K/V for CUDA FA" if fa_copy else "")
        + ", or logits (llama-context.cpp sched_reserve)",
        "mtp_compute": "estimate, MTP context's graph",
        "output": "host logits buffer, n_vocab x n_seq_max f32 (llama-context.cpp output_reserve)",
        "reserve": "CUDA context, cuBLAS, pool, fragmentation (assumed)",
    }
    rows = tuple(
        Row(name, dev.get(name, 0), host.get(name, 0), rule)
        for name, rule in rules.items()
        if name in dev or name in host
    )
    return Plan(
        model=shape.name,
        config=cfg,
        n_ctx=n_ctx,
        n_ctx_seq=n_ctx_seq,
        n_ubatch=n_ub,
        n_rs_seq=n_rs_seq,
        kv_bytes_per_token=kv_per_token,
        swa_cells=swa_cells,
        rs_bytes_per_seq=rs_per_seq,
        mtp_kv_bytes_per_token=mtp_per_token,
        weights_file=shape.file_bytes,
        rows=rows,
    )
