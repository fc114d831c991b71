"""Forward FLOPs against torch.utils.flop_counter.FlopCounterMode on real HF models.

Ground truth: scripts/validate/ground_truth_hf.py (meta device for dense models; small CPU models with
real weights for MoE, whose routing is data-dependent).
"""

from __future__ import annotations

import pytest

from mlsyscalc import FlopOptions, count_flops, count_params, load_model
from mlsyscalc.calc.counts.attention import eager_keys
from mlsyscalc.calc.counts.layers import layer_linears
from mlsyscalc.specs.hf import from_hf_config

from .conftest import load_data

HF = load_data("hf_flops.json")["models"]
FULL = sorted(k for k, v in HF.items() if not v.get("shrunk") and v["phase"] != "train")
TRAIN = sorted(k for k, v in HF.items() if v["phase"] == "train")
SHRUNK = sorted(k for k, v in HF.items() if v.get("shrunk"))
# transformers' Llama 4 MoE runs every token through every expert (a dense bmm with zeroed router
# scores, Llama4TextMoe); mlsyscalc counts the top-k experts a token uses (the FLOPs convention)
DENSE_EXPERTS = ("llama4",)


def _options(case: dict) -> FlopOptions:
    return FlopOptions(batch=case["batch"], seq=case["seq"], phase=case["phase"], context=case.get("context", 0))


def _spec(case: dict):
    """The built-in, or the config recorded with the count (shrunk MoE models, family defaults)."""
    if "config" in case:
        return from_hf_config(case["config"], name=case["model"], source="hf_flops.json")
    return load_model(case["model"])


def _unrouted_flops(spec, tokens: int) -> int:
    """FLOPs of the experts a token is not routed to, where the implementation computes them all."""
    if spec.model_type not in DENSE_EXPERTS:
        return 0
    return sum(2 * tokens * lin.in_features * lin.out_features * (lin.copies - lin.active)
               for layer in range(spec.num_layers) for lin in layer_linears(spec, layer) if lin.copies > 1)


@pytest.mark.parametrize("key", FULL + SHRUNK)
def test_forward_equals_flop_counter(key):
    """Every part exact; a windowed or chunked layer's decode attends over the W - 1 (C - 1) tokens
    transformers' cache keeps plus the new one."""
    case = HF[key]
    spec = _spec(case)
    got = count_flops(spec, _options(case))
    unrouted = _unrouted_flops(spec, got.tokens)
    assert got.forward + unrouted == case["forward_flops"]
    truth = case["breakdown"]
    assert got.breakdown["attention_proj"] == truth["attention_projections"]
    assert got.breakdown["attention_core"] == truth["attention_core"]
    assert got.breakdown["mlp"] + unrouted == truth["mlp"]
    assert got.breakdown["lm_head"] == truth["lm_head"] + truth["embedding_projection"]


def test_llama4_convention_difference_is_only_the_unrouted_experts():
    """Scout routes each token to 1 of 16 experts: transformers computes the other 15 as well."""
    case = HF["llama4-scout"]
    spec = load_model("llama4-scout")
    per_token = 2 * 3 * spec.hidden_size * spec.moe.expert_intermediate_size  # gate, up, down of one expert
    assert _unrouted_flops(spec, 128) == 15 * 128 * 48 * per_token
    assert count_flops(spec, _options(case)).forward < case["forward_flops"] / 6


@pytest.mark.parametrize("key", [k for k in SHRUNK if "total_params" in HF[k]])
def test_moe_params_of_the_small_real_models(key):
    case = HF[key]
    spec = _spec(case)
    assert count_params(spec).total == case["total_params"]
    assert count_params(spec).active == case["active_params"]


@pytest.mark.parametrize("key", [k for k in HF if HF[k]["phase"] == "decode" and "cached_tokens_per_layer" in HF[k]])
def test_decode_keys_per_layer_are_what_the_cache_holds(key):
    """A full layer caches the whole context, a windowed or chunked one W - 1 (C - 1) tokens
    (transformers' DynamicSlidingWindowLayer), and the new token attends to those plus itself."""
    case = HF[key]
    spec = _spec(case)
    want = [eager_keys(spec.layer_type(i), spec.mask_size(spec.layer_type(i)), 0, case["context"])
            for i in range(spec.num_layers)]
    assert want == case["cached_tokens_per_layer"]
    bounded = any(spec.mask_size(spec.layer_type(i)) for i in range(spec.num_layers))
    assert (min(want) < case["context"]) == bounded  # the context passes every window it tests


@pytest.mark.parametrize("key", TRAIN)
def test_backward_is_twice_forward_as_autograd_counts_it(key):
    case = HF[key]
    got = count_flops(load_model(case["model"]), FlopOptions(batch=case["batch"], seq=case["seq"]))
    assert got.forward == case["forward_flops"]
    assert got.backward == case["backward_flops"]


def test_llama2_7b_issue_anchor():
    assert count_flops(load_model("llama2-7b"), FlopOptions(batch=1, seq=2048)).forward == 29_261_612_187_648


def test_decode_attends_to_context_plus_one():
    case = HF["llama2-7b-decode"]
    assert case["attended_kv_len"] == case["context"] + 1
    got = count_flops(load_model("llama2-7b"), FlopOptions(batch=1, phase="decode", context=case["context"]))
    assert got.options.kv_len == case["attended_kv_len"]
    # 4 * kv_len * hidden per layer for scores and values: 4 * 101 * 4096 * 32.
    assert got.breakdown["attention_core"] == 4 * 101 * 4096 * 32


def test_approximations_bracket_the_exact_count():
    """6N*T undercounts attention; 6N + 12*L*S*d_attn equals 3x forward for plain MHA models."""
    got = count_flops(load_model("llama2-7b"), FlopOptions(batch=1, seq=2048))
    assert got.approx_6n < got.train_step
    assert got.approx_6n_attn == got.train_step
