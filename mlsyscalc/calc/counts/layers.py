"""The weight matrices of a model, one `Linear` per projection: the shared vocabulary of the
params, FLOPs, memory and roofline calculators.

Fused HF projections (GPT-2's c_attn, Phi-3's qkv_proj and gate_up_proj, Falcon's
query_key_value) are listed as their parts; counts and FLOPs are the same either way.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...specs.model import ModelSpec


@dataclass(frozen=True)
class Linear:
    name: str
    in_features: int
    out_features: int
    bias: bool
    group: str  # "attention", "mlp", "head" or "embedding"
    copies: int = 1  # identical matrices side by side (routed experts)
    active: int = 1  # copies one token passes through (top-k)
    tied: bool = False  # shares its weight with the token embedding: no parameters of its own

    @property
    def weight_params(self) -> int:
        return 0 if self.tied else self.in_features * self.out_features * self.copies

    @property
    def bias_params(self) -> int:
        return self.out_features * self.copies if self.bias else 0

    @property
    def params(self) -> int:
        return self.weight_params + self.bias_params

    @property
    def active_params(self) -> int:
        """Parameters one token touches (top-k of the routed experts)."""
        full = self.params
        return full // self.copies * self.active if self.copies > 1 else full

    def forward_flops(self, tokens: int) -> int:
        """2 FLOPs per multiply-add over the copies each token uses (bias adds not counted)."""
        return 2 * tokens * self.in_features * self.out_features * self.active


def attention_linears(spec: ModelSpec) -> list[Linear]:
    h = spec.hidden_size
    mla = spec.mla
    if mla is None:
        return [
            Linear("q_proj", h, spec.q_dim, spec.qkv_bias, "attention"),
            Linear("k_proj", h, spec.kv_dim, spec.qkv_bias, "attention"),
            Linear("v_proj", h, spec.num_kv_heads * spec.v_head_dim, spec.qkv_bias, "attention"),
            Linear("o_proj", spec.attn_out_dim, h, spec.o_bias, "attention"),
        ]
    # DeepSeek MLA (HF DeepseekV3Attention): low-rank query, joint K/V latent plus a shared rotary key.
    heads = spec.num_heads
    if mla.q_lora_rank:
        query = [
            Linear("q_a_proj", h, mla.q_lora_rank, spec.qkv_bias, "attention"),
            Linear("q_b_proj", mla.q_lora_rank, heads * spec.head_dim, False, "attention"),
        ]
    else:
        query = [Linear("q_proj", h, heads * spec.head_dim, False, "attention")]
    return query + [
        Linear("kv_a_proj_with_mqa", h, mla.kv_lora_rank + mla.qk_rope_head_dim, spec.qkv_bias, "attention"),
        Linear("kv_b_proj", mla.kv_lora_rank, heads * (mla.qk_nope_head_dim + mla.v_head_dim), False, "attention"),
        Linear("o_proj", heads * mla.v_head_dim, h, spec.o_bias, "attention"),
    ]


def _mlp(prefix: str, h: int, inter: int, gated: bool, bias: bool, copies: int = 1, active: int = 1) -> list[Linear]:
    parts = [Linear(f"{prefix}gate_proj", h, inter, bias, "mlp", copies, active)] if gated else []
    return parts + [
        Linear(f"{prefix}up_proj", h, inter, bias, "mlp", copies, active),
        Linear(f"{prefix}down_proj", inter, h, bias, "mlp", copies, active),
    ]


def mlp_linears(spec: ModelSpec, layer: int) -> list[Linear]:
    h = spec.hidden_size
    if not spec.layer_is_moe(layer):
        return _mlp("", h, spec.intermediate_size, spec.gated_mlp, spec.mlp_bias)
    moe = spec.moe
    assert moe is not None
    parts = [Linear("router", h, moe.num_experts, moe.router_bias, "mlp")]
    parts += _mlp("experts.", h, moe.expert_intermediate_size, True, moe.expert_bias, moe.num_experts,
                  moe.experts_per_token)
    if moe.num_shared_experts:
        parts += _mlp("shared_experts.", h, moe.shared_intermediate_size, True, False)
    return parts


def layer_linears(spec: ModelSpec, layer: int) -> list[Linear]:
    return attention_linears(spec) + mlp_linears(spec, layer)


def head_linears(spec: ModelSpec) -> list[Linear]:
    """lm_head, plus OPT's project_in/project_out when word_embed_proj_dim differs from hidden."""
    parts = [Linear("lm_head", spec.embed_dim, spec.vocab_size, spec.lm_head_bias, "head",
                    tied=spec.tie_word_embeddings)]
    if spec.embed_proj_dim:
        parts += [
            Linear("project_in", spec.embed_proj_dim, spec.hidden_size, False, "embedding"),
            Linear("project_out", spec.hidden_size, spec.embed_proj_dim, False, "embedding"),
        ]
    return parts


def norm_width(spec: ModelSpec) -> int:
    """Parameters per normalised element: RMSNorm 1, LayerNorm 2 (1 without bias), 0 without affine."""
    return {"rmsnorm": 1, "layernorm": 2 if spec.norm_bias else 1, "none": 0}[spec.norm]


@dataclass(frozen=True)
class QKNorm:
    """One kind of normalisation of the queries and keys before attention."""

    per_head: bool  # normalised over each head's head_dim (else over all heads of q, and of k, at once)
    params_per_element: int  # 2: LayerNorm weight + bias, 1: RMSNorm weight, 0: L2 norm (no weights)


QK_NORMS = {
    "layernorm": QKNorm(True, 2),  # phi qk_layernorm: LayerNorm(head_dim) with a bias
    "rmsnorm": QKNorm(True, 1),  # qwen3, gemma3, glm4_moe: RMSNorm(head_dim)
    "rmsnorm_across_heads": QKNorm(False, 1),  # olmo2: RMSNorm(heads x head_dim) on q, (kv heads x head_dim) on k
    "l2": QKNorm(True, 0),  # llama4: L2 norm of each head, no weights
}


def qk_norm_params(spec: ModelSpec, layer: int) -> int:
    """Weights of the q and k norms of one layer (0 where the layer has none)."""
    if not spec.layer_has_qk_norm(layer):
        return 0
    kind = QK_NORMS[spec.qk_norm_type]
    width = 2 * spec.head_dim if kind.per_head else spec.q_dim + spec.kv_dim
    return width * kind.params_per_element


def layer_norm_params(spec: ModelSpec, layer: int = 0) -> int:
    """Norm parameters in one decoder layer (incl. MLA's latent norms and the q/k norms)."""
    params = spec.norms_per_layer * spec.hidden_size * norm_width(spec)
    if spec.mla is not None:  # RMSNorms on the compressed query and K/V latents
        params += (spec.mla.q_lora_rank or 0) + spec.mla.kv_lora_rank
    return params + qk_norm_params(spec, layer)


def sink_params(spec: ModelSpec) -> int:
    """gpt-oss attention sinks: one learned logit per query head in every layer (attention parameters)."""
    return spec.num_heads if spec.attention_sinks else 0


def embedding_params(spec: ModelSpec) -> tuple[int, int]:
    """(token embedding, learned position embedding) parameters."""
    return spec.vocab_size * spec.embed_dim, spec.learned_positions * spec.hidden_size
