"""Normalisers of the RMSNorm / gated-MLP / RoPE families (Llama and its descendants).

Each reads exactly the keys its transformers implementation (5.24) uses for shapes, with the
defaults of that family's config class; a key whose class has no default is required.
"""

from __future__ import annotations

from typing import Any

from ..validate import finite
from .hf_reader import ConfigReader, attention_heads, sliding


# Which projections carry a bias, by family (transformers' Linear(..., bias=...)): "keys" reads the
# config's attention_bias (q, k, v, o) and mlp_bias; "attention" attention_bias only (the MLP never
# has one); "qkv" q, k and v always, o and the MLP never (Qwen2); "none" no bias anywhere (Mistral).
BIASES = ("keys", "attention", "qkv", "none")


def llama_like(c: ConfigReader, *, tie_default: bool, biases: str, head_dim_default: int | None = None,
               head_dim_required: bool = False, kv_required: bool = False,
               vocab_default: int | None = None) -> dict[str, Any]:
    """The shared layout: RMSNorm before attention and MLP, gated MLP, RoPE. Sizes are required, except
    a vocabulary the family's published configs leave to the class default (vocab_default)."""
    assert biases in BIASES, biases
    hidden = c.int("hidden_size")
    layers = c.int("num_hidden_layers")
    n, kv, head_dim = attention_heads(c, hidden, head_dim_default=head_dim_default, head_dim_required=head_dim_required,
                            kv_required=kv_required)
    attn = c.bool("attention_bias", False) if biases in ("keys", "attention") else biases == "qkv"
    return dict(
        vocab_size=c.int("vocab_size") if vocab_default is None else c.int("vocab_size", vocab_default),
        hidden_size=hidden, num_layers=layers, num_heads=n, num_kv_heads=kv, head_dim=head_dim, v_head_dim=head_dim,
        intermediate_size=c.int("intermediate_size"), gated_mlp=True,
        activation=c.str("hidden_act", "silu"), norm="rmsnorm", norm_bias=False,
        norms_per_layer=2, final_norm=True, qkv_bias=attn, o_bias=attn and biases != "qkv",
        mlp_bias=c.bool("mlp_bias", False) if biases == "keys" else False, lm_head_bias=False,
        tie_word_embeddings=c.bool("tie_word_embeddings", tie_default), position_embedding="rope",
        rotary_fraction=rotary_fraction(c, 1.0),
        max_position_embeddings=c.int("max_position_embeddings", 0, minimum=0),
    )


def rotary_fraction(c: ConfigReader, default: float) -> float:
    """partial_rotary_factor, top level or inside rope_parameters / rope_scaling (transformers 5
    moves it there), else the family's default."""
    for key in ("rope_parameters", "rope_scaling"):
        nested = c.any(key)
        if isinstance(nested, dict) and "partial_rotary_factor" in nested:
            return finite(nested["partial_rotary_factor"], f"{c.where(key)}: 'partial_rotary_factor'")
    return c.float("partial_rotary_factor", default)


def windowed(spec: dict[str, Any], window_and_kinds: tuple[int | None, tuple[str, ...]]) -> dict[str, Any]:
    spec["sliding_window"], spec["layer_types"] = window_and_kinds
    return spec


def _llama(c: ConfigReader) -> dict[str, Any]:
    # LlamaConfig has no window of its own; a sliding_window key is honoured on every layer, as before
    spec = llama_like(c, tie_default=False, biases="keys")
    return windowed(spec, sliding(c, spec["num_layers"]))


def _mistral(c: ConfigReader) -> dict[str, Any]:
    # MistralConfig: sliding_window defaults to 4096, on every layer
    spec = llama_like(c, tie_default=False, biases="none")
    return windowed(spec, sliding(c, spec["num_layers"], default=4096))


def _ministral(c: ConfigReader) -> dict[str, Any]:
    # MinistralConfig: head_dim has no default (the attention reads it as given); window 4096 on every
    # layer unless layer_types says otherwise
    spec = llama_like(c, tie_default=False, biases="none", head_dim_required=True)
    return windowed(spec, sliding(c, spec["num_layers"], default=4096))


def _ministral3(c: ConfigReader) -> dict[str, Any]:
    # Ministral3Config: head_dim 128, no window unless one is set (then on every layer)
    spec = llama_like(c, tie_default=False, biases="none", head_dim_default=128)
    return windowed(spec, sliding(c, spec["num_layers"]))


def _qwen2_window(c: ConfigReader, layers: int) -> tuple[int | None, tuple[str, ...]]:
    """Qwen2/Qwen3: a window only with use_sliding_window, on the layers from max_window_layers on."""
    first = c.int("max_window_layers", 28, minimum=0)
    return sliding(c, layers, default=4096, use_key="use_sliding_window",
                   rule=lambda i: "sliding_attention" if i >= first else "full_attention")


def _qwen2(c: ConfigReader) -> dict[str, Any]:
    # Qwen2Attention: q/k/v projections always carry a bias, o_proj never does.
    spec = llama_like(c, tie_default=False, biases="qkv")
    return windowed(spec, _qwen2_window(c, spec["num_layers"]))


def _qwen3(c: ConfigReader) -> dict[str, Any]:
    # Qwen3Attention: attention_bias on q/k/v/o, RMSNorm(head_dim) on q and k; head_dim defaults to 128
    spec = llama_like(c, tie_default=False, biases="attention", head_dim_default=128)
    spec.update(qk_norm=True, qk_norm_type="rmsnorm")
    return windowed(spec, _qwen2_window(c, spec["num_layers"]))


def _gemma2(c: ConfigReader) -> dict[str, Any]:
    spec = llama_like(c, tie_default=True, biases="attention")
    spec["activation"] = c.str("hidden_activation", "gelu_pytorch_tanh")
    spec["norms_per_layer"] = 4  # input, post-attention, pre-feedforward, post-feedforward
    # even layers slide, odd layers are global
    return windowed(spec, sliding(c, spec["num_layers"], rule=lambda i: "sliding_attention" if (i + 1) % 2
                                  else "full_attention"))


def _gemma3_text(c: ConfigReader) -> dict[str, Any]:
    # Gemma3TextConfig: Gemma-2's four norms and GeGLU, RMSNorm(head_dim) on q and k, head_dim 256,
    # a window (4096) on five layers of every six (sliding_window_pattern), halved plus one with
    # bidirectional attention; scaled embeddings and the dual rope bases change no shape
    # (gemma-3 text_configs leave the vocabulary to Gemma3TextConfig's 262,208)
    spec = llama_like(c, tie_default=True, biases="attention", head_dim_default=256, vocab_default=262_208)
    spec.update(activation=c.str("hidden_activation", "gelu_pytorch_tanh"), norms_per_layer=4,
                qk_norm=True, qk_norm_type="rmsnorm")
    pattern = c.int("sliding_window_pattern", 6)
    window, kinds = sliding(c, spec["num_layers"], default=4096,
                            rule=lambda i: "sliding_attention" if (i + 1) % pattern else "full_attention")
    if window is not None and c.bool("use_bidirectional_attention", False):
        window = window // 2 + 1
    return windowed(spec, (window, kinds))


def _phi3(c: ConfigReader) -> dict[str, Any]:
    spec = llama_like(c, tie_default=False, biases="none")
    return windowed(spec, sliding(c, spec["num_layers"]))


def _olmo2(c: ConfigReader) -> dict[str, Any]:
    # Olmo2DecoderLayer normalises each branch's output (post-attention and post-feedforward RMSNorm,
    # none before): two norms, as many parameters as pre-norm; q_norm and k_norm are RMSNorms over all
    # query (key) heads together
    spec = llama_like(c, tie_default=False, biases="attention")
    spec.update(qk_norm=True, qk_norm_type="rmsnorm_across_heads")
    return spec


def _granite(c: ConfigReader) -> dict[str, Any]:
    # GraniteConfig: Llama's shapes; embedding/residual/attention multipliers and logits_scaling scale
    # activations only
    return llama_like(c, tie_default=False, biases="keys")


NORMALISERS = {
    "llama": _llama, "mistral": _mistral, "ministral": _ministral, "ministral3": _ministral3,
    "qwen2": _qwen2, "qwen3": _qwen3, "gemma2": _gemma2, "gemma3_text": _gemma3_text, "phi3": _phi3,
    "olmo2": _olmo2, "granite": _granite,
}
