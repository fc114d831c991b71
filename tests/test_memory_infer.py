"""Inference memory: exact KV-cache sizes, quantised weights, TP splits, paging, --max solver."""

from __future__ import annotations

import re

import pytest

from mlsyscalc import load_model
from mlsyscalc.calc.memory.inference import InferOptions, infer_memory, solve_max
from mlsyscalc.errors import MlsysError


def kv(name, **kw) -> int:
    return infer_memory(load_model(name), InferOptions(**kw)).breakdown["kv_cache"]


def test_exact_kv_cache_sizes_from_the_issue():
    assert kv("llama2-7b", context=4096) == 2_147_483_648
    assert kv("llama3-8b", context=8192) == 1_073_741_824
    r = infer_memory(load_model("deepseek-v3"), InferOptions(context=1))
    assert r.kv_bytes_per_token == 70_272 == r.breakdown["kv_cache"]


def test_kv_dtype_and_batch_scale_linearly():
    assert kv("llama3-8b", context=8192, kv_dtype="fp8") * 2 == 1_073_741_824
    assert kv("llama3-8b", context=8192, batch=3) == 3 * 1_073_741_824


def test_sliding_window_caps_the_window_layers():
    spec = load_model("mistral-7b")
    assert spec.sliding_window == 4096
    assert kv("mistral-7b", context=32768) == kv("mistral-7b", context=4096)
    # gemma2-9b config.json: 42 layers, every other one with a 4096-token window; 8 KV heads of
    # head_dim 256, so K + V = 2 x 8 x 256 = 4096 elements = 8192 bf16 bytes per token and layer.
    # At 8192 tokens: 21 full layers hold 8192 tokens, 21 window layers hold 4096.
    assert kv("gemma2-9b", context=8192) == 8192 * (21 * 8192 + 21 * 4096) == 2_113_929_216


def test_paged_blocks_round_up_the_last_block():
    exact = kv("llama2-7b", context=1000)
    paged = kv("llama2-7b", context=1000, block_size=16)
    assert paged == exact * 1008 // 1000


def test_tp_splits_kv_heads_or_replicates_them():
    assert kv("llama3-8b", context=8192, tp=2) == 1_073_741_824 // 2
    assert kv("llama3-8b", context=8192, tp=8) == 1_073_741_824 // 8
    assert kv("llama3-8b", context=8192, tp=16) == 1_073_741_824 // 8  # 1 KV head per rank, replicated 2x
    assert kv("deepseek-v3", context=1, tp=8) == 70_272  # the MLA latent is not split
    with pytest.raises(MlsysError, match="num_heads over --tp: 32 is not divisible by 3"):
        infer_memory(load_model("llama2-7b"), InferOptions(tp=3))
    # 40 query heads split over 2 ranks, 5 KV heads neither split nor replicated evenly (head_dim
    # set so that the spec itself is valid: 40 heads do not divide the hidden size 4096)
    five_kv = load_model("llama3-8b", {"num_key_value_heads": 5, "num_attention_heads": 40, "head_dim": 128})
    with pytest.raises(MlsysError, match="num_kv_heads 5 and --tp 2: neither divides the other"):
        infer_memory(five_kv, InferOptions(tp=2))


def test_weight_dtypes_and_group_overhead():
    spec = load_model("llama2-7b")
    w = {d: infer_memory(spec, InferOptions(dtype=d)).detail for d in ("bf16", "int8", "int4", "nf4")}
    linear = w["bf16"]["weights_quantised"] // 2  # decoder projection weights
    assert linear == 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)
    assert w["int4"]["weights_quantised"] == linear // 2
    assert w["int4"]["weights_scales"] == linear // 128 * 2.5  # fp16 scale + 4-bit zero per 128
    assert w["nf4"]["weights_scales"] == linear // 64 * 4  # fp32 absmax per 64
    assert w["int8"]["weights_scales"] == 32 * (4 * 4096 + 2 * 11008 + 4096) * 2  # per output channel
    g32 = infer_memory(spec, InferOptions(dtype="int4", group_size=32)).detail["weights_scales"]
    assert g32 == 4 * w["int4"]["weights_scales"]
    assert w["int4"]["weights_unquantised"] == w["bf16"]["weights_unquantised"]  # embeddings, head, norms


def test_parts_add_up():
    r = infer_memory(load_model("mixtral-8x7b"), InferOptions(batch=4, context=2048, dtype="int4", tp=2))
    assert sum(r.breakdown.values()) == r.total
    assert sum(r.detail.values()) == r.breakdown["weights"] + r.breakdown["activations"]


def test_solve_max_batch_is_the_largest_that_fits():
    spec = load_model("llama2-7b")
    usable = 72 * 10**9
    n, result = solve_max(spec, InferOptions(context=4096), "batch", usable)
    assert result.total <= usable
    assert infer_memory(spec, InferOptions(context=4096, batch=n + 1)).total > usable
    assert n == 27  # (72e9 - 13.5e9 weights - workspace) / 2 GiB per 4096-token sequence
    c, _ = solve_max(spec, InferOptions(), "context", usable)
    assert infer_memory(spec, InferOptions(context=c + 1)).total > usable >= infer_memory(spec, InferOptions(context=c)).total


def test_nothing_fits_returns_zero():
    assert solve_max(load_model("llama2-70b"), InferOptions(), "batch", 10**9) == (0, None)


@pytest.mark.parametrize("opts, message", [
    (InferOptions(batch=0), "--batch must be a positive integer, got 0"),
    (InferOptions(context=-5), "--context must be a positive integer, got -5"),
    (InferOptions(dtype="int3"), "unknown dtype 'int3'"),
    (InferOptions(block_size=-1), "--block-size must be >= 0, got -1"),
    (InferOptions(group_size=0), "--group-size must be positive, got 0"),
])
def test_bad_input_raises(opts, message):
    with pytest.raises(MlsysError, match=re.escape(message)):
        infer_memory(load_model("llama2-7b"), opts)


def test_mqa_kv_projection_replicated_on_every_rank():
    """falcon-7b (1 KV head) on 71 ranks: q/o/MLP split 71 ways, k/v (64 wide) kept whole."""
    r = infer_memory(load_model("falcon-7b"), InferOptions(tp=71))
    h, d, inter = 4544, 64, 18176
    per_layer = 2 * h * (h // 71) + 2 * h * d + 2 * h * (inter // 71)
    assert r.detail["weights_quantised"] == 32 * per_layer * 2
    assert r.breakdown["kv_cache"] == kv("falcon-7b")  # the one KV head, replicated


def test_reserve_must_leave_memory():
    from mlsyscalc.calc.parallel.shards import verdict
    from mlsyscalc.specs.gpu import load_gpu

    with pytest.raises(MlsysError, match="--reserve 100GiB: 107,374,182,400 bytes leave nothing of H100-SXM"):
        verdict(load_gpu("H100-SXM"), 10**9, "100GiB")


def test_max_context_is_unbounded_when_every_layer_has_a_window():
    """mistral-7b keeps a 4096-token window in all layers: memory stops growing with context."""
    with pytest.raises(MlsysError, match="window"):
        solve_max(load_model("mistral-7b"), InferOptions(), "context", 72 * 10**9)
