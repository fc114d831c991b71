"""Normalisers of the LayerNorm families: GPT-2, GPT-NeoX, OPT, Falcon, Phi and Nemotron.

Each reads exactly the keys its transformers implementation (5.24) uses for shapes, with the
defaults of that family's config class; a key whose class has no default is required.
"""

from __future__ import annotations

from typing import Any

from ..errors import MlsysError
from .hf_llama_like import rotary_fraction
from .hf_reader import ConfigReader, attention_heads


def _gpt2(c: ConfigReader) -> dict[str, Any]:
    hidden = c.int("n_embd")
    heads = c.int("n_head")
    if hidden % heads:
        raise MlsysError(f"{c.blame('n_embd', 'n_head')}: n_embd {hidden} is not divisible by n_head {heads}")
    positions = c.int("n_positions")
    return dict(
        vocab_size=c.int("vocab_size"), hidden_size=hidden, num_layers=c.int("n_layer"),
        num_heads=heads, num_kv_heads=heads, head_dim=hidden // heads, v_head_dim=hidden // heads,
        intermediate_size=c.opt_int("n_inner") or 4 * hidden, gated_mlp=False,
        activation=c.str("activation_function", "gelu_new"), norm="layernorm", norm_bias=True,
        norms_per_layer=2, final_norm=True, qkv_bias=True, o_bias=True, mlp_bias=True,
        lm_head_bias=False, tie_word_embeddings=c.bool("tie_word_embeddings", True),
        position_embedding="learned", learned_positions=positions, max_position_embeddings=positions,
    )


def _ungated_rope(c: ConfigReader, *, act: str, bias_default: bool, kv_required: bool = False) -> dict[str, Any]:
    """GPT-NeoX and Nemotron: LayerNorm (weight and bias) before attention and MLP, an ungated MLP,
    RoPE, one attention_bias on q/k/v/o."""
    hidden = c.int("hidden_size")
    n, kv, head_dim = attention_heads(c, hidden, kv_required=kv_required)
    bias = c.bool("attention_bias", bias_default)
    return dict(
        vocab_size=c.int("vocab_size"), hidden_size=hidden, num_layers=c.int("num_hidden_layers"),
        num_heads=n, num_kv_heads=kv, head_dim=head_dim, v_head_dim=head_dim,
        intermediate_size=c.int("intermediate_size"), gated_mlp=False,
        activation=c.str("hidden_act", act), norm="layernorm", norm_bias=True, norms_per_layer=2,
        final_norm=True, qkv_bias=bias, o_bias=bias, lm_head_bias=False,
        tie_word_embeddings=c.bool("tie_word_embeddings", False), position_embedding="rope",
        max_position_embeddings=c.int("max_position_embeddings", 0, minimum=0),
    )


def _gpt_neox(c: ConfigReader) -> dict[str, Any]:
    spec = _ungated_rope(c, act="gelu", bias_default=True)
    rotary = c.any("partial_rotary_factor", None)
    spec.update(
        num_kv_heads=spec["num_heads"], mlp_bias=True,  # GPTNeoXAttention: multi-head, fused qkv
        # transformers' GPTNeoXConfig defaults rotary_pct (partial_rotary_factor) to 0.25, as Pythia and
        # GPT-NeoX-20B ship it: a config without the key rotates a quarter of each head
        rotary_fraction=c.float("partial_rotary_factor") if rotary is not None else c.float("rotary_pct", 0.25),
        parallel_attention=c.bool("use_parallel_residual", True),
    )
    return spec


def _opt(c: ConfigReader) -> dict[str, Any]:
    hidden = c.int("hidden_size")
    heads, _, head_dim = attention_heads(c, hidden)
    bias = c.bool("enable_bias", True)
    proj = c.int("word_embed_proj_dim", hidden)
    positions = c.int("max_position_embeddings")
    pre_norm = c.bool("do_layer_norm_before", True)
    return dict(
        vocab_size=c.int("vocab_size"), hidden_size=hidden, num_layers=c.int("num_hidden_layers"),
        num_heads=heads, num_kv_heads=heads, head_dim=head_dim, v_head_dim=head_dim,
        intermediate_size=c.int("ffn_dim"), gated_mlp=False,
        activation=c.str("activation_function", "relu"),
        norm="layernorm" if c.bool("layer_norm_elementwise_affine", True) else "none",
        norm_bias=True, norms_per_layer=2,
        # OPTDecoder drops the final LayerNorm of post-norm models (opt-350m) and when told to.
        final_norm=pre_norm and not c.bool("_remove_final_layer_norm", False),
        qkv_bias=bias, o_bias=bias, mlp_bias=bias, lm_head_bias=False,
        tie_word_embeddings=c.bool("tie_word_embeddings", True), position_embedding="learned",
        learned_positions=positions + 2,  # OPTLearnedPositionalEmbedding keeps an offset of 2
        max_position_embeddings=positions, embed_proj_dim=proj if proj != hidden else None,
    )


def _falcon(c: ConfigReader) -> dict[str, Any]:
    hidden = c.int("hidden_size")
    heads = c.int("num_attention_heads")
    if hidden % heads:
        raise MlsysError(f"{c.blame('hidden_size', 'num_attention_heads')}: hidden_size {hidden} is not divisible by {heads} heads")
    new_arch = c.bool("new_decoder_architecture", False)
    parallel = c.bool("parallel_attn", True)
    # FalconAttention: a separate K/V head count only with the new architecture or without
    # multi-query; the old non-multi-query layout always projects to 3 x hidden.
    if new_arch:
        kv = c.int("num_kv_heads", heads)
    else:
        kv = 1 if c.bool("multi_query", True) else heads
    ln_count = c.opt_int("num_ln_in_parallel_attn") or (2 if new_arch else 1)
    norms = 2 if (not parallel or ln_count == 2) else 1
    if heads % kv:
        raise MlsysError(f"{c.blame('num_attention_heads', 'num_key_value_heads', 'num_kv_heads')}: {heads} heads are not divisible by {kv} key/value heads")
    bias = c.bool("bias", False)
    alibi = c.bool("alibi", False)
    return dict(
        vocab_size=c.int("vocab_size"), hidden_size=hidden, num_layers=c.int("num_hidden_layers"),
        num_heads=heads, num_kv_heads=kv, head_dim=hidden // heads, v_head_dim=hidden // heads,
        intermediate_size=c.opt_int("ffn_hidden_size") or 4 * hidden, gated_mlp=False,
        activation=c.str("activation", "gelu"), norm="layernorm", norm_bias=True,
        norms_per_layer=norms, final_norm=True, qkv_bias=bias, o_bias=bias, mlp_bias=bias,
        lm_head_bias=False, tie_word_embeddings=c.bool("tie_word_embeddings", True),
        position_embedding="alibi" if alibi else "rope", parallel_attention=parallel,
        max_position_embeddings=c.int("max_position_embeddings", 0, minimum=0),
    )


def _phi(c: ConfigReader) -> dict[str, Any]:
    hidden = c.int("hidden_size")
    heads, kv, head_dim = attention_heads(c, hidden)
    return dict(
        vocab_size=c.int("vocab_size"), hidden_size=hidden, num_layers=c.int("num_hidden_layers"),
        num_heads=heads, num_kv_heads=kv, head_dim=head_dim, v_head_dim=head_dim,
        intermediate_size=c.int("intermediate_size"), gated_mlp=False,
        activation=c.str("hidden_act", "gelu_new"), norm="layernorm", norm_bias=True,
        norms_per_layer=1, final_norm=True, qkv_bias=True, o_bias=True, mlp_bias=True,
        lm_head_bias=True, tie_word_embeddings=c.bool("tie_word_embeddings", False),
        position_embedding="rope", rotary_fraction=c.float("partial_rotary_factor", 0.5),
        parallel_attention=True, qk_norm=c.bool("qk_layernorm", False),
        max_position_embeddings=c.int("max_position_embeddings", 0, minimum=0),
    )


def _nemotron(c: ConfigReader) -> dict[str, Any]:
    # Nemotron-4 (NemotronForCausalLM): LayerNorm1P (a LayerNorm with weight and bias, applied as
    # weight + 1), an ungated MLP (up, squared ReLU, down) with mlp_bias, partial rotary (0.5 unless
    # set). NemotronConfig leaves num_key_value_heads unset: without it transformers cannot build the
    # attention, so it is required.
    spec = _ungated_rope(c, act="relu2", bias_default=False, kv_required=True)
    spec.update(mlp_bias=c.bool("mlp_bias", False), rotary_fraction=rotary_fraction(c, 0.5))
    return spec


NORMALISERS = {"gpt2": _gpt2, "gpt_neox": _gpt_neox, "opt": _opt, "falcon": _falcon, "phi": _phi,
               "nemotron": _nemotron}
