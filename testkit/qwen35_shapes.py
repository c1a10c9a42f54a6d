"""The tensors and metadata of a ``qwen35`` GGUF (Qwen3.5's text model with its MTP block) at any shape.

Layout follows llama.cpp's ``conversion/qwen.py`` and ``src/models/qwen35.cpp``: ``n_layer`` trunk
blocks, every ``interval``-th one full attention (query + output gate, K/V heads, q/k norms), the
others Gated DeltaNet (fused qkv, gate, short convolution, dt bias, A, alpha/beta, norm, output), each
with a SwiGLU feed-forward; then, with ``mtp``, the MTP block as ``blk.{n_layer}`` (a full-attention
block plus ``nextn.eh_proj``, ``enorm``, ``hnorm``, ``shared_head_norm``).

Two writers use it: testkit/tiny_qwen35.py (f32, small, weights structured so drafts are sometimes
accepted: the test model) and testkit/random_qwen35.py (quantized random bytes at a real model's shape,
for speed on a GPU). :func:`tensors` lists the tensors in the order the tiny writer draws them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

CONTROL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
MERGES = [
    "Ġ t", "h e", "Ġt he", "Ġ a", "i n", "e r", "o n", "Ġ s", "r e", "a n", "Ġ w", "o u", "Ġ o", "e n", "Ġ b",
    "Ġ c", "i s", "a t", "Ġ m", "Ġ f", "e s", "o r", "Ġ p", "Ġa n", "Ġan d", "Ġ h", "l l", "e d",
]  # fmt: skip
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True, slots=True)
class Shape:
    """A qwen35 model's sizes (elements). ``n_vocab`` None: the byte-level base vocabulary alone."""

    name: str
    n_embd: int
    n_layer: int  # trunk blocks
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    ssm_conv: int  # short convolution kernel
    ssm_state: int  # key/value head dim of the Gated DeltaNet
    ssm_groups: int  # key heads
    ssm_dt_rank: int  # value heads
    n_vocab: int | None
    context_length: int
    rope_dims: int  # rotated dims per head (n_rot)
    rope_sections: tuple[int, int, int, int]  # M-RoPE sections, summing to n_rot / 2
    rope_freq_base: float
    interval: int = 4  # every interval-th block is full attention
    mtp: bool = True

    @property
    def key_dim(self) -> int:
        return self.ssm_state * self.ssm_groups

    @property
    def value_dim(self) -> int:  # ssm.inner_size
        return self.ssm_state * self.ssm_dt_rank

    def is_attention(self, il: int) -> bool:
        return il >= self.n_layer or (il + 1) % self.interval == 0

    def with_layers(self, n_layer: int) -> Shape:
        """The same widths with ``n_layer`` trunk blocks (a whole number of ``interval`` groups)."""
        if n_layer < self.interval or n_layer % self.interval:
            raise ValueError(f"n_layer must be a positive multiple of {self.interval}, got {n_layer}")
        return replace(self, n_layer=n_layer, name=f"{self.name}, {n_layer} of {self.n_layer} blocks")


TINY = Shape(
    "docqa-tiny-qwen35", n_embd=128, n_layer=4, n_ff=256, n_head=2, n_head_kv=1, head_dim=64, ssm_conv=4,
    ssm_state=32, ssm_groups=2, ssm_dt_rank=4, n_vocab=None, context_length=4096, rope_dims=64,
    rope_sections=(11, 11, 10, 0), rope_freq_base=10000.0,
)  # fmt: skip
#: Qwen3.5-27B / Qwen3.6-27B (HF config.json; runtime/presets.py): 64 blocks, 16 of them full attention.
QWEN35_27B = Shape(
    "Qwen3.5-27B shapes", n_embd=5120, n_layer=64, n_ff=17408, n_head=24, n_head_kv=4, head_dim=256, ssm_conv=4,
    ssm_state=128, ssm_groups=16, ssm_dt_rank=48, n_vocab=248_320, context_length=262_144, rope_dims=64,
    rope_sections=(11, 11, 10, 0), rope_freq_base=10_000_000.0,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Tensor:
    """One tensor: ``ne`` in ggml order (ne0 first); ``init`` how the tiny writer fills it (``normal``
    times ``scale``, ``ones``, ``zeros``, ``ssm_a``, ``eh_proj``); ``role`` what a quantizer sees
    (``embd``, ``output``, ``attn_v``, ``ffn_down``, ``attn_qkv``, ``matrix``, or ``f32``: kept as is)."""

    name: str
    ne: tuple[int, ...]
    init: str
    scale: float = 0.0
    role: str = "matrix"


def vocabulary(n_vocab: int | None = None) -> tuple[list[str], list[int], list[str]]:
    """Tokens, token types and merges: GPT-2's 256 byte tokens, :data:`MERGES`, the control tokens,
    then (up to ``n_vocab``) filler tokens no merge produces, so the output layer has the real width."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    tokens, extra = [], 0
    for b in range(256):
        if b in printable:
            tokens.append(chr(b))
        else:
            tokens.append(chr(256 + extra))
            extra += 1
    tokens += [m.replace(" ", "") for m in MERGES]
    types = [1] * len(tokens) + [3] * len(CONTROL)
    tokens += list(CONTROL)
    if n_vocab is not None:
        if n_vocab < len(tokens):
            raise ValueError(f"n_vocab must be at least {len(tokens)}")
        fill = n_vocab - len(tokens)
        tokens += [f"x{i:06d}" for i in range(fill)]
        types += [1] * fill
    return tokens, types, list(MERGES)


def tensors(shape: Shape) -> list[Tensor]:
    """Every tensor of the file, in the order the tiny writer draws their values."""
    s, e, ff, small = shape, shape.n_embd, shape.n_ff, 0.02
    n_vocab = s.n_vocab or len(vocabulary()[0])
    out = [
        Tensor("token_embd.weight", (e, n_vocab), "normal", 1.0, "embd"),
        Tensor("output_norm.weight", (e,), "ones", role="f32"),
        Tensor("output.weight", (e, n_vocab), "normal", 1.0, "output"),
    ]

    def common(il: int) -> None:
        out.extend([
            Tensor(f"blk.{il}.attn_norm.weight", (e,), "ones", role="f32"),
            Tensor(f"blk.{il}.post_attention_norm.weight", (e,), "ones", role="f32"),
            Tensor(f"blk.{il}.ffn_gate.weight", (e, ff), "normal", small),
            Tensor(f"blk.{il}.ffn_up.weight", (e, ff), "normal", small),
            Tensor(f"blk.{il}.ffn_down.weight", (ff, e), "normal", small, "ffn_down"),
        ])  # fmt: skip

    def attention(il: int) -> None:
        hd, nh, nkv = s.head_dim, s.n_head, s.n_head_kv
        out.extend([
            Tensor(f"blk.{il}.attn_q.weight", (e, hd * nh * 2), "normal", small),
            Tensor(f"blk.{il}.attn_k.weight", (e, hd * nkv), "normal", small),
            Tensor(f"blk.{il}.attn_v.weight", (e, hd * nkv), "normal", small, "attn_v"),
            Tensor(f"blk.{il}.attn_output.weight", (hd * nh, e), "normal", small),
            Tensor(f"blk.{il}.attn_q_norm.weight", (hd,), "ones", role="f32"),
            Tensor(f"blk.{il}.attn_k_norm.weight", (hd,), "ones", role="f32"),
        ])  # fmt: skip

    conv_dim = s.key_dim * 2 + s.value_dim
    for il in range(s.n_layer):
        common(il)
        if s.is_attention(il):
            attention(il)
            continue
        out.extend([
            Tensor(f"blk.{il}.attn_qkv.weight", (e, conv_dim), "normal", 0.3, "attn_qkv"),
            Tensor(f"blk.{il}.attn_gate.weight", (e, s.value_dim), "normal", 0.3),
            Tensor(f"blk.{il}.ssm_conv1d.weight", (s.ssm_conv, conv_dim), "normal", 0.5, "f32"),
            Tensor(f"blk.{il}.ssm_dt.bias", (s.ssm_dt_rank,), "zeros", role="f32"),
            Tensor(f"blk.{il}.ssm_a", (s.ssm_dt_rank,), "ssm_a", role="f32"),  # -|A| in (0.1, 0.9): long memory
            Tensor(f"blk.{il}.ssm_beta.weight", (e, s.ssm_dt_rank), "normal", 0.3),
            Tensor(f"blk.{il}.ssm_alpha.weight", (e, s.ssm_dt_rank), "normal", 0.3),
            Tensor(f"blk.{il}.ssm_norm.weight", (s.ssm_state,), "ones", role="f32"),
            Tensor(f"blk.{il}.ssm_out.weight", (s.value_dim, e), "normal", 0.005),
        ])  # fmt: skip
    if s.mtp:
        il = s.n_layer
        common(il)
        attention(il)
        out.extend([
            Tensor(f"blk.{il}.nextn.eh_proj.weight", (2 * e, e), "eh_proj"),
            Tensor(f"blk.{il}.nextn.enorm.weight", (e,), "ones", role="f32"),
            Tensor(f"blk.{il}.nextn.hnorm.weight", (e,), "ones", role="f32"),
            Tensor(f"blk.{il}.nextn.shared_head_norm.weight", (e,), "ones", role="f32"),
        ])  # fmt: skip
    return out


def write_metadata(writer, shape: Shape) -> None:
    """The ``qwen35.*`` hyperparameters and the tokenizer, on a ``gguf.GGUFWriter``."""
    s, w = shape, writer
    tokens, types, merges = vocabulary(s.n_vocab)
    w.add_name(s.name)
    w.add_context_length(s.context_length)
    w.add_embedding_length(s.n_embd)
    w.add_block_count(s.n_layer + (1 if s.mtp else 0))
    w.add_feed_forward_length(s.n_ff)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_dimension_count(s.rope_dims)
    w.add_rope_dimension_sections(list(s.rope_sections))
    w.add_rope_freq_base(s.rope_freq_base)
    w.add_ssm_conv_kernel(s.ssm_conv)
    w.add_ssm_state_size(s.ssm_state)
    w.add_ssm_group_count(s.ssm_groups)
    w.add_ssm_time_step_rank(s.ssm_dt_rank)
    w.add_ssm_inner_size(s.value_dim)
    w.add_full_attention_interval(s.interval)
    if s.mtp:
        w.add_nextn_predict_layers(1)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index("<|endoftext|>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)
