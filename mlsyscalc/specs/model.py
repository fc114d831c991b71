"""ModelSpec: one normalised description of a decoder-only transformer's shapes.

Inputs are stored as given and never overwritten; everything derived is a property.
Built by `mlsyscalc.specs.hf.from_hf_config` from a Hugging Face config.json.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import MlsysError


@dataclass(frozen=True)
class MoESpec:
    """Routed mixture-of-experts MLP (Mixtral, DeepSeek, Qwen3-MoE, Llama 4, gpt-oss, ...)."""

    num_experts: int  # routed experts per MoE layer
    experts_per_token: int  # top-k
    expert_intermediate_size: int  # hidden width of one routed expert's gated MLP
    num_shared_experts: int = 0  # always-on experts (DeepSeek, GLM-4.5, Llama 4), fused into one MLP
    shared_intermediate_size: int = 0  # total width of the shared MLP (n_shared * moe_intermediate)
    first_dense_layers: int = 0  # DeepSeek first_k_dense_replace: leading layers use the dense MLP
    layer_freq: int = 1  # every layer_freq-th layer (after the dense ones) is MoE
    layers: tuple[int, ...] | None = None  # MoE layer indices where the family lists them (None: the rule above)
    router_bias: bool = False  # gpt-oss: the router Linear has a bias
    expert_bias: bool = False  # gpt-oss: every expert projection has a bias

    def __post_init__(self) -> None:
        if self.experts_per_token > self.num_experts:  # normalisers name the key; this guards direct use
            raise MlsysError(f"top-k {self.experts_per_token} exceeds the {self.num_experts} experts")


@dataclass(frozen=True)
class MLASpec:
    """DeepSeek multi-head latent attention (DeepSeek-V2/V3, arXiv:2405.04434 section 2.1)."""

    q_lora_rank: int | None  # None: plain q_proj
    kv_lora_rank: int  # compressed latent cached per token
    qk_nope_head_dim: int
    qk_rope_head_dim: int  # decoupled rotary key, shared across heads, cached per token
    v_head_dim: int


@dataclass(frozen=True)
class ModelSpec:
    name: str
    model_type: str
    source: str  # where the config came from (URL or file path)
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int  # per-head width of queries and keys (MLA: nope + rope)
    v_head_dim: int  # per-head width of values (equal to head_dim except in MLA)
    intermediate_size: int  # dense MLP hidden width
    gated_mlp: bool  # SwiGLU/GeGLU: gate, up, down (3 matrices) instead of up, down
    activation: str
    norm: str  # "rmsnorm" (weight) or "layernorm" (weight, and bias when norm_bias)
    norm_bias: bool
    norms_per_layer: int  # gemma2: 4; parallel-attention phi/falcon-7b: 1; most: 2
    final_norm: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    lm_head_bias: bool
    tie_word_embeddings: bool
    position_embedding: str  # "rope", "learned", "alibi"
    learned_positions: int = 0  # rows of a learned position table (OPT keeps 2 extra)
    rotary_fraction: float = 1.0  # partial rotary (phi-2 0.4, pythia 0.25)
    parallel_attention: bool = False  # attention and MLP read the same input (GPT-J style)
    max_position_embeddings: int = 0
    sliding_window: int | None = None  # W of the layers whose layer_types entry is "sliding_attention"
    attention_chunk_size: int | None = None  # C of "chunked_attention" layers (Llama 4)
    # attention kind of each layer, as HF names them (calc.counts.attention.MASKS): "full_attention",
    # "sliding_attention", "chunked_attention"; empty: every layer full
    layer_types: tuple[str, ...] = ()
    attention_sinks: bool = False  # gpt-oss: one learned softmax logit per head and layer (no K/V)
    nope_layers: tuple[int, ...] = ()  # layers without rotary embeddings (Llama 4's NoPE layers)
    embed_proj_dim: int | None = None  # OPT word_embed_proj_dim when it differs from hidden
    qk_norm: bool = False  # a norm on q and k before attention (phi, qwen3, gemma3, olmo2, llama4, ...)
    qk_norm_type: str = "layernorm"  # which (calc.counts.layers.QK_NORMS): "layernorm" (phi), "rmsnorm", ...
    qk_norm_layers: tuple[int, ...] | None = None  # layers that have it (None: every layer; llama4: RoPE layers)
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    torch_dtype: str | None = None  # the checkpoint's dtype, for information
    aliases: tuple[str, ...] = ()
    raw_config: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    # ---- derived shapes -------------------------------------------------------------
    @property
    def q_dim(self) -> int:
        """Width of all query heads together (may differ from hidden_size, e.g. gemma2)."""
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of all key heads together (GQA/MQA: fewer than the query heads)."""
        return self.num_kv_heads * self.head_dim

    @property
    def attn_out_dim(self) -> int:
        """Input width of the output projection (heads x value head dim)."""
        return self.num_heads * self.v_head_dim

    @property
    def embed_dim(self) -> int:
        """Width of the token embedding table (OPT's word_embed_proj_dim, else hidden)."""
        return self.embed_proj_dim or self.hidden_size

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    def layer_is_moe(self, layer: int) -> bool:
        """The family's listed MoE layers, else DeepSeek's rule: MoE after the first dense layers,
        every layer_freq-th layer."""
        moe = self.moe
        if moe is None:
            return False
        if moe.layers is not None:
            return layer in moe.layers
        if layer < moe.first_dense_layers:
            return False
        return layer % moe.layer_freq == 0

    def layer_type(self, layer: int) -> str:
        """Attention kind of one layer: "full_attention" where layer_types lists none, or where the
        kind's window or chunk is unset (a sliding layer without a sliding_window attends to all)."""
        kind = self.layer_types[layer] if self.layer_types else "full_attention"
        return kind if self.mask_size(kind) is not None else "full_attention"

    def mask_size(self, kind: str) -> int | None:
        """The window W or chunk C that bounds a layer kind's keys (None for full attention)."""
        return {"sliding_attention": self.sliding_window, "chunked_attention": self.attention_chunk_size}.get(kind)

    @property
    def sliding_window_layers(self) -> int:
        """How many layers use the sliding window (gemma2: every other one; gemma3: 5 of 6)."""
        return sum(self.layer_type(i) == "sliding_attention" for i in range(self.num_layers)) if self.layer_types else 0

    def layer_uses_rope(self, layer: int) -> bool:
        return self.position_embedding == "rope" and layer not in self.nope_layers

    def layer_has_qk_norm(self, layer: int) -> bool:
        return self.qk_norm and (self.qk_norm_layers is None or layer in self.qk_norm_layers)

    @property
    def num_moe_layers(self) -> int:
        return sum(self.layer_is_moe(i) for i in range(self.num_layers))

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def kv_cache_elements_per_token(self) -> int:
        """Cached elements per token per layer: K and V heads, or MLA's latent + rotary key."""
        if self.mla is not None:
            return self.mla.kv_lora_rank + self.mla.qk_rope_head_dim
        return self.num_kv_heads * (self.head_dim + self.v_head_dim)
