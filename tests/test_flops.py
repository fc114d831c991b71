"""Forward FLOPs against torch.utils.flop_counter.FlopCounterMode on real HF models.

Ground truth: scripts/ground_truth_hf.py (meta device for dense models; small CPU models with
real weights for MoE, whose routing is data-dependent).
"""

from __future__ import annotations

import pytest

from mlsyscalc import FlopOptions, count_flops, count_params, load_model
from mlsyscalc.specs.hf import from_hf_config

from .conftest import load_data

HF = load_data("hf_flops.json")["models"]
FULL = sorted(k for k, v in HF.items() if not v.get("shrunk") and v["phase"] != "train")
TRAIN = sorted(k for k, v in HF.items() if v["phase"] == "train")
SHRUNK = sorted(k for k, v in HF.items() if v.get("shrunk"))


def _options(case: dict) -> FlopOptions:
    return FlopOptions(batch=case["batch"], seq=case["seq"], phase=case["phase"], context=case.get("context", 0))


@pytest.mark.parametrize("key", FULL)
def test_forward_equals_flop_counter(key):
    case = HF[key]
    got = count_flops(load_model(case["model"]), _options(case))
    assert got.forward == case["forward_flops"]
    truth = case["breakdown"]
    assert got.breakdown["attention_proj"] == truth["attention_projections"]
    assert got.breakdown["attention_core"] == truth["attention_core"]
    assert got.breakdown["mlp"] == truth["mlp"]
    assert got.breakdown["lm_head"] == truth["lm_head"] + truth["embedding_projection"]


@pytest.mark.parametrize("key", SHRUNK)
def test_moe_routed_flops_on_small_real_models(key):
    """Each token passes through exactly top-k experts, so the routed count is exact."""
    case = HF[key]
    spec = from_hf_config(case["config"], name=key, source="hf_flops.json")
    assert count_params(spec).total == case["total_params"]
    assert count_params(spec).active == case["active_params"]
    assert count_flops(spec, _options(case)).forward == case["forward_flops"]


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
