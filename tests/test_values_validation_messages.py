"""Checks that must raise, with the message naming the problem, and values that differ only for some
model families (GQA, built-in aliases). Written after the fresh-kind held-out sample was scored
(docs/mutation.md): each pins a class of bug that sample showed the suite did not see.
"""

from __future__ import annotations

import pytest

from mlsyscalc.calc.roofline.calibration import load_ceilings
from mlsyscalc.calc.counts.flops import FlopOptions
from mlsyscalc.calc.roofline.model import RooflineOptions, predict_model
from mlsyscalc.calc.train.attention_time import unfused_attention_ops
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.lookup import load_model

H100 = load_ceilings("H100-SXM")


def test_roofline_options_refuse_an_unknown_impl():
    with pytest.raises(MlsysError, match="impl must be one of fused, torch, got 'triton'"):
        predict_model(load_model("gpt2"), H100, RooflineOptions(phase="prefill", seq=16, impl="triton"))


@pytest.mark.parametrize("name,value", [("batch", 0), ("seq", -3)])
def test_flop_options_name_the_bad_count(name, value):
    with pytest.raises(MlsysError, match=f"^{name} must be a positive integer, got {value}$"):
        FlopOptions(**{name: value}).validate()


def test_unfused_attention_refuses_heads_that_do_not_split():
    """llama3-8b has 32 query heads: --tp 3 cannot split them."""
    with pytest.raises(MlsysError, match="32 heads do not split over --tp 3"):
        unfused_attention_ops(load_model("llama3-8b"), H100, tp=3, micro_batch=1, seq=128)


def test_unfused_attention_core_runs_one_batch_per_query_head():
    """llama3-8b (32 query heads, 8 KV heads, head_dim 128), micro-batch 2, 128 tokens, --tp 2: the score
    GEMM runs 2 x 32 / 2 = 32 batches of 128 x 128 x 128: 2 x 32 x 128^3 FLOPs (KV heads are broadcast to
    the query heads, as Megatron's unfused core does)."""
    ops = unfused_attention_ops(load_model("llama3-8b"), H100, tp=2, micro_batch=2, seq=128)
    scores = next(op for op in ops["forward"] if op.name == "attention scores Q K^T")
    assert scores.flops == 2 * 32 * 128**3


def test_builtin_aliases_are_whole_names():
    """model_specs' stored aliases come back as the names themselves, not their characters."""
    assert load_model("falcon-7b").aliases == ("tiiuae/falcon-7b", "falcon7b", "tiiuae/falcon-7b-instruct")
    assert load_model("falcon7b").name == "falcon-7b"
