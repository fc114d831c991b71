"""Efficiency classes (memory_broadcast, matmul_unaligned, attention_small_head) and the backward
kernels of `--impl torch` training, against hand arithmetic and hand counts of what autograd runs
(docs/roofline.md, "Kernels per op" and "Efficiency classes")."""

from __future__ import annotations

import math

import pytest

from mlsyscalc.calc.roofline.calibration import load_ceilings
from mlsyscalc.calc.counts.params import count_params
from mlsyscalc.calc.roofline.model import RooflineOptions, predict_model
from mlsyscalc.calc.roofline.ops import padded_head_dim, predict_attention, predict_matmul
from mlsyscalc.specs.lookup import load_model, parse_overrides

H100 = load_ceilings("H100-SXM")
TINYLLAMA = ["hidden_size=2048", "num_hidden_layers=22", "intermediate_size=5632", "num_key_value_heads=4"]


def _train(spec, ceil=H100, **kw):
    return predict_model(spec, ceil, RooflineOptions(phase="train", impl="torch", master_weights=False, **kw))


def _counts(roof, prefix: str) -> int:
    return sum(r.count for r in roof.rows if r.pred.name.startswith(prefix))


def test_unaligned_gemm_runs_at_its_own_efficiency():
    """gpt2's lm_head (N = 50257, not a multiple of 8 bf16 elements): compute at 0.12 of the peak,
    against 0.74 for the aligned N = 50264; 8192 x 50257 x 768 in 128x256 tiles."""
    odd = predict_matmul(8192, 50257, 768, gpu=H100)
    even = predict_matmul(8192, 50264, 768, gpu=H100)
    assert odd.efficiency_class == "matmul_unaligned" and even.efficiency_class == "matmul"
    assert odd.tiling == even.tiling  # 64 x 197 tiles either way
    assert odd.compute_s / even.compute_s == pytest.approx(0.74 / 0.12)
    # K unaligned too (the dgrad, K = 50257); weight-only int4 GEMMs are not cuBLAS's: unaffected
    assert predict_matmul(8192, 768, 50257, gpu=H100).efficiency_class == "matmul_unaligned"
    assert predict_matmul(1, 50257, 768, gpu=H100, weight_dtype="int4").compute_class == "matmul"
    # a weight gradient's K is the tokens, not a leading dimension: 1001 tokens stay aligned
    assert predict_matmul(4096, 4096, 1001, gpu=H100, lead_dims=(4096, 4096)).compute_class == "matmul"
    assert predict_matmul(4096, 4096, 1001, gpu=H100).compute_class == "matmul_unaligned"


def test_broadcast_class_prices_rotary_by_hand():
    """llama2-7b prefill B8 S2048 --impl torch: rotary.roll on q moves 2 x 16384 x 32 x 128 x 2
    bytes at 0.32 of 3.35 TB/s, plus the 2 us fixed cost (measured on an H100: 352 us)."""
    roof = predict_model(load_model("llama2-7b"), H100, RooflineOptions(batch=8, seq=2048, impl="torch", logits="last"))
    roll = next(r.pred for r in roof.rows if r.pred.name == "rotary.roll")
    q = 16384 * 32 * 128 * 2
    assert roll.efficiency_class == "memory_broadcast"
    assert roll.predicted_s == pytest.approx(2 * q / (3.35e12 * 0.32) + 2e-6, rel=1e-3)
    assert H100.with_efficiency(memory_broadcast=0.64).memory_s(q, q, cls="memory_broadcast") == pytest.approx(
        roll.memory_s / 2)


def test_attention_head_dim_tiles():
    """cuDNN pads d80 to 128-wide tiles (same compute time as d128 at --impl torch) and runs d64
    at attention_small_head (0.49 against 0.61)."""
    assert [padded_head_dim(d) for d in (64, 80, 96, 128, 192, 256, 320)] == [64, 128, 128, 128, 256, 256, 512]
    d80 = predict_attention(4, 32, 32, 2048, 2048, 80, True, gpu=H100, pad_head_dim=True)
    d128 = predict_attention(4, 32, 32, 2048, 2048, 128, True, gpu=H100, pad_head_dim=True)
    assert d80.compute_s == pytest.approx(d128.compute_s) and d80.flops == pytest.approx(d128.flops * 80 / 128)
    plain = predict_attention(4, 32, 32, 2048, 2048, 64, True, gpu=H100)
    small = predict_attention(4, 32, 32, 2048, 2048, 64, True, gpu=H100, pad_head_dim=True)
    assert small.compute_class == "attention_small_head" and plain.compute_class == "attention"
    assert small.compute_s / plain.compute_s == pytest.approx(0.61 / 0.49)


def test_moe_training_with_odd_tokens_per_expert_keeps_aligned_gemms():
    """8000 tokens over 256 experts (8 each): ~250 tokens per expert, the wgrads' K; every
    DeepSeek-V3 GEMM's features are multiples of 8, so no row is priced as unaligned."""
    roof = _train(load_model("deepseek-v3"), batch=8, seq=1000, check_fit=False)
    assert "matmul_unaligned" not in roof.totals()["kernels_by_class"]


def test_backward_kernels_by_hand_pythia():
    """pythia-1.4b (24 layers, q/k/v/o and both MLP linears biased, rotary on 32 of 128 dims):
    6 bias reductions per layer; per rotated tensor (q, k) the partial-rotary backward's 2 zero
    fills, 2 copies and 1 add (the H100 profile: 873 bf16 fills = 2 x 388 optimizer-state fills
    of a first step + 4 x 24 + 1); zero_grad in ceil(1.41e9 / (320 x 65536)) launches."""
    spec = load_model("pythia-1.4b")
    roof = _train(spec, batch=4, seq=2048)
    assert _counts(roof, "bias.bwd_sum") == 6 * 24
    assert _counts(roof, "rotary.bwd_slice_fill") == 2 * 2 * 24
    assert _counts(roof, "rotary.bwd_slice_copy") + _counts(roof, "rotary.bwd_pass_copy") == 2 * 2 * 24
    assert _counts(roof, "rotary.bwd_slice_add") == 2 * 24
    assert _counts(roof, "grad.zero") == math.ceil(count_params(spec).total / (320 * 65536))


def test_zero_grad_launches_match_the_profile():
    """TinyLlama-1.1B: 53 multi-tensor zero launches, as the H100 profile counts (53), and no bias
    or partial-rotary kernels (no biases, full rotary)."""
    spec = load_model("llama2-7b", parse_overrides(TINYLLAMA))
    roof = _train(spec, batch=4, seq=2048)
    assert _counts(roof, "grad.zero") == 53
    assert _counts(roof, "bias.") == 0 and _counts(roof, "rotary.bwd_slice") == 0
    by_class = roof.totals()["kernels_by_class"]
    assert sum(by_class.values()) == roof.kernels and by_class["memory_broadcast"] > 0


def test_gqa_backward_and_vocabulary_softmax_by_hand():
    """TinyLlama (32 query heads over 4 KV heads): cuDNN's fmha_reduce_head for dK and dV in every
    layer (44 in the H100 profile), none for multi-head pythia; log_softmax over 4096 x 32000 fp32
    logits moves 3 reads + 1 write forward (646 us measured) and backward (728 us)."""
    tiny = _train(load_model("llama2-7b", parse_overrides(TINYLLAMA)), batch=2, seq=2048)
    assert _counts(tiny, "attention.bwd_reduce_head") == 2 * 22
    assert _counts(_train(load_model("pythia-1.4b"), batch=2, seq=1024), "attention.bwd_reduce_head") == 0
    logits = 4096 * 32000 * 4
    fwd = next(r.pred for r in tiny.rows if r.pred.name == "loss.log_softmax")
    bwd = next(r.pred for r in tiny.rows if r.pred.name == "loss.bwd_log_softmax")
    assert (fwd.read_bytes, fwd.write_bytes) == (3 * logits, logits) == (bwd.read_bytes, bwd.write_bytes)


@pytest.mark.parametrize("field", ["memory_broadcast", "matmul_unaligned", "attention_small_head"])
def test_a_lower_class_efficiency_never_speeds_a_step_up(field):
    spec = load_model("gpt2") if field == "matmul_unaligned" else load_model("llama2-7b", parse_overrides(TINYLLAMA))
    base = _train(spec, batch=2, seq=1024)
    slow = _train(spec, H100.with_efficiency(**{field: 0.05}), batch=2, seq=1024)
    assert slow.gpu_s > base.gpu_s and slow.time_s >= base.time_s and slow.kernels == base.kernels


def test_cli_efficiency_class_override_and_json(run_cli):
    args = ("roofline", "gpt2", "--phase", "train", "--seq", "1024", "--batch", "8", "--impl", "torch")
    base = run_cli.json(*args)
    slow = run_cli.json(*args, "--efficiency", "matmul_unaligned=0.06")
    assert slow["ceilings"]["efficiency"]["matmul_unaligned"] == 0.06
    assert slow["totals"]["predicted_s"] > base["totals"]["predicted_s"]
    head = [op for op in base["ops"] if op["name"] == "lm_head"]
    assert head[0]["efficiency_class"] == "matmul_unaligned"
    assert sum(base["totals"]["kernels_by_class"].values()) == base["totals"]["kernels"]


def test_calibration_file_carries_the_classes():
    ceil = load_ceilings("H100-SXM", {"gpu": "H100-SXM", "efficiency": {"memory_broadcast": 0.3}})
    assert ceil.efficiency.memory_broadcast == 0.3 and ceil.efficiency.matmul_unaligned == 0.16


def test_unaligned_gemm_streams_slowly_from_eight_rows():
    """gpt2's lm_head (768 -> 50257, not a multiple of 8): one row is cuBLAS's GEMV (matmul_skinny),
    8 rows its CUTLASS align1 kernel, streaming 77.2 MB at 0.22 of 3.35 TB/s: 105 us (measured 105.8)."""
    gemv = predict_matmul(1, 50257, 768, gpu=H100)
    tiled = predict_matmul(8, 50257, 768, gpu=H100)
    assert gemv.memory_class == "matmul_skinny" and tiled.memory_class == "matmul_unaligned_stream"
    read = (8 * 768 + 50257 * 768) * 2
    assert tiled.memory_s == pytest.approx((read + 8 * 50257 * 2) / (0.22 * 3.35e12), rel=1e-3)
    assert tiled.predicted_s == pytest.approx(105.0e-6 + 2e-6, rel=0.01)
    assert predict_matmul(8, 4096, 4096, gpu=H100).memory_class == "matmul_skinny"  # aligned: unchanged
