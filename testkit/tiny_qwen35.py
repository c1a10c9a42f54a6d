"""A tiny random-weight ``qwen35`` GGUF with one MTP (nextn) layer, written with the ``gguf`` package.

Shape follows llama.cpp's ``conversion/qwen.py`` (Qwen3.5's text model with its MTP mixin): n_embd 128,
4 trunk layers (0-2 Gated DeltaNet, 3 full attention), the MTP block as ``blk.4``, f32 weights.

The weights are random but structured so that speculation is exercised both ways: small trunk and
block weights keep each position's hidden state close to its token's embedding, so the next-token
logits act like a random bigram map with a context-dependent perturbation, and ``eh_proj`` close to
``[I | 0]`` makes the MTP head predict roughly that bigram map. Its drafts are then sometimes
accepted and sometimes rejected. The Gated DeltaNet decay is kept small so the recurrent state
carries memory across tokens (a wrongly restored state changes the output).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

E = 128  # n_embd
N_TRUNK = 4
N_FF = 256
HEAD_DIM = 64
N_HEAD, N_HEAD_KV = 2, 1
SSM_CONV, SSM_STATE, SSM_GROUPS, SSM_DT_RANK = 4, 32, 2, 4
SSM_INNER = SSM_STATE * SSM_DT_RANK  # value_dim
EH_NOISE = 0.01  # MTP eh_proj = [I | 0] + noise: drafts track the bigram map, imperfectly
GDN_OUT = 0.005  # Gated DeltaNet output projection scale: the trunk perturbation of the bigram map
CONTROL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
MERGES = [
    "Ġ t",
    "h e",
    "Ġt he",
    "Ġ a",
    "i n",
    "e r",
    "o n",
    "Ġ s",
    "r e",
    "a n",
    "Ġ w",
    "o u",
    "Ġ o",
    "e n",
    "Ġ b",
    "Ġ c",
    "i s",
    "a t",
    "Ġ m",
    "Ġ f",
    "e s",
    "o r",
    "Ġ p",
    "Ġa n",
    "Ġan d",
    "Ġ h",
    "l l",
    "e d",
]


def _byte_tokens() -> list[str]:
    """GPT-2's byte -> printable unicode mapping, in byte order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    mapping, extra = {}, 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return [mapping[b] for b in range(256)]


def vocabulary() -> tuple[list[str], list[int], list[str]]:
    tokens = _byte_tokens()
    for merge in MERGES:
        tokens.append(merge.replace(" ", ""))
    types = [1] * len(tokens)
    tokens += list(CONTROL)
    types += [3] * len(CONTROL)
    return tokens, types, MERGES


def write_tiny_qwen35(path: Path, seed: int = 0, with_mtp: bool = True) -> Path:
    """Write the model to ``path`` (deterministic for a given seed). ``with_mtp=False`` omits blk.4."""
    import gguf

    rng = np.random.default_rng(seed)
    tokens, types, merges = vocabulary()
    n_vocab = len(tokens)
    n_layer_all = N_TRUNK + (1 if with_mtp else 0)

    w = gguf.GGUFWriter(str(path), "qwen35")
    w.add_name("docqa-tiny-qwen35")
    w.add_context_length(4096)
    w.add_embedding_length(E)
    w.add_block_count(n_layer_all)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_dimension_sections([11, 11, 10, 0])  # sums to n_rot / 2
    w.add_rope_freq_base(10000.0)
    w.add_ssm_conv_kernel(SSM_CONV)
    w.add_ssm_state_size(SSM_STATE)
    w.add_ssm_group_count(SSM_GROUPS)
    w.add_ssm_time_step_rank(SSM_DT_RANK)
    w.add_ssm_inner_size(SSM_INNER)
    w.add_full_attention_interval(4)
    if with_mtp:
        w.add_nextn_predict_layers(1)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index("<|endoftext|>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )

    def t(name: str, *ggml_shape: int, scale: float = 0.0, value: np.ndarray | None = None) -> None:
        shape = tuple(reversed(ggml_shape))  # ggml lists ne0 first; numpy the slowest axis first
        if value is None:
            value = rng.standard_normal(shape) * scale if scale else np.ones(shape)
        w.add_tensor(name, np.ascontiguousarray(value, dtype=np.float32).reshape(shape))

    small = 0.02
    t("token_embd.weight", E, n_vocab, scale=1.0)
    t("output_norm.weight", E)
    t("output.weight", E, n_vocab, scale=1.0)
    key_dim, value_dim = SSM_STATE * SSM_GROUPS, SSM_STATE * SSM_DT_RANK

    def attention(il: int) -> None:
        t(f"blk.{il}.attn_q.weight", E, HEAD_DIM * N_HEAD * 2, scale=small)
        t(f"blk.{il}.attn_k.weight", E, HEAD_DIM * N_HEAD_KV, scale=small)
        t(f"blk.{il}.attn_v.weight", E, HEAD_DIM * N_HEAD_KV, scale=small)
        t(f"blk.{il}.attn_output.weight", HEAD_DIM * N_HEAD, E, scale=small)
        t(f"blk.{il}.attn_q_norm.weight", HEAD_DIM)
        t(f"blk.{il}.attn_k_norm.weight", HEAD_DIM)

    def common(il: int) -> None:
        t(f"blk.{il}.attn_norm.weight", E)
        t(f"blk.{il}.post_attention_norm.weight", E)
        t(f"blk.{il}.ffn_gate.weight", E, N_FF, scale=small)
        t(f"blk.{il}.ffn_up.weight", E, N_FF, scale=small)
        t(f"blk.{il}.ffn_down.weight", N_FF, E, scale=small)

    for il in range(N_TRUNK):
        common(il)
        if (il + 1) % 4 == 0:
            attention(il)
            continue
        t(f"blk.{il}.attn_qkv.weight", E, key_dim * 2 + value_dim, scale=0.3)
        t(f"blk.{il}.attn_gate.weight", E, value_dim, scale=0.3)
        t(f"blk.{il}.ssm_conv1d.weight", SSM_CONV, key_dim * 2 + value_dim, scale=0.5)
        t(f"blk.{il}.ssm_dt.bias", SSM_DT_RANK, value=np.zeros(SSM_DT_RANK))
        t(f"blk.{il}.ssm_a", SSM_DT_RANK, value=-rng.uniform(0.1, 0.9, SSM_DT_RANK))  # |A| <= 1: long memory
        t(f"blk.{il}.ssm_beta.weight", E, SSM_DT_RANK, scale=0.3)
        t(f"blk.{il}.ssm_alpha.weight", E, SSM_DT_RANK, scale=0.3)
        t(f"blk.{il}.ssm_norm.weight", SSM_STATE)
        t(f"blk.{il}.ssm_out.weight", value_dim, E, scale=GDN_OUT)

    if with_mtp:
        il = N_TRUNK
        common(il)
        attention(il)
        eh = np.zeros((E, 2 * E))  # numpy (out, in): h' = eh @ [enorm(e); hnorm(h)]
        eh[:, :E] = np.eye(E)
        eh += rng.standard_normal(eh.shape) * EH_NOISE
        t(f"blk.{il}.nextn.eh_proj.weight", 2 * E, E, value=eh)
        t(f"blk.{il}.nextn.enorm.weight", E)
        t(f"blk.{il}.nextn.hnorm.weight", E)
        t(f"blk.{il}.nextn.shared_head_norm.weight", E)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
