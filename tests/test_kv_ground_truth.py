"""KV-cache bytes against the DynamicCache transformers leaves after a prefill (scripts/validate/ground_truth_hf.py,
tests/data/hf_kv.json: bf16, meta device, every built-in at 16 tokens and past each window or chunk)."""

from __future__ import annotations

import pytest

from mlsyscalc import load_model
from mlsyscalc.calc.counts.attention import MASKS, eager_keys
from mlsyscalc.calc.memory.inference import InferOptions, infer_memory
from mlsyscalc.specs.hf import from_hf_config
from mlsyscalc.specs.lookup import builtin_configs

from .conftest import load_data

DOC = load_data("hf_kv.json")
# every built-in, and each family at its transformers config class's defaults (hf_params.json's)
HF = {**DOC["models"], **{f"family:{mt}": f["cases"] for mt, f in DOC["family_defaults"].items()}}
CASES = [(name, i) for name in sorted(HF) for i in range(len(HF[name]))]
BF16 = 2


def _spec(name: str):
    if name.startswith("family:"):
        model_type = name.split(":", 1)[1]
        return from_hf_config(DOC["family_defaults"][model_type]["config"], name=model_type, source="hf_kv.json")
    return load_model(name)


def _expanded(spec) -> int:
    """transformers' Falcon (new decoder architecture) caches K and V repeated for every query head;
    mlsyscalc, as serving engines do, keeps one per KV group."""
    return spec.num_heads // spec.num_kv_heads if spec.model_type == "falcon" and spec.num_kv_heads > 1 else 1


def test_every_builtin_is_measured():
    assert set(DOC["models"]) == set(builtin_configs())


@pytest.mark.parametrize("name, i", CASES)
def test_bytes_per_token_per_layer(name, i):
    """K and V of the KV heads (MLA: the latent and the shared rotary key, as transformers' DeepSeek caches it)."""
    case, spec = HF[name][i], _spec(name)
    per_token = {b // t for b, t in zip(case["bytes_per_layer"], case["tokens_per_layer"])}
    assert per_token == {spec.kv_cache_elements_per_token * BF16 * _expanded(spec)}


@pytest.mark.parametrize("name, i", CASES)
def test_tokens_each_layer_keeps(name, i):
    case, spec = HF[name][i], _spec(name)
    kinds = [spec.layer_type(layer) for layer in range(spec.num_layers)]
    assert case["tokens_per_layer"] == [eager_keys(k, spec.mask_size(k), 0, case["context"]) for k in kinds]


@pytest.mark.parametrize("name, i", CASES)
def test_memory_infer_kv_is_the_cache_at_the_step(name, i):
    """The calculator counts the cache a step attends over, its newest token included: a windowed or
    chunked layer past its W (C) holds W tokens, one more than transformers keeps between steps."""
    case, spec = HF[name][i], _spec(name)
    context = case["context"]
    kv = infer_memory(spec, InferOptions(context=context, dtype="bf16", kv_dtype="bf16")).breakdown["kv_cache"]
    per_token = spec.kv_cache_elements_per_token * BF16
    held = [MASKS[spec.layer_type(layer)].held(context, spec.mask_size(spec.layer_type(layer)))
            for layer in range(spec.num_layers)]
    assert kv == sum(held) * per_token
    one_more = sum(h - t for h, t in zip(held, case["tokens_per_layer"]))
    assert kv * _expanded(spec) == case["total_bytes"] + one_more * per_token * _expanded(spec)
    if i > 0:  # the cases past a window or chunk: every bounded layer of that size holds one more
        size = sorted({spec.mask_size(spec.layer_type(layer)) for layer in range(spec.num_layers)} - {None})[i - 1]
        assert one_more == sum(spec.mask_size(spec.layer_type(layer)) == size for layer in range(spec.num_layers))
