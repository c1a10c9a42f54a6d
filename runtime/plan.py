"""Memory planner: how many bytes a model and its contexts take, and the largest n_ctx / n_seq_max
that fit a VRAM budget.

Every rule follows the vendored llama.cpp of llama-cpp-python 0.3.36 (files under
``vendor/llama.cpp/src`` unless named otherwise). Weights, KV cache, recurrent state and the output
buffer are computed exactly from the shapes; compute buffers are an estimate (see
:func:`compute_bytes`). tests/runtime/test_plan.py checks every row against the sizes llama.cpp logs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Literal

from runtime.shape import GGML_BLOCKS, Layer, ModelShape, row_bytes

KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")
#: llama-context.cpp pads n_ctx (and, without a unified cache, n_ctx per sequence) to 256 cells.
CTX_PAD = 256
#: LLAMA_MAX_SEQ (llama-cparams.h): the most sequence ids a context can have.
MAX_SEQ = 256
#: Device memory the planner keeps free for what llama.cpp does not log: the CUDA context, cuBLAS
#: workspace, the ggml CUDA pool (quantized activations for mmq) and fragmentation. An estimate.
DEFAULT_RESERVE = 512 * 1024**2
#: Architectures whose recurrent state keeps n_rs_seq rollback snapshots
#: (llama-arch.cpp ``llm_arch_supports_rs_rollback``); elsewhere llama.cpp clamps n_rs_seq to 0.
RS_ROLLBACK_ARCHS = frozenset(
    {"qwen35", "qwen35moe", "qwen4exp", "deepseek4", "glm5-next", "nemotron_h", "nemotron_h_moe", "lfm2", "lfm2moe"}
    | {"bailingmoe3", "kimi-k3"}
)
GiB, MiB = 1024**3, 1024**2


@dataclass(frozen=True, slots=True)
class PlanConfig:
    """Context parameters, as runtime.llama.ContextConfig passes them to llama.cpp.

    ``n_ctx`` is the requested size (llama.cpp pads it); ``flash_attn`` True stands for "on" and
    "auto" (auto turns it on wherever the backend supports it, which CUDA and the CPU do);
    ``n_outputs_max`` 0 means n_batch (llama.cpp's default); ``mtp`` adds an MTP draft context with
    the same n_ctx, types and n_ubatch (server/engine.py does that). ``n_gpu_layers`` -1 offloads
    every block and the output layer. ``backend`` "cpu" puts everything in host memory.
    """

    n_ctx: int
    n_seq_max: int = 1
    n_rs_seq: int = 0
    type_k: str = "f16"
    type_v: str = "f16"
    flash_attn: bool = True
    swa_full: bool = False
    kv_unified: bool = False
    n_batch: int = 512
    n_ubatch: int = 512
    n_outputs_max: int = 0
    mtp: bool = False
    n_gpu_layers: int = -1
    backend: Literal["cuda", "cpu"] = "cuda"
    reserve: int = DEFAULT_RESERVE

    def __post_init__(self) -> None:
        for t in (self.type_k, self.type_v):
            if t not in KV_TYPES:
                raise ValueError(f"unknown KV cache type {t!r}; choose from {', '.join(KV_TYPES)}")
        if GGML_BLOCKS[self.type_v][0] > 1 and not self.flash_attn:
            raise ValueError(f"a quantized V cache ({self.type_v}) needs flash attention (llama-context.cpp)")
        if not 1 <= self.n_seq_max <= MAX_SEQ:
            raise ValueError(f"n_seq_max must be 1..{MAX_SEQ}, got {self.n_seq_max}")
        if self.n_ctx < 1 or self.n_rs_seq < 0 or self.n_ubatch < 1 or self.n_batch < 1:
            raise ValueError("n_ctx, n_batch and n_ubatch must be positive and n_rs_seq >= 0")


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


def _pad(n: int, to: int = CTX_PAD) -> int:
    return (n + to - 1) // to * to


def context_cells(n_ctx: int, n_seq_max: int, kv_unified: bool) -> tuple[int, int]:
    """(n_ctx, n_ctx_seq) as llama-context.cpp computes them: n_ctx padded to 256; without a unified
    cache each sequence gets its own stream of pad(n_ctx / n_seq_max, 256) cells."""
    n_ctx = _pad(n_ctx)
    if kv_unified:
        return n_ctx, n_ctx
    n_ctx_seq = _pad(n_ctx // n_seq_max)
    return n_ctx_seq * n_seq_max, n_ctx_seq


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
    n_ub = _effective_ubatch(cfg)
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


def _effective_ubatch(cfg: PlanConfig) -> int:
    """llama-context.cpp: n_batch = min(n_ctx, n_batch) for causal models; n_ubatch <= n_batch."""
    n_ctx, _ = context_cells(cfg.n_ctx, cfg.n_seq_max, cfg.kv_unified)
    return min(cfg.n_ubatch, cfg.n_batch, n_ctx)


def plan(shape: ModelShape, cfg: PlanConfig) -> Plan:
    """The memory plan of ``shape`` with a target context (and an MTP context when ``cfg.mtp``)."""
    mtp = cfg.mtp and shape.n_layer_nextn > 0
    n_ctx, n_ctx_seq = context_cells(cfg.n_ctx, cfg.n_seq_max, cfg.kv_unified)
    n_stream = 1 if cfg.kv_unified else cfg.n_seq_max
    n_ub = _effective_ubatch(cfg)
    n_rs_seq = cfg.n_rs_seq if shape.arch in RS_ROLLBACK_ARCHS else 0
    if shape.is_recurrent and n_rs_seq and n_ub <= n_rs_seq + 1:
        raise ValueError(f"n_ubatch ({n_ub}) must be > n_rs_seq + 1 ({n_rs_seq + 1}); llama.cpp aborts otherwise")
    # llama-kv-cache-iswa.cpp: SWA layers hold pad(min(n_ctx_seq, n_swa * (unified ? n_seq_max : 1)
    # + n_ubatch), 256) cells per stream unless swa_full.
    swa_seq = n_ctx_seq
    if not cfg.swa_full and shape.n_swa:
        swa_seq = _pad(min(n_ctx_seq, shape.n_swa * (cfg.n_seq_max if cfg.kv_unified else 1) + n_ub))
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


@dataclass(frozen=True, slots=True)
class Fit:
    """Largest sizes that fit a device budget (bytes); 0 when nothing fits.

    ``n_ctx`` is for the config's n_seq_max, ``n_seq_max`` for the config's n_ctx, and ``frontier``
    maps n_seq_max to the largest n_ctx for a few sequence counts."""

    budget: int
    n_ctx: int
    n_seq_max: int
    frontier: tuple[tuple[int, int], ...]


def largest_n_ctx(shape: ModelShape, cfg: PlanConfig, budget: int) -> int:
    """Largest padded n_ctx (<= n_ctx_train when known) whose plan fits ``budget`` device bytes."""
    limit = shape.n_ctx_train or 1 << 22
    lo, hi = 0, limit // CTX_PAD  # in units of 256 cells; memory grows with n_ctx
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if plan(shape, replace(cfg, n_ctx=mid * CTX_PAD)).device_total <= budget:
            lo = mid
        else:
            hi = mid - 1
    return plan(shape, replace(cfg, n_ctx=lo * CTX_PAD)).n_ctx if lo else 0


def largest_n_seq_max(shape: ModelShape, cfg: PlanConfig, budget: int, limit: int = MAX_SEQ) -> int:
    """Largest n_seq_max (<= ``limit``) whose plan at ``cfg.n_ctx`` fits ``budget`` device bytes."""
    best = 0
    for n in range(1, limit + 1):
        if plan(shape, replace(cfg, n_seq_max=n)).device_total > budget:
            break
        best = n
    return best


def fit(shape: ModelShape, cfg: PlanConfig, budget: int, seqs: Iterable[int] = (1, 2, 4, 8, 16)) -> Fit:
    """The largest n_ctx and n_seq_max that fit ``budget`` bytes of device memory (see :class:`Fit`)."""
    frontier = tuple((n, largest_n_ctx(shape, replace(cfg, n_seq_max=n), budget)) for n in seqs)
    return Fit(budget, largest_n_ctx(shape, cfg, budget), largest_n_seq_max(shape, cfg, budget), frontier)


_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*((?:[kmgt]i?)?b?)\s*$", re.IGNORECASE)


def parse_size(text: str | int) -> int:
    """Bytes from "24GiB", "24000MiB", "24GB" (10^9), "24G" (GiB) or a plain byte count."""
    if isinstance(text, int):
        return text
    m = _SIZE.match(text)
    if m is None:
        raise ValueError(f"cannot read a size from {text!r}; write e.g. 24GiB, 24000MiB or 24GB")
    number, unit = float(m[1]), m[2].lower()
    if unit in ("", "b"):
        return int(number)
    power = "kmgt".index(unit[0]) + 1
    base = 1000 if unit.endswith("b") and not unit.endswith("ib") else 1024
    return int(number * base**power)


def format_size(n: int) -> str:
    """1.23 GiB / 456.7 MiB / 8.0 KiB."""
    if n >= GiB:
        return f"{n / GiB:.2f} GiB"
    if n >= MiB:
        return f"{n / MiB:.1f} MiB"
    return f"{n / 1024:.1f} KiB" if n else "-"


def render(p: Plan, fitted: Fit | None = None) -> str:
    """A human-readable table of a plan, and of what fits when ``fitted`` is given."""
    c = p.config
    kv = f"K {c.type_k} / V {c.type_v}"
    head = [
        f"Memory plan: {p.model}",
        f"n_ctx {p.n_ctx:,} ({'unified' if c.kv_unified else f'{c.n_seq_max} x {p.n_ctx_seq:,}'}), "
        f"n_seq_max {c.n_seq_max}, n_rs_seq {p.n_rs_seq}, {kv}, flash attention {'on' if c.flash_attn else 'off'}, "
        f"n_ubatch {p.n_ubatch}, MTP {'on' if 'mtp_kv' in {r.name for r in p.rows} else 'off'}, "
        f"{'CPU only' if c.backend == 'cpu' else f'n_gpu_layers {c.n_gpu_layers}'}",
        f"KV {p.kv_bytes_per_token:,} B/token"
        + (f" (+ {p.mtp_kv_bytes_per_token:,} B/token MTP)" if p.mtp_kv_bytes_per_token else "")
        + (f", SWA layers {p.swa_cells:,} cells" if p.swa_cells else "")
        + (f", recurrent state {format_size(p.rs_bytes_per_seq)} per sequence and plane" if p.rs_bytes_per_seq else "")
        + f"; file tensors {format_size(p.weights_file)}",
        "",
        f"| {'component':<12} | {'GPU':>10} | {'host':>10} | rule (source) |",
        f"|{'-' * 14}|{'-' * 12}|{'-' * 12}|---------------|",
    ]
    body = [f"| {r.name:<12} | {format_size(r.device):>10} | {format_size(r.host):>10} | {r.rule} |" for r in p.rows]
    body.append(f"| {'total':<12} | {format_size(p.device_total):>10} | {format_size(p.host_total):>10} | |")
    tail: list[str] = []
    if fitted is not None:
        free = fitted.budget - p.device_total
        verdict = f"fits, {format_size(free)} free" if free >= 0 else f"does NOT fit, {format_size(-free)} over"
        tail = [
            "",
            f"Budget {format_size(fitted.budget)}: {verdict}.",
            f"Largest n_ctx at n_seq_max {c.n_seq_max}: {fitted.n_ctx:,}" + ("" if fitted.n_ctx else " (nothing fits)"),
            f"Largest n_seq_max at n_ctx {p.n_ctx:,}: {fitted.n_seq_max}" + ("" if fitted.n_seq_max else " (none)"),
            "Largest n_ctx by n_seq_max: "
            + ", ".join(f"{n}: {ctx:,}" if ctx else f"{n}: none" for n, ctx in fitted.frontier),
        ]
    return "\n".join(head + body + tail)
