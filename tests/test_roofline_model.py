"""Model-level roofline: the issue's sanity anchors with their arithmetic, cross-checks against the
FLOP calculator, MoE expected experts, tensor parallel, training rows and sweep properties."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsyscalc import MlsysError, count_flops, count_params, load_model
from mlsyscalc.calc.roofline.calibration import load_ceilings
from mlsyscalc.calc.comm.tp_rows import RING_STEP_LATENCY_S, collective_s
from mlsyscalc.calc.roofline.model import RooflineOptions, expected_distinct_experts, predict_model
from mlsyscalc.calc.roofline.sweep import compute_bound_batch, sweep_batch

A100 = load_ceilings("A100-80GB-SXM")
H100 = load_ceilings("H100-SXM")


def test_anchor_llama2_7b_decode_a100_cannot_beat_6_6_ms():
    spec = load_model("llama2-7b")
    weights = count_params(spec).total * 2  # bf16
    assert weights == pytest.approx(13.48e9, rel=1e-3)
    floor_s = weights / 2.039e12  # 13.48 GB / 2.039 TB/s (A100-80GB datasheet)
    assert floor_s == pytest.approx(6.61e-3, rel=2e-3)
    r = predict_model(spec, A100, RooflineOptions(phase="decode", batch=1, context=1))
    assert r.time_s > floor_s
    # Minimum bytes: every weight but the embedding table (only 1 of its 32000 rows is read),
    # plus KV cache and activations, at the datasheet bandwidth
    embedding = spec.vocab_size * spec.hidden_size * 2
    assert r.bytes == pytest.approx(weights - embedding, rel=2e-3)
    assert r.bytes / 2.039e12 == pytest.approx(6.48e-3, rel=5e-3)
    assert r.bound == "memory"
    # the prediction itself: bytes at 0.78 x 2.039 TB/s (matmul_skinny: GEMMs stream at 0.88 of the
    # 0.89 copy rate, measured on an H200) = 8.3 ms, plus ~480 kernels x 2 us = 1.0 ms
    assert 8.5e-3 < r.time_s < 9.7e-3


def test_anchor_llama2_7b_prefill_512_is_6_9_tflop():
    spec = load_model("llama2-7b")
    r = predict_model(spec, A100, RooflineOptions(phase="prefill", batch=1, seq=512))
    assert r.model_flops == pytest.approx(6.9e12, rel=0.02)  # 2 x 6.61e9 non-embedding x 512 + attention
    naive_s = r.model_flops / 312e12  # what a peer printing 22 ms computes
    assert naive_s == pytest.approx(22e-3, rel=0.02)
    assert r.time_s > naive_s / 0.74  # our default matmul efficiency ceiling
    assert r.bound == "compute"


@pytest.mark.parametrize("model,phase", [("llama2-7b", "prefill"), ("llama2-7b", "decode"), ("mixtral-8x7b", "prefill"),
                                         ("gpt2", "prefill"), ("gemma2-9b", "decode"), ("falcon-7b", "prefill")])
def test_forward_flops_equal_the_flop_calculator(model, phase):
    spec = load_model(model)
    opts = RooflineOptions(phase=phase, batch=2, seq=256, context=100 if phase == "decode" else 0, check_fit=False)
    r = predict_model(spec, H100, opts)
    tensor_core = sum(row.count * row.pred.flops for row in r.rows if row.pred.kind in ("matmul", "attention"))
    assert tensor_core == pytest.approx(count_flops(spec, opts.flop_options).forward, rel=1e-9)
    assert r.time_s == pytest.approx(sum(row.total_s for row in r.rows) + r.comm_s)


def test_expected_distinct_experts():
    assert expected_distinct_experts(8, 2, 1) == pytest.approx(2)
    assert expected_distinct_experts(8, 2, 2) == pytest.approx(8 * (1 - 0.75**2))  # 3.5
    assert expected_distinct_experts(256, 8, 10_000) == pytest.approx(256)


def test_moe_decode_reads_only_the_routed_experts():
    spec = load_model("mixtral-8x7b")
    r = predict_model(spec, H100, RooflineOptions(phase="decode", batch=1, context=10, tp=2))
    gate = next(row.pred for row in r.rows if row.pred.name == "experts.gate_proj")
    per_expert = 4096 * 14336 // 2 * 2  # tp=2 slice of one expert's gate_proj, bf16
    assert gate.read_bytes == pytest.approx(2 * per_expert + 2 * 4096 * 2)  # k = 2 experts + the token
    big = predict_model(spec, H100, RooflineOptions(phase="decode", batch=64, context=10, tp=2))
    gate64 = next(row.pred for row in big.rows if row.pred.name == "experts.gate_proj")
    assert gate64.read_bytes > 7.9 * per_expert  # 64 tokens hit ~all 8 experts


def test_tensor_parallel_splits_weights_and_adds_collectives():
    spec = load_model("llama2-7b")
    one = predict_model(spec, H100, RooflineOptions(phase="decode", context=128))
    two = predict_model(spec, H100, RooflineOptions(phase="decode", context=128, tp=2))
    q1 = next(r.pred for r in one.rows if r.pred.name == "q_proj")
    q2 = next(r.pred for r in two.rows if r.pred.name == "q_proj")
    assert q2.read_bytes == pytest.approx(q1.read_bytes / 2, rel=1e-3)
    layer_ar = next(c for c in two.comm if c.name == "layer all-reduce")
    assert layer_ar.count == 2 * 32 and layer_ar.size_bytes == 4096 * 2
    assert two.comm_s > 0 and not one.comm
    with pytest.raises(MlsysError, match="not divisible by 3"):
        predict_model(spec, H100, RooflineOptions(phase="decode", context=1, tp=3))


def test_ring_estimate_fallback_is_labelled():
    gpu = load_ceilings("A100-40GB-SXM").gpu  # no built-in cluster lists this GPU
    time_s, how = collective_s("all-reduce", 1e6, gpu, 4)
    assert how.startswith("ring estimate")
    assert time_s == pytest.approx(2 * 3 / 4 * 1e6 / 300e9 + 2 * 3 * RING_STEP_LATENCY_S)


def test_training_step_rows():
    spec = load_model("llama2-7b")
    r = predict_model(spec, H100, RooflineOptions(phase="train", batch=1, seq=2048))
    fwd = sum(x.count * x.pred.flops for x in r.rows if x.pass_name == "forward" and x.pred.kind == "matmul")
    bwd = sum(x.count * x.pred.flops for x in r.rows if x.pass_name == "backward" and x.pred.kind == "matmul")
    assert bwd == pytest.approx(2 * fwd)
    adamw = next(x.pred for x in r.rows if x.pass_name == "optimizer")
    assert adamw.read_bytes == 16 * count_params(spec).total
    assert r.model_flops == 3 * count_flops(spec, RooflineOptions(phase="train", seq=2048).flop_options).forward
    assert 0.3 < r.mfu < 0.74


def test_memory_fit_check():
    spec = load_model("llama2-70b")
    with pytest.raises(MlsysError, match="does not fit"):
        predict_model(spec, H100, RooflineOptions(phase="decode", context=1))
    r = predict_model(spec, H100, RooflineOptions(phase="decode", context=1, check_fit=False))
    assert not r.fits
    assert predict_model(spec, H100, RooflineOptions(phase="decode", context=1, tp=2)).fits


def test_mla_decode_reads_the_latent_cache():
    spec = load_model("deepseek-v3")
    r = predict_model(spec, H100, RooflineOptions(phase="decode", batch=4, context=1000, tp=8, dtype="fp8", kv_dtype="fp8",
                                                  check_fit=False))
    attn = next(x.pred for x in r.rows if x.pred.kind == "attention")
    latent = (512 + 64) * 1  # kv_lora_rank + rope dims, fp8
    assert attn.read_bytes >= 4 * 1001 * latent
    assert attn.read_bytes < 4 * 1001 * latent * 1.05


def test_compute_bound_crossing_and_sweep():
    spec = load_model("llama2-7b")
    opts = RooflineOptions(phase="decode", context=1)
    b = compute_bound_batch(spec, H100, opts)
    assert b is not None and b > 1
    at = lambda n: predict_model(spec, H100, replace(opts, batch=n, check_fit=False))  # noqa: E731
    assert at(b).bound == "compute" and at(b - 1).bound == "memory"
    # MHA with a long context: KV reads grow with the batch, so the step never turns compute-bound
    assert compute_bound_batch(spec, H100, replace(opts, context=4096)) is None
    sweep = sweep_batch(spec, H100, opts, list(range(1, 65)))
    assert len(sweep.points) == 64  # its speed is a benchmark's business, not a timed test
    assert [sweep.points[n - 1].time_s for n in (1, 17, 64)] == [at(n).time_s for n in (1, 17, 64)]
    assert sweep.compute_bound_batch == b


@settings(max_examples=40, deadline=None)
@given(model=st.sampled_from(["llama2-7b", "llama3-8b", "mixtral-8x7b", "qwen2.5-0.5b"]),
       context=st.integers(1, 8192), b1=st.integers(1, 256), extra=st.integers(1, 256),
       gpu=st.sampled_from([A100, H100]))
def test_more_batch_never_fewer_tokens_per_s_below_the_ridge(model, context, b1, extra, gpu):
    """If every kernel at the larger batch is memory-bound, tokens/s cannot drop: each kernel's
    bytes are affine in the batch (MoE: concave), so time/batch only falls."""
    spec = load_model(model)
    opts = RooflineOptions(phase="decode", context=context, check_fit=False)
    small = predict_model(spec, gpu, replace(opts, batch=b1))
    large = predict_model(spec, gpu, replace(opts, batch=b1 + extra))
    if all(r.pred.compute_s <= r.pred.memory_s for r in large.rows):
        assert large.tokens_per_s >= small.tokens_per_s * (1 - 1e-12)
    # more sequences always move more bytes (not always for longer: a skinny GEMM's CTAs, few_cta_stream,
    # are counted by its 64-row tiles)
    assert large.bytes > small.bytes


def test_low_precision_weights_and_kv_cache():
    spec = load_model("llama3-8b")
    opts = RooflineOptions(phase="decode", context=4096)
    rows = {d: predict_model(spec, H100, replace(opts, dtype=d)) for d in ("bf16", "fp8", "int4")}
    q = {d: next(x.pred for x in r.rows if x.pred.name == "q_proj") for d, r in rows.items()}
    weight = 4096 * 4096
    assert q["bf16"].read_bytes == weight * 2 + 4096 * 2
    assert q["fp8"].read_bytes == weight * 1 + 4096 * 1  # fp8 weights and quantised input
    assert q["int4"].read_bytes == weight / 2 + weight / 128 * 2 + 4096 * 2  # packed + bf16 group scales
    assert all(r.options.kv_dtype_name == "bf16" for r in rows.values())  # KV stays bf16 unless --kv-dtype
    fp8_kv = predict_model(spec, H100, replace(opts, kv_dtype="fp8"))
    assert fp8_kv.kv_cache_bytes == pytest.approx(rows["bf16"].kv_cache_bytes / 2)
    assert rows["int4"].time_s < rows["fp8"].time_s < rows["bf16"].time_s
