"""Value tests written after the held-out mutation sample was scored (docs/mutation.md): each pins an
output the 13 real held-out survivors showed no test reading. Oracles: hand arithmetic from config.json,
transformers' config defaults, the documented option ranges."""

from __future__ import annotations

from mlsyscalc.calc.flops import FlopOptions, count_flops
from mlsyscalc.calc.memory_common import reserve_bytes
from mlsyscalc.specs.hf import from_hf_config
from mlsyscalc.specs.lookup import builtin_configs, load_model


def test_approx_6n_counts_every_matmul_weight_times_tokens():
    """llama2-7b (config.json: hidden 4096, MLP 11008, 32 layers, vocab 32000): per layer q, k, v, o
    4 x 4096^2 = 67,108,864 and gate, up, down 3 x 4096 x 11008 = 135,266,304; 32 layers; lm_head
    4096 x 32000 = 131,072,000. N = 6,607,077,376; 6 N x tokens at batch 2 x 512 tokens."""
    n = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008) + 4096 * 32000
    assert n == 6_607_077_376
    got = count_flops(load_model("llama2-7b"), FlopOptions(batch=2, seq=512))
    assert got.tokens == 1024
    assert got.approx_6n == 6 * n * 1024


def test_reserve_of_zero_percent_is_allowed_and_keeps_nothing_back():
    """--reserve takes a percentage in [0, 100) (docs/memory.md): 0% is the card's whole memory."""
    assert reserve_bytes(80 * 2**30, "0%") == 0
    assert reserve_bytes(80 * 2**30, "12.5%") == 10 * 2**30


def test_falcon_without_parallel_attn_is_parallel():
    """transformers' FalconConfig defaults parallel_attn to True: a falcon config.json without the key
    runs attention and MLP side by side."""
    raw = {k: v for k, v in builtin_configs()["falcon-7b"].items() if k != "parallel_attn"}
    assert from_hf_config(raw, name="falcon-test", source="test").parallel_attention is True
