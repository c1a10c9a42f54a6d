"""The ggml tensor types docqa names, in one table: their ggml ids, block layout, and which of them a
KV cache may use.

Block sizes and bytes come from ggml/src/ggml.c ``type_traits`` (q8_0 stores 32 int8 + one f16 scale
= 34 bytes per 32 values); ids from ggml.h ``enum ggml_type``. The memory planner sizes caches and
weights from these, runtime.llama passes the ids to llama.cpp, and the settings validate against
:data:`KV_TYPES`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GgmlType:
    ggml_id: int  # enum ggml_type
    block: int  # elements per block
    block_bytes: int  # bytes per block

    @property
    def quantized(self) -> bool:
        return self.block > 1


GGML: dict[str, GgmlType] = {
    "f32": GgmlType(0, 1, 4),
    "f16": GgmlType(1, 1, 2),
    "q4_0": GgmlType(2, 32, 18),
    "q4_1": GgmlType(3, 32, 20),
    "q5_0": GgmlType(6, 32, 22),
    "q5_1": GgmlType(7, 32, 24),
    "q8_0": GgmlType(8, 32, 34),
    "q4_K": GgmlType(12, 256, 144),
    "q6_K": GgmlType(14, 256, 210),
    "iq4_nl": GgmlType(20, 32, 18),
    "bf16": GgmlType(30, 1, 2),
}

#: Types llama.cpp accepts for the K and V caches (a quantized V needs flash attention).
KV_TYPES: tuple[str, ...] = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")
