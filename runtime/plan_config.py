"""The planner's input: the context parameters it plans for, and the limits it knows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from runtime.kvtypes import GGML, KV_TYPES

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
    the same n_ctx, types and n_ubatch (server/engine/engine.py does that). ``n_gpu_layers`` -1 offloads
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
        if GGML[self.type_v].quantized and not self.flash_attn:
            raise ValueError(f"a quantized V cache ({self.type_v}) needs flash attention (llama-context.cpp)")
        if not 1 <= self.n_seq_max <= MAX_SEQ:
            raise ValueError(f"n_seq_max must be 1..{MAX_SEQ}, got {self.n_seq_max}")
        if self.n_ctx < 1 or self.n_rs_seq < 0 or self.n_ubatch < 1 or self.n_batch < 1:
            raise ValueError("n_ctx, n_batch and n_ubatch must be positive and n_rs_seq >= 0")
