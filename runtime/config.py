"""Context parameters as docqa passes them to ``llama_init_from_model``."""

from __future__ import annotations

from dataclasses import dataclass

from llama_cpp import llama_cpp as C

from runtime.kvtypes import KV_TYPES

FLASH_ATTN = {
    "auto": C.LLAMA_FLASH_ATTN_TYPE_AUTO,
    "on": C.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    "off": C.LLAMA_FLASH_ATTN_TYPE_DISABLED,
}


@dataclass(frozen=True, slots=True)
class ContextConfig:
    """Context parameters. ``n_ubatch`` must hold a whole verify call (window + 1 rows)."""

    n_ctx: int
    n_batch: int
    n_ubatch: int
    n_threads: int
    n_threads_batch: int
    type_k: str = "f16"
    type_v: str = "f16"
    flash_attn: str = "auto"
    swa_full: bool = False
    n_seq_max: int = 1
    kv_unified: bool = False  # one KV pool for all sequences: seq_cp shares a prefix's cells, not copies them
    n_rs_seq: int = 0  # recurrent-state snapshots: a hybrid model rolls back at most this many tokens
    mtp: bool = False  # an MTP draft context (LLAMA_CONTEXT_TYPE_MTP) instead of a target context

    def __post_init__(self) -> None:
        if self.type_k not in KV_TYPES or self.type_v not in KV_TYPES:
            raise ValueError(f"unknown KV cache type {self.type_k}/{self.type_v}; choose from {', '.join(KV_TYPES)}")
        if self.flash_attn not in FLASH_ATTN:
            raise ValueError(f"flash_attn must be one of {sorted(FLASH_ATTN)}")
        if self.n_ubatch > self.n_batch:
            raise ValueError(f"n_ubatch ({self.n_ubatch}) must be <= n_batch ({self.n_batch})")
        if self.n_rs_seq and self.n_ubatch <= self.n_rs_seq + 1:
            # llama.cpp asserts n_ubatch > n_keep_tail (= n_rs_seq + 1) and aborts the process.
            raise ValueError(f"n_ubatch ({self.n_ubatch}) must be > n_rs_seq + 1 ({self.n_rs_seq + 1})")
