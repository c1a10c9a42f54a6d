"""Model shapes for files we do not have, so the planner can answer "does it fit?" before a download.

``qwen3.6-27b-q4_k_m``: Qwen3.5-27B / Qwen3.6-27B (same text architecture, HF ``config.json``): 64
layers, every 4th full attention (16 attention + 48 Gated DeltaNet), n_embd 5120, n_ff 17408, 24
query heads with an output gate, 4 KV heads x 256, GDN 16 key heads / 48 value heads x 128, conv
kernel 4, vocab 248,320, one MTP block. These give 27.32 B parameters, as llama.cpp prints for the
real file, and a KV cache of 64 KiB per token in f16, 34 KiB in q8_0, 18 KiB in q4_0.

Weights: the Q4_K_M file with its MTP block is 16.5 GB (15.35 GiB, as published). Q4_K_M stores
token_embd as q4_K and output.weight as q6_K (llama-quant.cpp); the rest of the file is spread over
the blocks by parameter count (about 4.76 bits per weight).
"""

from __future__ import annotations

from runtime.shape import Layer, ModelShape, SsmShape, row_bytes


def _qwen35_dense(
    name: str,
    *,
    file_bytes: int,
    n_layer: int,
    n_embd: int,
    n_ff: int,
    n_head: int,
    n_head_kv: int,
    head_dim: int,
    interval: int,
    ssm: SsmShape,
    n_vocab: int,
    n_ctx_train: int,
) -> ModelShape:
    """A qwen35 (dense) shape whose block weights share ``file_bytes`` by parameter count."""
    e, f = n_embd, n_ff
    q = n_head * head_dim * 2  # query + output gate (models/qwen35.cpp)
    kv = n_head_kv * head_dim
    ffn = 3 * e * f
    attention = 2 * e + e * q + 2 * e * kv + n_head * head_dim * e + 2 * head_dim + ffn
    conv = ssm.conv_dim
    n_v_heads = ssm.inner_size // ssm.state_size
    recurrent = (
        2 * e + e * conv + e * ssm.inner_size + ssm.conv_kernel * conv + 2 * n_v_heads + 2 * e * n_v_heads
        + ssm.state_size + ssm.inner_size * e + ffn
    )  # fmt: skip
    mtp = attention + 2 * e * e + 3 * e  # + nextn.eh_proj, enorm, hnorm, shared_head_norm
    input_bytes = row_bytes("q4_K", e * n_vocab)
    output_bytes = row_bytes("q6_K", e * n_vocab) + 4 * e
    kinds = ["attention" if (il + 1) % interval == 0 else "recurrent" for il in range(n_layer)] + ["attention"]
    params = [attention if k == "attention" else recurrent for k in kinds[:-1]] + [mtp]
    per_param = (file_bytes - input_bytes - output_bytes) / sum(params)
    layers = tuple(
        Layer(
            index=il,
            kind=kind,  # type: ignore[arg-type]
            swa=False,
            nextn=il >= n_layer,
            n_head=n_head,
            n_head_kv=n_head_kv,
            head_k=head_dim,
            head_v=head_dim,
            weight_bytes=round(p * per_param),
        )
        for il, (kind, p) in enumerate(zip(kinds, params, strict=True))
    )
    return ModelShape(
        name=name,
        arch="qwen35",
        n_layer=n_layer,
        n_embd=e,
        n_ff=f,
        n_vocab=n_vocab,
        n_ctx_train=n_ctx_train,
        n_swa=0,
        q_proj=q,
        layers=layers,
        ssm=ssm,
        input_bytes=input_bytes,
        output_bytes=output_bytes,
        output_tied=False,
        source=f"preset {name}",
    )


PRESETS = {
    "qwen3.6-27b-q4_k_m": lambda: _qwen35_dense(
        "Qwen3.6-27B Q4_K_M (with MTP block)",
        file_bytes=16_500_000_000,
        n_layer=64,
        n_embd=5120,
        n_ff=17408,
        n_head=24,
        n_head_kv=4,
        head_dim=256,
        interval=4,
        ssm=SsmShape(conv_kernel=4, inner_size=48 * 128, state_size=128, group_count=16),
        n_vocab=248_320,
        n_ctx_train=262_144,
    ),
}


def preset(name: str) -> ModelShape:
    """The named preset shape; raises ValueError listing the known names."""
    try:
        return PRESETS[name]()
    except KeyError:
        raise ValueError(f"unknown model preset {name!r}; known: {', '.join(sorted(PRESETS))}") from None
