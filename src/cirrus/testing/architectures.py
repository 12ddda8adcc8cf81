"""What a tiny checkpoint of each llama.cpp architecture holds: its hyperparameters and its tensors' shapes.

Shapes are written as llama.cpp's loader declares them (`ne`, innermost dimension first); the writer stores a
numpy array of the reversed shape, as the converter does. Sizes are the smallest that keep each architecture's
structure: 2-3 layers, 64-wide embeddings, 4 heads, 4 routed experts where the model has experts.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import gguf

N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 2
HEAD_DIM = N_EMBD // N_HEAD
N_FF = 128
N_EXPERT = 4
N_EXPERT_USED = 2
N_FF_EXPERT = 32
CONTEXT_LENGTH = 4096
RMS_EPS = 1e-5


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]  # llama.cpp's order: innermost first
    kind: str = "weight"  # "weight" (random), "norm" (around 1) or "bias" (small)


@dataclass(frozen=True)
class Architecture:
    """One synthetic checkpoint kind: the llama.cpp architecture it declares and the token family it speaks."""

    name: str
    arch: str  # general.architecture
    tokens: str  # a key of vocab.TOKEN_FAMILIES
    describes: str
    metadata: Callable[[gguf.GGUFWriter], None]
    tensors: Callable[[int], list[TensorSpec]]  # given the vocabulary size


def _common(writer: gguf.GGUFWriter, blocks: int, context: int = CONTEXT_LENGTH) -> None:
    writer.add_context_length(context)
    writer.add_embedding_length(N_EMBD)
    writer.add_feed_forward_length(N_FF)
    writer.add_block_count(blocks)
    writer.add_head_count(N_HEAD)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    writer.add_rope_freq_base(10000.0)


def _ends(n_vocab: int) -> list[TensorSpec]:
    return [
        TensorSpec("token_embd.weight", (N_EMBD, n_vocab)),
        TensorSpec("output_norm.weight", (N_EMBD,), "norm"),
        TensorSpec("output.weight", (N_EMBD, n_vocab)),
    ]


def _linear(name: str, n_in: int, n_out: int, bias: bool = False) -> list[TensorSpec]:
    specs = [TensorSpec(f"{name}.weight", (n_in, n_out))]
    if bias:
        specs.append(TensorSpec(f"{name}.bias", (n_out,), "bias"))
    return specs


def _norm(name: str, width: int = N_EMBD) -> TensorSpec:
    return TensorSpec(f"{name}.weight", (width,), "norm")


def _split_qkv(block: str, bias: bool) -> list[TensorSpec]:
    kv_width = N_HEAD_KV * HEAD_DIM
    return [
        *_linear(f"{block}.attn_q", N_EMBD, N_HEAD * HEAD_DIM, bias),
        *_linear(f"{block}.attn_k", N_EMBD, kv_width, bias),
        *_linear(f"{block}.attn_v", N_EMBD, kv_width, bias),
        *_linear(f"{block}.attn_output", N_HEAD * HEAD_DIM, N_EMBD),
    ]


def _dense_ffn(block: str) -> list[TensorSpec]:
    return [
        *_linear(f"{block}.ffn_gate", N_EMBD, N_FF),
        *_linear(f"{block}.ffn_up", N_EMBD, N_FF),
        *_linear(f"{block}.ffn_down", N_FF, N_EMBD),
    ]


def _fused_ffn(block: str) -> list[TensorSpec]:
    """GLM's gate and up projections stored as one matrix twice as wide."""
    return [*_linear(f"{block}.ffn_up", N_EMBD, 2 * N_FF), *_linear(f"{block}.ffn_down", N_FF, N_EMBD)]


def _moe_ffn(block: str, shared_experts: int) -> list[TensorSpec]:
    shared_width = N_FF_EXPERT * shared_experts
    return [
        TensorSpec(f"{block}.ffn_gate_inp.weight", (N_EMBD, N_EXPERT)),
        TensorSpec(f"{block}.exp_probs_b.bias", (N_EXPERT,), "bias"),
        TensorSpec(f"{block}.ffn_gate_exps.weight", (N_EMBD, N_FF_EXPERT, N_EXPERT)),
        TensorSpec(f"{block}.ffn_up_exps.weight", (N_EMBD, N_FF_EXPERT, N_EXPERT)),
        TensorSpec(f"{block}.ffn_down_exps.weight", (N_FF_EXPERT, N_EMBD, N_EXPERT)),
        *_linear(f"{block}.ffn_gate_shexp", N_EMBD, shared_width),
        *_linear(f"{block}.ffn_up_shexp", N_EMBD, shared_width),
        *_linear(f"{block}.ffn_down_shexp", shared_width, N_EMBD),
    ]


def _moe_metadata(writer: gguf.GGUFWriter, scale: float, shared_experts: int = 1) -> None:
    writer.add_expert_count(N_EXPERT)
    writer.add_expert_used_count(N_EXPERT_USED)
    writer.add_expert_shared_count(shared_experts)
    writer.add_expert_feed_forward_length(N_FF_EXPERT)
    writer.add_leading_dense_block_count(1)
    writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    writer.add_expert_weights_scale(scale)
    writer.add_expert_weights_norm(True)


# -- GLM-4-0414 (glm4): split q/k/v with biases, fused gate/up, norms after attention and after the FFN -----------

GLM4_LAYERS = 2


def _glm4_metadata(writer: gguf.GGUFWriter) -> None:
    _common(writer, GLM4_LAYERS)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(HEAD_DIM // 2)  # partial rotary factor 0.5


def _glm4_tensors(n_vocab: int) -> list[TensorSpec]:
    specs = _ends(n_vocab)
    for index in range(GLM4_LAYERS):
        block = f"blk.{index}"
        specs += [_norm(f"{block}.attn_norm"), *_split_qkv(block, bias=True)]
        specs += [_norm(f"{block}.post_attention_norm"), _norm(f"{block}.ffn_norm")]
        specs += [*_fused_ffn(block), _norm(f"{block}.post_ffw_norm")]
    return specs


# -- ChatGLM (GLM-4-9B-chat, ChatGLM3): one fused qkv with bias; GLM-Edge: the same with split q/k/v ---------------

CHATGLM_LAYERS = 2


def _chatglm_metadata(writer: gguf.GGUFWriter) -> None:
    _common(writer, CHATGLM_LAYERS)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(HEAD_DIM // 2)


def _chatglm_tensors(n_vocab: int, fused_qkv: bool) -> list[TensorSpec]:
    specs = _ends(n_vocab)
    for index in range(CHATGLM_LAYERS):
        block = f"blk.{index}"
        specs.append(_norm(f"{block}.attn_norm"))
        if fused_qkv:
            qkv_width = N_HEAD * HEAD_DIM + 2 * N_HEAD_KV * HEAD_DIM
            specs += _linear(f"{block}.attn_qkv", N_EMBD, qkv_width, bias=True)
            specs += _linear(f"{block}.attn_output", N_HEAD * HEAD_DIM, N_EMBD)
        else:
            specs += _split_qkv(block, bias=True)
        specs += [_norm(f"{block}.ffn_norm"), *_fused_ffn(block)]
    return specs


# -- GLM-4.5/4.6/4.7 (glm4moe): a dense first layer, MoE with a shared expert, and one NextN (MTP) layer -------------

GLM4MOE_LAYERS = 2  # transformer layers; the NextN layer comes after them
GLM4MOE_NEXTN = 1


def _glm4moe_metadata(writer: gguf.GGUFWriter) -> None:
    _common(writer, GLM4MOE_LAYERS + GLM4MOE_NEXTN)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(HEAD_DIM // 2)
    _moe_metadata(writer, scale=2.5)
    writer.add_nextn_predict_layers(GLM4MOE_NEXTN)


def _glm4moe_block(block: str, dense: bool) -> list[TensorSpec]:
    specs = [_norm(f"{block}.attn_norm"), *_split_qkv(block, bias=True)]
    specs += [_norm(f"{block}.attn_q_norm", HEAD_DIM), _norm(f"{block}.attn_k_norm", HEAD_DIM)]
    specs.append(_norm(f"{block}.post_attention_norm"))
    return specs + (_dense_ffn(block) if dense else _moe_ffn(block, shared_experts=1))


def _glm4moe_tensors(n_vocab: int) -> list[TensorSpec]:
    specs = _ends(n_vocab)
    for index in range(GLM4MOE_LAYERS + GLM4MOE_NEXTN):
        specs += _glm4moe_block(f"blk.{index}", dense=index == 0)
    nextn = f"blk.{GLM4MOE_LAYERS}.nextn"
    specs += [
        TensorSpec(f"{nextn}.eh_proj.weight", (2 * N_EMBD, N_EMBD)),
        _norm(f"{nextn}.enorm"),
        _norm(f"{nextn}.hnorm"),
        _norm(f"{nextn}.shared_head_norm"),
    ]
    return specs


# -- DeepSeek-V3 shape (deepseek2): Kimi K2, Moonlight, GLM-4.7-Flash. MLA attention, MoE with shared experts ------

DEEPSEEK2_LAYERS = 2
Q_LORA_RANK = 32
KV_LORA_RANK = 32
QK_ROPE_DIM = 16
QK_NOPE_DIM = 16
V_HEAD_DIM = 16
YARN_FACTOR = 32


@dataclass(frozen=True)
class MlaVariant:
    # queries through a low-rank bottleneck (Kimi K2, GLM-4.7-Flash), or one projection (Moonlight)
    q_lora: bool
    shared_experts: int
    yarn: bool  # Kimi K2 stretches a 4k rope 32 times with yarn
    layers: int = DEEPSEEK2_LAYERS


KIMI_K2 = MlaVariant(q_lora=True, shared_experts=1, yarn=True)
# llama.cpp tells the "lite" form (no q_lora) by its layer count alone: 27 (DeepSeek-V2-Lite, Moonlight) or 26.
# With any other count it asks for attention.q_lora_rank and refuses the file.
MOONLIGHT = MlaVariant(q_lora=False, shared_experts=2, yarn=False, layers=27)
GLM47_FLASH = MlaVariant(q_lora=True, shared_experts=1, yarn=False)


def _deepseek2_metadata(variant: MlaVariant, writer: gguf.GGUFWriter) -> None:
    _common(writer, variant.layers, context=CONTEXT_LENGTH * (YARN_FACTOR if variant.yarn else 1))
    writer.add_head_count_kv(1)  # MLA is stored as multi-query attention over the compressed KV
    if variant.q_lora:
        writer.add_q_lora_rank(Q_LORA_RANK)
    writer.add_kv_lora_rank(KV_LORA_RANK)
    writer.add_key_length(KV_LORA_RANK + QK_ROPE_DIM)
    writer.add_value_length(KV_LORA_RANK)
    writer.add_key_length_mla(QK_NOPE_DIM + QK_ROPE_DIM)
    writer.add_value_length_mla(V_HEAD_DIM)
    writer.add_rope_dimension_count(QK_ROPE_DIM)
    _moe_metadata(writer, scale=2.827, shared_experts=variant.shared_experts)
    writer.add_expert_group_count(1)
    writer.add_expert_group_used_count(1)
    if variant.yarn:
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(float(YARN_FACTOR))
        writer.add_rope_scaling_orig_ctx_len(CONTEXT_LENGTH)
        writer.add_rope_scaling_yarn_log_mul(0.1)  # 0.1 x mscale_all_dim, as llama.cpp's converter writes it


def _deepseek2_queries(block: str, q_lora: bool) -> list[TensorSpec]:
    width = N_HEAD * (QK_NOPE_DIM + QK_ROPE_DIM)
    if not q_lora:
        return _linear(f"{block}.attn_q", N_EMBD, width)
    return [
        *_linear(f"{block}.attn_q_a", N_EMBD, Q_LORA_RANK),
        _norm(f"{block}.attn_q_a_norm", Q_LORA_RANK),
        *_linear(f"{block}.attn_q_b", Q_LORA_RANK, width),
    ]


def _deepseek2_attention(block: str, q_lora: bool) -> list[TensorSpec]:
    return [
        _norm(f"{block}.attn_norm"),
        *_deepseek2_queries(block, q_lora),
        *_linear(f"{block}.attn_kv_a_mqa", N_EMBD, KV_LORA_RANK + QK_ROPE_DIM),
        _norm(f"{block}.attn_kv_a_norm", KV_LORA_RANK),
        TensorSpec(f"{block}.attn_k_b.weight", (QK_NOPE_DIM, KV_LORA_RANK, N_HEAD)),
        TensorSpec(f"{block}.attn_v_b.weight", (KV_LORA_RANK, V_HEAD_DIM, N_HEAD)),
        *_linear(f"{block}.attn_output", N_HEAD * V_HEAD_DIM, N_EMBD),
    ]


def _deepseek2_tensors(variant: MlaVariant, n_vocab: int) -> list[TensorSpec]:
    specs = _ends(n_vocab)
    for index in range(variant.layers):
        block = f"blk.{index}"
        specs += [*_deepseek2_attention(block, variant.q_lora), _norm(f"{block}.ffn_norm")]
        specs += _dense_ffn(block) if index == 0 else _moe_ffn(block, variant.shared_experts)
    return specs


def _deepseek2(name: str, tokens: str, describes: str, variant: MlaVariant) -> Architecture:
    return Architecture(
        name,
        "deepseek2",
        tokens,
        describes,
        partial(_deepseek2_metadata, variant),
        partial(_deepseek2_tensors, variant),
    )


ARCHITECTURES: dict[str, Architecture] = {
    a.name: a
    for a in (
        Architecture(
            "glm4", "glm4", "glm", "GLM-4-0414 (GLM-4-9B-0414, GLM-Z1)", _glm4_metadata, _glm4_tensors
        ),
        Architecture(
            "glm4moe",
            "glm4moe",
            "glm",
            "GLM-4.5 / 4.6 / 4.7 (MoE, shared expert, NextN layer)",
            _glm4moe_metadata,
            _glm4moe_tensors,
        ),
        Architecture(
            "chatglm",
            "chatglm",
            "chatglm",
            "GLM-4-9B-chat, ChatGLM3 (fused qkv)",
            _chatglm_metadata,
            partial(_chatglm_tensors, fused_qkv=True),
        ),
        Architecture(
            "glmedge",
            "chatglm",
            "glm",
            "GLM-Edge chat (the chatglm architecture with split q/k/v)",
            _chatglm_metadata,
            partial(_chatglm_tensors, fused_qkv=False),
        ),
        _deepseek2("deepseek2", "kimi", "Kimi K2 (MLA with q_lora, MoE with a shared expert, yarn)", KIMI_K2),
        _deepseek2(
            "deepseek2-lite", "kimi", "Moonlight-16B-A3B (MLA without q_lora, 2 shared experts)", MOONLIGHT
        ),
        _deepseek2(
            "deepseek2-glm", "glm", "GLM-4.7-Flash (the deepseek2 architecture, GLM's tokens)", GLM47_FLASH
        ),
    )
}
