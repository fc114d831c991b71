"""Normalisers of the mixture-of-experts families: Mixtral, DeepSeek-V2/V3, Qwen3-MoE, gpt-oss,
Phi-3.5-MoE, GLM-4.5 and Llama 4.

Each reads exactly the keys its transformers implementation (5.24) uses for shapes, with the
defaults of that family's config class; a key whose class has no default is required. Top-k above
the expert count is refused naming the key (`check_top_k`).
"""

from __future__ import annotations

from typing import Any

from ..errors import MlsysError
from .hf_llama_like import llama_like, rotary_fraction, windowed
from .hf_reader import ConfigReader, check_top_k, layer_types, sliding
from .model import MLASpec, MoESpec


def _routed(c: ConfigReader, experts_key: str, top_k_key: str, *, experts_default: Any = None,
            top_k_default: Any = None) -> tuple[int, int]:
    """(routed experts, top-k) from their keys (a None default: the key is required)."""
    experts = c.int(experts_key) if experts_default is None else c.int(experts_key, experts_default)
    top_k = c.int(top_k_key) if top_k_default is None else c.int(top_k_key, top_k_default)
    check_top_k(c, top_k, experts, top_k_key, experts_key)
    return experts, top_k


def _mixtral(c: ConfigReader) -> dict[str, Any]:
    spec = llama_like(c, tie_default=False, biases="none")
    windowed(spec, sliding(c, spec["num_layers"]))
    experts, top_k = _routed(c, "num_local_experts", "num_experts_per_tok")
    spec["moe"] = MoESpec(num_experts=experts, experts_per_token=top_k,
                          expert_intermediate_size=spec["intermediate_size"])
    return spec


def _deepseek(c: ConfigReader, *, q_lora: int, experts: int, top_k: int | None, moe_inter: int, shared: int,
              first_dense: int) -> dict[str, Any]:
    """DeepSeek-V2/V3 (MLA, routed + shared experts after the first dense layers). A missing MLA/MoE key
    takes the config class's default, as loading it would; an explicit null q_lora_rank means no query
    compression. moe_layer_freq follows DeepSeek's own modeling code (transformers reads no such key;
    every released checkpoint sets 1)."""
    spec = llama_like(c, tie_default=False, biases="keys")
    mla = MLASpec(
        q_lora_rank=c.opt_int("q_lora_rank", q_lora), kv_lora_rank=c.int("kv_lora_rank", 512),
        qk_nope_head_dim=c.int("qk_nope_head_dim", 128), qk_rope_head_dim=c.int("qk_rope_head_dim", 64),
        v_head_dim=c.int("v_head_dim", 128),
    )
    n_experts, k = _routed(c, "n_routed_experts", "num_experts_per_tok", experts_default=experts, top_k_default=top_k)
    inter = c.int("moe_intermediate_size", moe_inter)
    n_shared = c.int("n_shared_experts", shared, minimum=0)
    spec.update(
        head_dim=mla.qk_nope_head_dim + mla.qk_rope_head_dim, v_head_dim=mla.v_head_dim,
        num_kv_heads=spec["num_heads"],  # MLA expands the latent into one K/V per query head
        o_bias=c.bool("attention_bias", False), mla=mla,
        rotary_fraction=mla.qk_rope_head_dim / (mla.qk_nope_head_dim + mla.qk_rope_head_dim),
        moe=MoESpec(
            num_experts=n_experts, experts_per_token=k, expert_intermediate_size=inter,
            num_shared_experts=n_shared, shared_intermediate_size=inter * n_shared,
            first_dense_layers=c.int("first_k_dense_replace", first_dense, minimum=0),
            layer_freq=c.int("moe_layer_freq", 1),
        ),
    )
    return spec


def _deepseek_v2(c: ConfigReader) -> dict[str, Any]:
    # DeepseekV2Config leaves num_experts_per_tok unset (required); V2-Lite has q_lora_rank null
    return _deepseek(c, q_lora=1536, experts=64, top_k=None, moe_inter=1407, shared=2, first_dense=0)


def _deepseek_v3(c: ConfigReader) -> dict[str, Any]:
    return _deepseek(c, q_lora=1536, experts=256, top_k=8, moe_inter=2048, shared=1, first_dense=3)


def _qwen3_moe(c: ConfigReader) -> dict[str, Any]:
    # Qwen3MoeDecoderLayer: an MoE block on layer i unless i is in mlp_only_layers, when
    # (i + 1) % decoder_sparse_step == 0; otherwise the dense MLP of intermediate_size. Attention as
    # Qwen3 (RMSNorm(head_dim) on q and k; head_dim = hidden / heads unless set). A window, with
    # use_sliding_window, covers every layer (Qwen3MoeConfig has no max_window_layers rule).
    spec = llama_like(c, tie_default=False, biases="attention")
    layers = spec["num_layers"]
    experts, top_k = _routed(c, "num_experts", "num_experts_per_tok", experts_default=128, top_k_default=8)
    step = c.int("decoder_sparse_step", 1)
    dense = set(c.int_list("mlp_only_layers", layers) or [])
    spec.update(qk_norm=True, qk_norm_type="rmsnorm", moe=MoESpec(
        num_experts=experts, experts_per_token=top_k, expert_intermediate_size=c.int("moe_intermediate_size", 768),
        layers=tuple(i for i in range(layers) if i not in dense and (i + 1) % step == 0)))
    window = sliding(c, layers, default=4096, use_key="use_sliding_window")
    return windowed(spec, window)


def _gpt_oss(c: ConfigReader) -> dict[str, Any]:
    # GptOssForCausalLM: biases on q/k/v/o (attention_bias), the router and every expert projection;
    # one learned sink logit per head; a 128-token window on even layers (layer_types), head_dim 64.
    spec = llama_like(c, tie_default=False, biases="attention", head_dim_default=64)
    layers = spec["num_layers"]
    experts, top_k = _routed(c, "num_local_experts", "num_experts_per_tok", experts_default=128, top_k_default=4)
    spec.update(attention_sinks=True, moe=MoESpec(
        num_experts=experts, experts_per_token=top_k, expert_intermediate_size=spec["intermediate_size"],
        router_bias=True, expert_bias=True))
    window = sliding(c, layers, default=128,
                     rule=lambda i: "sliding_attention" if (i + 1) % 2 else "full_attention")
    return windowed(spec, window)


def _phimoe(c: ConfigReader) -> dict[str, Any]:
    # PhimoeForCausalLM: LayerNorms with weight and bias (rms_norm_eps names their epsilon),
    # attention_bias on q/k/v/o, lm_head_bias, a bias-free router; a window covers every layer.
    spec = llama_like(c, tie_default=False, biases="attention")
    experts, top_k = _routed(c, "num_local_experts", "num_experts_per_tok", experts_default=16, top_k_default=2)
    spec.update(norm="layernorm", norm_bias=True, lm_head_bias=c.bool("lm_head_bias", False),
                moe=MoESpec(num_experts=experts, experts_per_token=top_k,
                            expert_intermediate_size=spec["intermediate_size"]))
    return windowed(spec, sliding(c, spec["num_layers"]))


def _glm4_moe(c: ConfigReader) -> dict[str, Any]:
    # Glm4MoeForCausalLM (GLM-4.5/4.6/4.7): attention_bias on q/k/v only (o_proj has none), partial
    # rotary 0.5 unless set, RMSNorm(head_dim) on q and k with use_qk_norm; routed + shared experts from
    # first_k_dense_replace on. The multi-token-prediction layers (num_nextn_predict_layers) are not
    # built by transformers, so they are not counted.
    spec = llama_like(c, tie_default=False, biases="attention")
    experts, top_k = _routed(c, "n_routed_experts", "num_experts_per_tok", experts_default=128, top_k_default=8)
    inter = c.int("moe_intermediate_size", 1408)
    shared = c.int("n_shared_experts", 1, minimum=0)
    spec.update(o_bias=False, rotary_fraction=rotary_fraction(c, 0.5), qk_norm=c.bool("use_qk_norm", False),
                qk_norm_type="rmsnorm", moe=MoESpec(
                    num_experts=experts, experts_per_token=top_k, expert_intermediate_size=inter,
                    num_shared_experts=shared, shared_intermediate_size=inter * shared,
                    first_dense_layers=c.int("first_k_dense_replace", 1, minimum=0)))
    return spec


def _llama4_text(c: ConfigReader) -> dict[str, Any]:
    # Llama4TextModel: MoE layers (moe_layers, else every interleave_moe_layer_step-th) hold routed
    # experts and one shared expert, both of intermediate_size; dense layers an MLP of
    # intermediate_size_mlp. no_rope_layers flags the RoPE layers (1) and the NoPE ones (0, by default
    # every no_rope_layer_interval-th); RoPE layers attend within chunks of attention_chunk_size and,
    # with use_qk_norm, L2-normalise q and k (no weights); NoPE layers attend to everything.
    spec = llama_like(c, tie_default=False, biases="attention", head_dim_default=128)
    layers = spec["num_layers"]
    experts, top_k = _routed(c, "num_local_experts", "num_experts_per_tok", experts_default=16, top_k_default=1)
    step = c.int("interleave_moe_layer_step", 1)
    moe_layers = c.int_list("moe_layers", layers)
    if moe_layers is None:
        moe_layers = list(range(step - 1, layers, step))
    interval = c.int("no_rope_layer_interval", 4)
    rope = c.int_list("no_rope_layers", layers, flags=True) or [int((i + 1) % interval != 0) for i in range(layers)]
    chunk = c.opt_int("attention_chunk_size", 8192)
    rope_layers = tuple(i for i in range(layers) if rope[i])
    expert_width = spec["intermediate_size"]
    spec.update(
        intermediate_size=c.int("intermediate_size_mlp", 16384), attention_chunk_size=chunk,
        layer_types=layer_types(c, layers, ["chunked_attention" if rope[i] and chunk else "full_attention"
                                            for i in range(layers)]),
        nope_layers=tuple(i for i in range(layers) if not rope[i]),
        qk_norm=c.bool("use_qk_norm", True), qk_norm_type="l2", qk_norm_layers=rope_layers,
        moe=MoESpec(num_experts=experts, experts_per_token=top_k, expert_intermediate_size=expert_width,
                    num_shared_experts=1, shared_intermediate_size=expert_width, layers=tuple(sorted(set(moe_layers)))),
    )
    if "chunked_attention" in spec["layer_types"] and chunk is None:
        raise MlsysError(f"{c.blame('layer_types', 'attention_chunk_size')}: chunked layers need attention_chunk_size")
    return spec


NORMALISERS = {
    "mixtral": _mixtral, "deepseek_v2": _deepseek_v2, "deepseek_v3": _deepseek_v3, "qwen3_moe": _qwen3_moe,
    "gpt_oss": _gpt_oss, "phimoe": _phimoe, "glm4_moe": _glm4_moe, "llama4_text": _llama4_text,
}
