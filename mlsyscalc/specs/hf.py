"""Normalise Hugging Face config.json dicts into ModelSpec: one normaliser per model_type.

The normalisers live by family in hf_llama_like, hf_layernorm and hf_moe; each reads exactly the
keys its transformers implementation uses for shapes, with the same defaults as that
implementation's config class. Reads are tracked, so a `--set` of a key that no normaliser reads
is reported instead of silently ignored. Vision-language wrappers (Gemma 3, Llama 4, Mistral 3)
are normalised by their language model (`text_config`); model_types whose layers are not attention
+ MLP (Mamba/SSM, linear-attention and recurrent hybrids) are refused by name.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from ..errors import MlsysError
from . import hf_layernorm, hf_llama_like, hf_moe
from .hf_reader import ConfigReader
from .model import ModelSpec

NORMALISERS: dict[str, Callable[[ConfigReader], dict[str, Any]]] = {
    **hf_llama_like.NORMALISERS, **hf_layernorm.NORMALISERS, **hf_moe.NORMALISERS,
}
# Vision-language configs: the language model is `text_config` (its model_type, else the one named
# here); mlsyscalc counts that model, not the vision tower or the projector.
TEXT_MODELS = {"gemma3": "gemma3_text", "llama4": "llama4_text", "mistral3": "mistral"}
# Families with layers other than attention + MLP: refused rather than miscounted. The reason says
# which layers mlsyscalc would have to model (state, convolution and scan shapes, their FLOPs and cache).
_SSM = "Mamba/SSM mixer layers (state size, conv1d and selective scan) "
REFUSED = {
    "nemotron_h": _SSM + "between its attention layers (hybrid_override_pattern)",
    "jamba": _SSM + "in most layers, attention in one of eight",
    "bamba": _SSM + "(Mamba-2) in most layers",
    "granitemoehybrid": _SSM + "(Mamba-2) in most layers (Granite 4.0-H)",
    "falcon_h1": _SSM + "(Mamba-2) in parallel with attention in every layer",
    "zamba": _SSM + "with a shared attention block",
    "zamba2": _SSM + "(Mamba-2) with shared attention blocks",
    "mamba": _SSM + "only, no attention", "mamba2": _SSM + "only, no attention",
    "falcon_mamba": _SSM + "only, no attention",
    "qwen3_next": "Gated DeltaNet linear-attention layers (a recurrent state, not a KV cache) in three of four",
    "qwen3_5": "Gated DeltaNet linear-attention layers (a recurrent state, not a KV cache)",
    "qwen3_5_moe": "Gated DeltaNet linear-attention layers (a recurrent state, not a KV cache)",
    "olmo_hybrid": "Gated DeltaNet linear-attention layers (a recurrent state, not a KV cache)",
    "kimi_linear": "Kimi Delta Attention linear-attention layers (a recurrent state, not a KV cache)",
    "minimax": "lightning (linear) attention layers (a recurrent state, not a KV cache)",
    "lfm2": "gated short-convolution blocks (a convolution state, not a KV cache)",
    "lfm2_moe": "gated short-convolution blocks (a convolution state, not a KV cache)",
    "recurrent_gemma": "RG-LRU recurrent blocks (a recurrent state, not a KV cache)",
    "rwkv": "RWKV time-mixing layers (a recurrent state, no attention)",
}


def _text_part(config: dict[str, Any], model_type: str, source: str,
               overrides: Mapping[str, Any]) -> tuple[dict[str, Any], str, str]:
    """(language-model config with the overrides applied, its model_type, its source) of a wrapper."""
    text = config.get("text_config") or {}
    if not isinstance(text, Mapping):
        raise MlsysError(f"{source}: 'text_config' must be a JSON object, got {text!r}")
    text = {**text}
    if "tie_word_embeddings" in config and "tie_word_embeddings" not in text:
        text["tie_word_embeddings"] = config["tie_word_embeddings"]  # a top-level setting applies to the head
    text.update({k: v for k, v in overrides.items() if k != "model_type"})
    return text, str(text.get("model_type", TEXT_MODELS[model_type])), f"{source}: text_config"


def from_hf_config(
    raw: Mapping[str, Any], *, name: str, source: str, aliases: tuple[str, ...] = (),
    overrides: Mapping[str, Any] | None = None,
) -> ModelSpec:
    """Normalise an HF config dict (plus `--set` overrides) into a ModelSpec."""
    if not isinstance(raw, Mapping):
        raise MlsysError(f"{source}: a config.json must hold a JSON object")
    overrides = overrides or {}
    config = {**raw, **overrides}
    model_type = config.get("model_type")
    where = "--set model_type" if "model_type" in overrides else source
    family, shapes, shapes_source = model_type, config, source
    if model_type in TEXT_MODELS:
        shapes, family, shapes_source = _text_part(config, model_type, source, overrides)
        where = f"{source}: text_config"
    if family in REFUSED:
        raise MlsysError(f"{where}: model_type {family!r} is refused: it has {REFUSED[family]}, and mlsyscalc "
                         "models decoder layers of attention + MLP only")
    if family not in NORMALISERS or family in TEXT_MODELS:
        supported = ", ".join(sorted({*NORMALISERS, *TEXT_MODELS}))
        raise MlsysError(f"{where}: unsupported model_type {family!r} (supported: {supported}; refused by name: "
                         f"{', '.join(sorted(REFUSED))})")
    reader = ConfigReader(shapes, shapes_source, frozenset(overrides))
    fields = NORMALISERS[family](reader)
    unused = sorted(set(overrides) - reader.read - {"model_type"})
    if unused:
        raise MlsysError(
            f"--set {', '.join(unused)}: not a key the {family} normaliser reads "
            f"(it reads: {', '.join(sorted(reader.read))})"
        )
    dtype = config.get("torch_dtype") or config.get("dtype") or shapes.get("torch_dtype")
    return ModelSpec(
        name=name, model_type=str(model_type), source=source, aliases=aliases,
        torch_dtype=dtype if isinstance(dtype, str) else None, raw_config=dict(config), **fields,
    )
