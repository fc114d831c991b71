"""Normalise Hugging Face config.json dicts into ModelSpec, one function per model family.

Each family reads exactly the keys its transformers implementation uses for shapes, with the
same defaults as that implementation's config class. Reads are tracked, so a `--set` of a key
that no normaliser reads is reported instead of silently ignored.
"""

from __future__ import annotations

import builtins
from typing import Any, Callable, Mapping

from ..errors import MlsysError
from ..validate import MAX_DIM, MAX_LAYERS, finite
from .model import MLASpec, ModelSpec, MoESpec

_MISSING = object()
_MAXIMUM = {"num_hidden_layers": MAX_LAYERS, "n_layer": MAX_LAYERS, "num_layers": MAX_LAYERS}
_WHY = {k: "the deepest published transformers have about 1,000 layers" for k in _MAXIMUM}


class ConfigReader:
    """Typed, tracked access to a raw config dict; errors name the file and the key."""

    def __init__(self, raw: Mapping[str, Any], source: str, overridden: frozenset[str] = frozenset()):
        self.raw = raw
        self.source = source
        self.overridden = overridden  # keys given with --set: their errors name --set, not the file
        self.read: set[str] = set()

    def where(self, key: str) -> str:
        return f"--set {key}" if key in self.overridden else f"{self.source}: {key!r}"

    def blame(self, *keys: str) -> str:
        """Who to name for a problem between keys: the --set overrides among them, else the file."""
        given = [k for k in keys if k in self.overridden]
        return f"--set {', '.join(given)}" if given else self.source

    def _get(self, key: str, default: Any) -> Any:
        self.read.add(key)
        value = self.raw.get(key, default)
        if value is _MISSING:
            raise MlsysError(f"{self.source}: missing key {key!r} (model_type {self.raw.get('model_type')!r})")
        return value

    def int(self, key: str, default: Any = _MISSING, *, minimum: int = 1) -> int:
        """An integer in [minimum, MAX_DIM] (layers: MAX_LAYERS), so no size overflows or takes minutes."""
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise MlsysError(f"{self.where(key)} must be an integer >= {minimum}, got {value!r}")
        maximum = _MAXIMUM.get(key, MAX_DIM)
        if value > maximum:
            raise MlsysError(f"{self.where(key)} = {value:,} is beyond what mlsyscalc models "
                             f"(at most {maximum:,}: {_WHY.get(key, 'a sane model size')})")
        return value

    def opt_int(self, key: str, default: builtins.int | None = None) -> builtins.int | None:
        value = self._get(key, default)
        return None if value is None else self.int(key, value)

    def bool(self, key: str, default: Any = _MISSING) -> bool:
        value = self._get(key, default)
        if not isinstance(value, bool):
            raise MlsysError(f"{self.where(key)} must be true or false, got {value!r}")
        return value

    def float(self, key: str, default: Any = _MISSING) -> float:
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise MlsysError(f"{self.where(key)} must be a number, got {value!r}")
        return finite(value, self.where(key))

    def str(self, key: str, default: Any = _MISSING) -> str:
        value = self._get(key, default)
        if not isinstance(value, str):
            raise MlsysError(f"{self.where(key)} must be a string, got {value!r}")
        return value

    def any(self, key: builtins.str, default: Any = None) -> Any:
        return self._get(key, default)


def _heads(c: ConfigReader, hidden: int, heads_key: str = "num_attention_heads") -> tuple[int, int, int]:
    heads = c.int(heads_key)
    kv = c.opt_int("num_key_value_heads") or heads
    head_dim = c.opt_int("head_dim")
    if head_dim is None:
        if hidden % heads:
            raise MlsysError(f"{c.blame('hidden_size', heads_key)}: hidden size {hidden} is not divisible by {heads} heads; set head_dim")
        head_dim = hidden // heads
    if heads % kv:
        raise MlsysError(f"{c.blame(heads_key, 'num_key_value_heads')}: {heads} attention heads are not divisible by {kv} key/value heads")
    return heads, kv, head_dim


def _sliding(c: ConfigReader, layers: int, use_key: str | None = None) -> tuple[int | None, int]:
    c.read.add("sliding_window")
    if use_key is not None and not c.bool(use_key, False):
        return None, 0
    window = c.opt_int("sliding_window")
    if window is None:
        return None, 0
    layer_types = c.any("layer_types")
    if isinstance(layer_types, list):
        return window, min(layers, sum(t == "sliding_attention" for t in layer_types))
    return window, layers


def _llama_like(c: ConfigReader, *, tie_default: bool, qkv_bias: bool | None = None) -> dict[str, Any]:
    """llama, mistral, mixtral, qwen2, phi3 and gemma2 share this layout (RMSNorm, gated MLP, RoPE)."""
    hidden = c.int("hidden_size")
    layers = c.int("num_hidden_layers")
    heads, kv, head_dim = _heads(c, hidden)
    attn_bias = c.bool("attention_bias", False) if qkv_bias is None else qkv_bias
    return dict(
        vocab_size=c.int("vocab_size"), hidden_size=hidden, num_layers=layers,
        num_heads=heads, num_kv_heads=kv, head_dim=head_dim, v_head_dim=head_dim,
        intermediate_size=c.int("intermediate_size"), gated_mlp=True,
        activation=c.str("hidden_act", "silu"), norm="rmsnorm", norm_bias=False,
        norms_per_layer=2, final_norm=True, qkv_bias=attn_bias,
        o_bias=c.bool("attention_bias", False) if qkv_bias is None else False,
        mlp_bias=c.bool("mlp_bias", False), lm_head_bias=False,
        tie_word_embeddings=c.bool("tie_word_embeddings", tie_default), position_embedding="rope",
        rotary_fraction=c.float("partial_rotary_factor", 1.0),
        max_position_embeddings=c.int("max_position_embeddings", 0, minimum=0),
    )


def _llama(c: ConfigReader) -> dict[str, Any]:
    spec = _llama_like(c, tie_default=False)
    spec["sliding_window"], spec["sliding_window_layers"] = _sliding(c, spec["num_layers"])
    return spec


def _qwen2(c: ConfigReader) -> dict[str, Any]:
    # Qwen2Attention: q/k/v projections always carry a bias, o_proj never does.
    spec = _llama_like(c, tie_default=False, qkv_bias=True)
    spec["sliding_window"], spec["sliding_window_layers"] = _sliding(c, spec["num_layers"], "use_sliding_window")
    return spec


def _gemma2(c: ConfigReader) -> dict[str, Any]:
    spec = _llama_like(c, tie_default=True)
    spec["activation"] = c.str("hidden_activation", "gelu_pytorch_tanh")
    spec["norms_per_layer"] = 4  # input, post-attention, pre-feedforward, post-feedforward
    window, n = _sliding(c, spec["num_layers"])
    if window is not None and not isinstance(c.any("layer_types"), list):
        n = (spec["num_layers"] + 1) // 2  # even layers slide, odd layers are global
    spec["sliding_window"], spec["sliding_window_layers"] = window, n
    return spec


def _top_k(c: ConfigReader, experts_key: str, experts_default: Any = _MISSING, top_k_default: Any = _MISSING) -> tuple[int, int]:
    """(routed experts, experts a token uses): a token cannot use more experts than the layer has."""
    experts, top_k = c.int(experts_key, experts_default), c.int("num_experts_per_tok", top_k_default)
    if top_k > experts:
        raise MlsysError(f"{c.blame('num_experts_per_tok', experts_key)}: num_experts_per_tok {top_k} is more than the "
                         f"{experts} routed experts ({experts_key})")
    return experts, top_k


def _mixtral(c: ConfigReader) -> dict[str, Any]:
    spec = _llama(c)
    experts, top_k = _top_k(c, "num_local_experts")
    spec["moe"] = MoESpec(num_experts=experts, experts_per_token=top_k, expert_intermediate_size=spec["intermediate_size"])
    return spec


def _deepseek_v3(c: ConfigReader) -> dict[str, Any]:
    # a missing MLA/MoE key takes DeepseekV3Config's default (transformers), as loading it would;
    # an explicit null q_lora_rank means no query compression
    spec = _llama_like(c, tie_default=False)
    mla = MLASpec(
        q_lora_rank=c.opt_int("q_lora_rank", 1536), kv_lora_rank=c.int("kv_lora_rank", 512),
        qk_nope_head_dim=c.int("qk_nope_head_dim", 128), qk_rope_head_dim=c.int("qk_rope_head_dim", 64),
        v_head_dim=c.int("v_head_dim", 128),
    )
    moe_inter = c.int("moe_intermediate_size", 2048)
    shared = c.int("n_shared_experts", 1, minimum=0)
    experts, top_k = _top_k(c, "n_routed_experts", 256, 8)
    spec.update(
        head_dim=mla.qk_nope_head_dim + mla.qk_rope_head_dim, v_head_dim=mla.v_head_dim,
        num_kv_heads=spec["num_heads"],  # MLA expands the latent into one K/V per query head
        o_bias=c.bool("attention_bias", False), mla=mla,
        rotary_fraction=mla.qk_rope_head_dim / (mla.qk_nope_head_dim + mla.qk_rope_head_dim),
        moe=MoESpec(
            num_experts=experts, experts_per_token=top_k,
            expert_intermediate_size=moe_inter, num_shared_experts=shared,
            shared_intermediate_size=moe_inter * shared,
            first_dense_layers=c.int("first_k_dense_replace", 3, minimum=0),
            layer_freq=c.int("moe_layer_freq", 1),
        ),
    )
    return spec


def _phi3(c: ConfigReader) -> dict[str, Any]:
    spec = _llama_like(c, tie_default=False)
    spec["sliding_window"], spec["sliding_window_layers"] = _sliding(c, spec["num_layers"])
    return spec


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


def _gpt_neox(c: ConfigReader) -> dict[str, Any]:
    hidden = c.int("hidden_size")
    heads, _, head_dim = _heads(c, hidden)
    bias = c.bool("attention_bias", True)
    rotary = c.any("partial_rotary_factor", None)
    return dict(
        vocab_size=c.int("vocab_size"), hidden_size=hidden, num_layers=c.int("num_hidden_layers"),
        num_heads=heads, num_kv_heads=heads, head_dim=head_dim, v_head_dim=head_dim,
        intermediate_size=c.int("intermediate_size"), gated_mlp=False,
        activation=c.str("hidden_act", "gelu"), norm="layernorm", norm_bias=True, norms_per_layer=2,
        final_norm=True, qkv_bias=bias, o_bias=bias, mlp_bias=True, lm_head_bias=False,
        tie_word_embeddings=c.bool("tie_word_embeddings", False), position_embedding="rope",
        # transformers' GPTNeoXConfig defaults rotary_pct (partial_rotary_factor) to 0.25, as Pythia and
        # GPT-NeoX-20B ship it: a config without the key rotates a quarter of each head
        rotary_fraction=c.float("partial_rotary_factor") if rotary is not None else c.float("rotary_pct", 0.25),
        parallel_attention=c.bool("use_parallel_residual", True),
        max_position_embeddings=c.int("max_position_embeddings", 0, minimum=0),
    )


def _opt(c: ConfigReader) -> dict[str, Any]:
    hidden = c.int("hidden_size")
    heads, _, head_dim = _heads(c, hidden)
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
    heads, kv, head_dim = _heads(c, hidden)
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


NORMALISERS: dict[str, Callable[[ConfigReader], dict[str, Any]]] = {
    "llama": _llama, "mistral": _llama, "mixtral": _mixtral, "qwen2": _qwen2, "gemma2": _gemma2,
    "phi3": _phi3, "deepseek_v3": _deepseek_v3, "gpt2": _gpt2, "gpt_neox": _gpt_neox,
    "opt": _opt, "falcon": _falcon, "phi": _phi,
}


def from_hf_config(
    raw: Mapping[str, Any], *, name: str, source: str, aliases: tuple[str, ...] = (),
    overrides: Mapping[str, Any] | None = None,
) -> ModelSpec:
    """Normalise an HF config dict (plus `--set` overrides) into a ModelSpec."""
    if not isinstance(raw, Mapping):
        raise MlsysError(f"{source}: a config.json must hold a JSON object")
    config = {**raw, **(overrides or {})}
    model_type = config.get("model_type")
    if model_type not in NORMALISERS:
        supported = ", ".join(sorted(NORMALISERS))
        where = "--set model_type" if "model_type" in (overrides or {}) else source
        raise MlsysError(f"{where}: unsupported model_type {model_type!r} (supported: {supported})")
    reader = ConfigReader(config, source, frozenset(overrides or ()))
    fields = NORMALISERS[model_type](reader)
    unused = sorted(set(overrides or {}) - reader.read - {"model_type"})
    if unused:
        raise MlsysError(
            f"--set {', '.join(unused)}: not a key the {model_type} normaliser reads "
            f"(it reads: {', '.join(sorted(reader.read))})"
        )
    dtype = config.get("torch_dtype") or config.get("dtype")
    return ModelSpec(
        name=name, model_type=model_type, source=source, aliases=aliases,
        torch_dtype=dtype if isinstance(dtype, str) else None, raw_config=dict(config), **fields,
    )
