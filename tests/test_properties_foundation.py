"""Invariants of the params and FLOPs calculators over random model shapes (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mlsyscalc import FlopOptions, count_flops, count_params
from mlsyscalc.specs.hf import from_hf_config


@st.composite
def configs(draw):
    heads = draw(st.sampled_from([1, 2, 4, 8, 16]))
    kv = draw(st.sampled_from([h for h in (1, 2, 4, 8, 16) if heads % h == 0]))
    head_dim = draw(st.sampled_from([8, 16, 64]))
    cfg = {
        "model_type": draw(st.sampled_from(["llama", "qwen2", "mistral"])),
        "vocab_size": draw(st.integers(10, 5000)), "hidden_size": heads * head_dim,
        "num_hidden_layers": draw(st.integers(1, 6)), "num_attention_heads": heads,
        "num_key_value_heads": kv, "intermediate_size": draw(st.integers(1, 512)),
        "tie_word_embeddings": draw(st.booleans()),
    }
    if draw(st.booleans()):
        cfg.update(model_type="mixtral", num_local_experts=draw(st.integers(2, 8)), num_experts_per_tok=1)
    return cfg


def _spec(cfg):
    return from_hf_config(cfg, name="h", source="hypothesis")


@settings(max_examples=60, deadline=None)
@given(configs())
def test_parts_sum_to_totals(cfg):
    p = count_params(_spec(cfg))
    assert sum(p.breakdown.values()) == p.total
    assert 0 < p.active <= p.total
    f = count_flops(_spec(cfg), FlopOptions(batch=2, seq=16))
    assert sum(f.breakdown.values()) == f.forward


@settings(max_examples=60, deadline=None)
@given(configs(), st.integers(1, 4))
def test_more_layers_never_fewer_params_or_flops(cfg, extra):
    deeper = {**cfg, "num_hidden_layers": cfg["num_hidden_layers"] + extra}
    assert count_params(_spec(deeper)).total > count_params(_spec(cfg)).total
    assert count_flops(_spec(deeper)).forward > count_flops(_spec(cfg)).forward


@settings(max_examples=40, deadline=None)
@given(configs(), st.integers(1, 4), st.integers(1, 256))
def test_flops_scale_with_batch_and_causal_halves_attention(cfg, batch, seq):
    spec = _spec(cfg)
    one = count_flops(spec, FlopOptions(batch=1, seq=seq))
    many = count_flops(spec, FlopOptions(batch=batch, seq=seq))
    assert many.forward == batch * one.forward
    causal = count_flops(spec, FlopOptions(batch=1, seq=seq, causal=True))
    assert causal.breakdown["attention_core"] == one.breakdown["attention_core"] // 2
    assert causal.forward - causal.breakdown["attention_core"] == one.forward - one.breakdown["attention_core"]
