"""What the memory planner needs to know about a model: per-layer attention geometry, the recurrent
state, and how many bytes of weights each layer holds.

A :class:`ModelShape` comes from a GGUF file's metadata and tensor table (:meth:`ModelShape.from_gguf`,
read with the ``gguf`` package; nothing is loaded) or from a named preset for a file we do not have
(:func:`preset`). The rules mirror the vendored llama.cpp of llama-cpp-python 0.3.36; file names below
are under ``vendor/llama.cpp/src``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from runtime import gguf_meta
from runtime.kvtypes import GGML

_SHAPES: dict[tuple[str, int, int], ModelShape] = {}  # ModelShape.from_gguf, by (path, size, mtime_ns)

#: ggml (block size in elements, bytes per block) per type name (runtime/kvtypes.py).
GGML_BLOCKS: dict[str, tuple[int, int]] = {name: (t.block, t.block_bytes) for name, t in GGML.items()}

#: Architectures whose layers 0..n_layer-1 alternate Gated DeltaNet and full attention every
#: ``full_attention_interval`` layers (default 4), and whose attention projects q and a gate
#: (models/qwen35.cpp ``load_arch_hparams``).
HYBRID_INTERVAL_ARCHS = ("qwen35", "qwen35moe", "qwen3next")
#: Sliding-window pattern when the GGUF carries none: every n-th layer is global
#: (llama_model_base::load_swa_pattern / llama_hparams::set_swa_pattern).
SWA_PATTERNS = {"gemma2": 2, "gemma3": 6}

LayerKind = Literal["attention", "recurrent"]


def row_bytes(type_name: str, n: int) -> int:
    """Bytes of ``n`` values of a ggml type (``ggml_row_size``); ``n`` must be a multiple of the block."""
    block, size = GGML_BLOCKS[type_name]
    if n % block:
        raise ValueError(f"{n} values are not a whole number of {type_name} blocks of {block}")
    return n // block * size


@dataclass(frozen=True, slots=True)
class Layer:
    """One block ``blk.{index}``. ``kind`` is attention (it has a KV cache) or recurrent (a Gated
    DeltaNet/Mamba state); ``nextn`` marks an MTP block (index >= n_layer), which only an MTP
    context uses. ``weight_bytes`` is the sum of the block's tensors in the file."""

    index: int
    kind: LayerKind
    swa: bool
    nextn: bool
    n_head: int
    n_head_kv: int
    head_k: int  # key length per head (elements)
    head_v: int  # value length per head
    weight_bytes: int

    @property
    def n_embd_k_gqa(self) -> int:
        return self.head_k * self.n_head_kv

    @property
    def n_embd_v_gqa(self) -> int:
        return self.head_v * self.n_head_kv


@dataclass(frozen=True, slots=True)
class SsmShape:
    """Recurrent-layer sizes from the ``{arch}.ssm.*`` keys (elements)."""

    conv_kernel: int  # ssm.conv_kernel (d_conv)
    inner_size: int  # ssm.inner_size (d_inner = value heads x value head dim)
    state_size: int  # ssm.state_size (d_state = key head dim)
    group_count: int  # ssm.group_count (key heads)

    @property
    def conv_dim(self) -> int:
        """Channels the short convolution runs over: q, k and v (models/qwen35.cpp ``conv_dim``)."""
        return self.inner_size + 2 * self.group_count * self.state_size

    @property
    def bytes_per_layer(self) -> int:
        """One sequence's f32 state of one layer, bytes: conv state ``(d_conv-1) x conv_dim`` plus
        the delta-rule/SSM state ``d_state x d_inner`` (llama-hparams.cpp ``n_embd_r``/``n_embd_s``;
        llama-memory-recurrent.cpp allocates both as f32)."""
        return 4 * ((self.conv_kernel - 1) * self.conv_dim + self.state_size * self.inner_size)


@dataclass(frozen=True, slots=True)
class ModelShape:
    """A model as the planner sees it. Sizes in elements unless named ``*_bytes``."""

    name: str
    arch: str
    n_layer: int  # trunk blocks (block_count - nextn_predict_layers)
    n_embd: int
    n_ff: int  # largest feed-forward width
    n_vocab: int
    n_ctx_train: int
    n_swa: int  # sliding window in tokens (0: none)
    q_proj: int  # query projection width per token (n_head x head_k, x2 with an output gate)
    layers: tuple[Layer, ...]  # trunk blocks, then MTP blocks
    ssm: SsmShape | None
    input_bytes: int  # token_embd: llama.cpp keeps it on the CPU (llama-model.cpp ``dev_input``)
    output_bytes: int  # output.weight, output_norm and any other non-block tensor
    output_tied: bool  # no output.weight: llama.cpp duplicates token_embd onto the output device
    source: str  # the GGUF path, or "preset <name>"

    @property
    def n_layer_nextn(self) -> int:
        return len(self.layers) - self.n_layer

    @property
    def file_bytes(self) -> int:
        """All tensor bytes in the file (MTP blocks included)."""
        return self.input_bytes + self.output_bytes + sum(layer.weight_bytes for layer in self.layers)

    @property
    def is_recurrent(self) -> bool:
        return any(layer.kind == "recurrent" for layer in self.layers)

    @classmethod
    def from_gguf(cls, path: Path) -> ModelShape:
        """Read a GGUF's metadata and tensor sizes (memory-mapped; tensor data is not read), once per
        file and version of it in this process: gguf-py's reader parses every field eagerly, the
        262,144 strings of Gemma 3's vocabulary included, which took 6-22 s on 2 cores, and a server
        start asks twice (the memory check, the snapshot estimate), a test session at every start.
        The key is the resolved path, size and mtime, so a rewritten file is read again."""
        path = Path(path).resolve()
        stat = path.stat()
        key = (str(path), stat.st_size, stat.st_mtime_ns)
        shape = _SHAPES.get(key)
        if shape is None:
            shape = _SHAPES[key] = cls._read_gguf(path)
        return shape

    @classmethod
    def _read_gguf(cls, path: Path) -> ModelShape:
        fields, tensors = gguf_meta.read(path)

        def get(key: str, default=None):
            return fields.get(key, default)

        arch = get("general.architecture")
        if arch is None:
            raise ValueError(f"{path} has no general.architecture; is it a GGUF model?")
        a = f"{arch}."
        n_layer_all = int(get(a + "block_count"))
        n_nextn = int(get(a + "nextn_predict_layers", 0))
        n_layer = n_layer_all - n_nextn
        n_embd = int(get(a + "embedding_length"))

        def per_layer(value, default: int) -> list[int]:
            if value is None:
                return [default] * n_layer_all
            if isinstance(value, list):
                return [int(v) for v in value] + [int(value[-1])] * (n_layer_all - len(value))
            return [int(value)] * n_layer_all

        n_head = per_layer(get(a + "attention.head_count"), 0)
        n_head_kv = per_layer(get(a + "attention.head_count_kv"), max(n_head))
        n_ff = max(per_layer(get(a + "feed_forward_length"), 4 * n_embd))
        head_k = int(get(a + "attention.key_length", n_embd // max(max(n_head), 1)))
        head_v = int(get(a + "attention.value_length", head_k))
        head_k_swa = int(get(a + "attention.key_length_swa", head_k))
        head_v_swa = int(get(a + "attention.value_length_swa", head_v))

        recurrent = _recurrent_layers(arch, n_layer, n_layer_all, get, n_head_kv)
        n_swa = int(get(a + "attention.sliding_window", 0) or 0)
        swa = _swa_layers(arch, n_layer, n_layer_all, n_swa, get)

        ssm = None
        if any(recurrent):
            ssm = SsmShape(
                conv_kernel=int(get(a + "ssm.conv_kernel")),
                inner_size=int(get(a + "ssm.inner_size")),
                state_size=int(get(a + "ssm.state_size")),
                group_count=int(get(a + "ssm.group_count", 0)),
            )

        block_bytes = [0] * n_layer_all
        input_bytes = output_bytes = 0
        names = set()
        q_proj = 0
        for t in tensors:
            names.add(t.name)
            m = re.match(r"blk\.(\d+)\.", t.name)
            if m:
                block_bytes[int(m[1])] += int(t.n_bytes)
                if t.name.endswith(".attn_q.weight") and not q_proj:
                    q_proj = int(t.shape[1])  # gguf lists ne0 first: [n_embd, q width]
            elif t.name.startswith("token_embd"):
                input_bytes += int(t.n_bytes)
            else:
                output_bytes += int(t.n_bytes)
        tokens = fields.get("tokenizer.ggml.tokens")
        n_vocab = len(tokens) if tokens is not None else int(get(a + "vocab_size", 0))

        layers = tuple(
            Layer(
                index=il,
                kind="recurrent" if recurrent[il] else "attention",
                swa=swa[il],
                nextn=il >= n_layer,
                n_head=n_head[il],
                n_head_kv=n_head_kv[il],
                head_k=head_k_swa if swa[il] else head_k,
                head_v=head_v_swa if swa[il] else head_v,
                weight_bytes=block_bytes[il],
            )
            for il in range(n_layer_all)
        )
        return cls(
            name=str(get("general.name", Path(path).stem)),
            arch=arch,
            n_layer=n_layer,
            n_embd=n_embd,
            n_ff=n_ff,
            n_vocab=n_vocab,
            n_ctx_train=int(get(a + "context_length", 0)),
            n_swa=n_swa if any(swa) else 0,
            q_proj=q_proj or max(n_head) * head_k,
            layers=layers,
            ssm=ssm,
            input_bytes=input_bytes,
            output_bytes=output_bytes,
            output_tied="output.weight" not in names,
            source=str(path),
        )


def _recurrent_layers(arch: str, n_layer: int, n_layer_all: int, get, n_head_kv: list[int]) -> list[bool]:
    """Which blocks are recurrent: ``attention.recurrent_layers`` if present; for Qwen3.5-style
    hybrids every layer but each ``full_attention_interval``-th; MTP blocks never
    (models/qwen35.cpp). Other hybrids mark recurrent layers with head_count_kv 0."""
    flags = get(f"{arch}.attention.recurrent_layers")
    if isinstance(flags, list):
        return [bool(f) for f in flags] + [False] * (n_layer_all - len(flags))
    if arch in HYBRID_INTERVAL_ARCHS:
        interval = int(get(f"{arch}.full_attention_interval", 4))
        return [il < n_layer and (il + 1) % interval != 0 for il in range(n_layer_all)]
    if get(f"{arch}.ssm.state_size") and get(f"{arch}.ssm.inner_size"):
        return [il < n_layer and n_head_kv[il] == 0 for il in range(n_layer_all)]
    return [False] * n_layer_all


def _swa_layers(arch: str, n_layer: int, n_layer_all: int, n_swa: int, get) -> list[bool]:
    """Which blocks use the sliding window: ``attention.sliding_window_pattern`` (bool array or the
    period) or the architecture's default period; all global when unknown (an upper bound)."""
    if n_swa <= 0:
        return [False] * n_layer_all
    pattern = get(f"{arch}.attention.sliding_window_pattern")
    if isinstance(pattern, list):
        return [bool(p) for p in pattern] + [False] * (n_layer_all - len(pattern))
    period = int(pattern) if pattern is not None else SWA_PATTERNS.get(arch, 1)
    return [il < n_layer and (period == 0 or il % period < period - 1) for il in range(n_layer_all)]
