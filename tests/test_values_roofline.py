"""Value tests for the roofline calculators (kernels, memory-bound ops, the model-level rows, batch
sweeps, notes and the plain-PyTorch kernel lists), written against surviving mutants of the
discovery run (docs/mutation.md). Expected numbers are hand arithmetic written out here from a
model's config.json (model_specs/), the formulas docs/roofline.md documents (tile and wave
quantisation, flash-decoding splits, byte counts of each kernel), or another module computing the
same quantity (calc.counts.flops); never the function under test.

The tile choices are the least padded time over the documented candidates (docs/roofline.md,
"Tiles and waves"): time of a config = waves x BLOCK_M x BLOCK_N x padded K (matmul) or waves x
BLOCK_M x padded KV (attention), ties keeping the earlier (larger) tile; H100-SXM has 132 SMs.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from mlsyscalc import MlsysError, load_model
from mlsyscalc.calc.roofline.calibration import KERNEL_GAP_S, load_ceilings
from mlsyscalc.calc.roofline.memory_bound import copy_cast_op, elementwise_op, rotary_op
from mlsyscalc.calc.roofline.model import RooflineOptions, predict_model
from mlsyscalc.calc.roofline.ops import (predict_attention, predict_grouped_matmul, predict_matmul,
                                         window_fraction)

H100 = load_ceilings("H100-SXM")
SMS = 132  # H100-SXM datasheet: 132 SMs


def _tile(pred) -> tuple[int, int, int, int, int]:
    t = pred.tiling
    return t.block_m, t.block_n, t.split, t.units, t.waves


# --- matmul tiles and waves ---------------------------------------------------------------------

def test_large_tiles_kept_at_128_rows_when_they_fill_the_sms():
    # M = 128, N = 100 x 256: 100 tiles of 128x256 on 132 SMs, one wave 76% busy (>= 0.75), so the
    # large-tile grid stands (the full search would pick 16-row tiles: 1,600 of them in 13 waves
    # of 1/16 the work, 13/16 < 1)
    p = predict_matmul(128, 100 * 256, 4096)
    assert _tile(p) == (128, 256, 1, 100, 1)
    assert p.tiling.wave_fill == pytest.approx(100 / 132, abs=0)
    # one row fewer is skinny (M < 128): the full search runs and smaller tiles win
    assert predict_matmul(127, 100 * 256, 4096).tiling.block_m < 128


def test_wave_fill_is_units_over_waves_times_sms():
    # 4096^3 bf16: 32 x 16 = 512 tiles of 128x256 -> ceil(512 / 132) = 4 waves, 512 / 528 busy
    p = predict_matmul(4096, 4096, 4096)
    assert _tile(p) == (128, 256, 1, 512, 4)
    assert p.as_dict()["tiling"]["wave_fill"] == pytest.approx(512 / (4 * SMS), rel=1e-12)


def test_skinny_64_row_matmul_takes_64x128_tiles_split_4():
    # M = 64, N = K = 4096: 64x128 tiles: 32 tiles x split 4 = 128 units, one wave, K 1024 a split:
    # 64 x 128 x 1024 = 8.4M per SM; 128-row tiles pad M twice over; the 16- and 64-wide tiles that
    # tie come later in the candidate list
    p = predict_matmul(64, 4096, 4096)
    assert _tile(p) == (64, 128, 4, 128, 1)
    assert p.tiling.block_m % 16 == 0 and p.tiling.block_n % 16 == 0  # mma.m16n8k16 tiles


def test_split_k_needs_256_of_k_per_split():
    # K = 384 < 2 x 256: no split-K (each split needs MIN_K_PER_SPLIT = 256); M = 1, N = 4096:
    # 64 tiles of 16x64 in one wave
    assert _tile(predict_matmul(1, 4096, 384)) == (16, 64, 1, 64, 1)
    # K = 512 allows 2 splits: 128 units, still one wave, half the K each
    assert _tile(predict_matmul(1, 4096, 512)) == (16, 64, 2, 128, 1)


@pytest.mark.parametrize("dtype,k", [("bf16", 64 * 65), ("fp8", 128 * 33)])
def test_k_is_padded_to_one_128_byte_row(dtype, k):
    # BLOCK_K = 128 bytes: 64 bf16 or 128 fp8 elements; K a multiple of it is not padded, so the
    # compute time is exactly waves x 2 x BLOCK_M x BLOCK_N x K / (achievable FLOP/s per SM)
    p = predict_matmul(1024, 4096, k, dtype)
    t = p.tiling
    per_sm = H100.flops_per_s(dtype, p.compute_class) / SMS  # fp8 GEMMs price at the matmul_fp8 class
    assert t.split == 1
    assert p.compute_s == pytest.approx(t.waves * 2.0 * t.block_m * t.block_n * k / per_sm, rel=1e-12, abs=0)


def test_batched_matmul_counts_every_batch():
    # batch 4 of (64 x 4096) @ (4096 x 4096): FLOPs 2 x 4 x 64 x 4096^2; bytes 4 x (A + W + C) in bf16
    p = predict_matmul(64, 4096, 4096, batch=4)
    assert p.flops == 2 * 4 * 64 * 4096 * 4096
    assert p.read_bytes == 4 * (64 * 4096 + 4096 * 4096) * 2
    assert p.write_bytes == 4 * 64 * 4096 * 2


def test_int4_weights_carry_one_bf16_scale_per_128():
    # decode GEMV, 4096 x 4096 int4 weights: half a byte each, plus 4096 x 4096 / 128 bf16 scales
    p = predict_matmul(1, 4096, 4096, weight_dtype="int4")
    assert p.read_bytes == 4096 * 2 + 4096 * 4096 // 2 + 4096 * (4096 // 128) * 2
    assert p.write_bytes == 4096 * 2
    # llama3-70b's down_proj, K = 28,672: 224 groups of 128 a column
    p = predict_matmul(1, 8192, 28672, weight_dtype="int4")
    assert p.read_bytes == 28672 * 2 + 8192 * 28672 // 2 + 8192 * 224 * 2


@pytest.mark.parametrize("tokens,n,k", [(1, 1, 1), (1, 4096, 4096), (7, 1, 3)])
def test_unit_sizes_are_valid_matmuls(tokens, n, k):
    # one token (batch-1 decode) and one output column are real shapes: 2 x T x N x K FLOPs
    assert predict_grouped_matmul(tokens, 1, n, k).flops == 2 * tokens * n * k


@pytest.mark.parametrize("tokens,groups,n,k", [(0, 1, 4096, 4096), (1, 1, 0, 4096), (1, 1, 4096, 0),
                                               (4, 0, 4096, 4096)])
def test_empty_matmul_is_refused_by_name(tokens, groups, n, k):
    with pytest.raises(MlsysError, match="up_proj: sizes must be positive"):
        predict_grouped_matmul(tokens, groups, n, k, name="up_proj")


# --- attention tiles, splits and windows --------------------------------------------------------

def test_prefill_attention_keeps_the_fa2_grid_when_it_fills():
    # llama3-8b prefill, batch 4 x 4096: 32 query heads on 8 KV heads, rows = 4096 x 4 per KV head:
    # 32 x 128 = 4096 blocks of 128 rows >= 132 SMs, so FA2's grid stands: 32 waves, no KV split
    # (64-row blocks would take 63 half-size waves, 31.5 < 32: FA2 does not go there)
    p = predict_attention(4, 32, 8, 4096, 4096, 128, True)
    assert _tile(p) == (128, 128, 1, 4096, 32)
    # causal: each block row computes half the 4096 keys on average (fraction 1/2), 2 x (128 + 128)
    # FLOPs a query-key pair, 32 waves of 128 rows
    per_sm = H100.flops_per_s("bf16", "attention") / SMS
    shape = 1.008 * (1 + 357 / 4096)  # ATTENTION_SHAPE's causal forward factor at 4096 keys
    assert p.compute_s == pytest.approx(32 * 128 * 4096 * 2 * 256 * 0.5 / per_sm * shape, rel=1e-12, abs=0)


@pytest.mark.parametrize("batch,split", [(1, 16), (4, 4), (8, 2)])
def test_flash_decoding_split_is_the_first_least_time(batch, split):
    # decode over 8192 cached keys, 8 KV heads, 4 query heads each: 16-row blocks, batch x 8 units.
    # time ~ ceil(8 B s / 132) x 8192 / s: B = 1 falls to one wave at s = 16 (32, 64 tie, later);
    # B = 4 at s = 4; B = 8 at s = 2 (s = 4 would take 2 waves of half the keys: a tie, later)
    p = predict_attention(batch, 32, 8, 1, 8192, 128)
    assert _tile(p) == (16, 128, split, 8 * batch * split, 1)


def test_kv_split_needs_a_full_128_key_block():
    # 200 cached keys: splitting in two leaves 100 < 128 keys a split, so no flash-decoding split
    assert _tile(predict_attention(1, 32, 8, 1, 200, 128)) == (16, 128, 1, 8, 1)
    assert predict_attention(1, 32, 8, 1, 256, 128).tiling.split == 2


def test_window_fraction_with_a_cached_prefix():
    # 100 queries at the end of 1000 keys, window 950: query at p sees min(p, 950) keys for p in
    # [900, 1000]: integral = (950^2 - 900^2) / 2 + 950 x 50 = 46,250 + 47,500
    assert window_fraction(100, 1000, 950) == pytest.approx(93_750 / (100 * 1000), rel=1e-12)
    # window = the prefix length (W = a): every query sees W keys
    assert window_fraction(100, 1000, 900) == pytest.approx(900 * 100 / (100 * 1000), rel=1e-12)
    # a square causal prefill with W < S: S W - W^2 / 2
    assert window_fraction(1000, 1000, 200) == pytest.approx((1000 * 200 - 200**2 / 2) / 1000**2, rel=1e-12)


def test_a_window_of_one_key_is_valid():
    # W = 1: each query sees about itself; the continuous area S W - W^2 / 2 = 1,023.5 pairs,
    # x 2 (d_qk + d_v) FLOPs a pair and head
    p = predict_attention(1, 8, 8, 1024, 1024, 64, True, window=1)
    assert p.flops == pytest.approx(2 * (1024 - 0.5) * 8 * (64 + 64), rel=1e-12)
    with pytest.raises(MlsysError, match="W >= 1"):
        predict_attention(1, 8, 8, 1024, 1024, 64, True, window=0)


@pytest.mark.parametrize("sizes", [(0, 8, 8, 16, 16, 64), (1, 8, 8, 0, 16, 64), (1, 8, 8, 16, 16, 0)])
def test_empty_attention_is_refused(sizes):
    with pytest.raises(MlsysError, match="attention: sizes must be positive"):
        predict_attention(*sizes)


# --- memory-bound kernels (calc.roofline.memory_bound: each input read once, each output written once) -

def test_elementwise_defaults_read_one_input_and_write_one_output():
    p = elementwise_op(1000)  # bf16: 2 bytes an element, 1 FLOP an element
    assert (p.read_bytes, p.write_bytes, p.flops) == (1000 * 2, 1000 * 2, 1000)


@pytest.mark.parametrize("inputs,outputs", [(0, 1), (1, 0), (3, 2)])
def test_elementwise_takes_a_fill_and_a_reduction(inputs, outputs):
    # a zero fill reads nothing (torch.zeros); a write-less op is a pure read
    p = elementwise_op(4096, inputs, outputs, 0.0, "fp32")
    assert (p.read_bytes, p.write_bytes) == (inputs * 4096 * 4, outputs * 4096 * 4)


def test_elementwise_refuses_negative_operands_by_name():
    with pytest.raises(MlsysError, match="gate: sizes must be positive"):
        elementwise_op(4096, -1, 1, name="gate")
    with pytest.raises(MlsysError, match="gate: sizes must be positive"):
        elementwise_op(0, 1, 1, name="gate")


def test_rotary_reads_x_and_the_cos_sin_tables():
    # RoPE on 512 tokens x (32 + 8) heads x 128 dims: read x and a cos and a sin table of
    # 512 positions x 128 (bf16), write x; 3 FLOPs a rotated element (x cos + rot(x) sin)
    x = 512 * 40 * 128
    p = rotary_op(512, 40, 128)
    assert (p.read_bytes, p.write_bytes, p.flops) == (x * 2 + 2 * 512 * 128 * 2, x * 2, 3 * x)
    # decode: one token, the tables of that one position only
    assert rotary_op(1, 40, 128, positions=1).read_bytes == 40 * 128 * 2 + 2 * 128 * 2


def test_kv_cache_cast_writes_the_cache_dtype():
    # 1,000 K/V elements bf16 -> fp8: read 2 bytes, write 1 each; -> fp32: write 4
    assert (copy_cast_op(1000, "bf16", "fp8").read_bytes, copy_cast_op(1000, "bf16", "fp8").write_bytes) == (2000, 1000)
    assert copy_cast_op(1000, "bf16", "fp32").write_bytes == 4000


# --- model-level rows (calc.roofline.model) ---------------------------------------------------------

def _rows(r, name):
    return [row for row in r.rows if row.pred.name == name]


def test_mixtral_routing_kernels_by_hand():
    # mixtral-8x7b (config.json: hidden 4096, 8 experts, top-2, I 14336), 512-token prefill, bf16
    t, e, k, h, i = 512, 8, 2, 4096, 14336
    r = predict_model(load_model("mixtral-8x7b"), H100, RooflineOptions(phase="prefill", seq=t, check_fit=False))
    (topk,) = _rows(r, "router_topk")
    # router softmax + top-k: read T x E logits, write k (int32 index + fp32 weight) a token
    assert (topk.pred.read_bytes, topk.pred.write_bytes, topk.pred.flops) == (t * e * 2, t * k * 8, 5 * t * e)
    (perm,) = _rows(r, "moe_permute")
    # dispatch + combine: 2 x T x k rows of hidden, read and written once, 1 FLOP an element
    assert (perm.pred.read_bytes, perm.pred.write_bytes, perm.pred.flops) == (2 * t * k * h * 2,) * 2 + (2 * t * k * h,)
    (act,) = _rows(r, "mlp_act*up")
    # SiLU(gate) * up over the T x k routed rows of I: two inputs, one output, 5 FLOPs an element
    assert (act.pred.read_bytes, act.pred.write_bytes, act.pred.flops) == (2 * t * k * i * 2, t * k * i * 2, 5 * t * k * i)
    assert act.count == 32


def test_router_is_replicated_under_tensor_parallel():
    # Megatron/vLLM keep the router (4096 -> 8) whole on every rank; q_proj is column-split
    r = predict_model(load_model("mixtral-8x7b"), H100, RooflineOptions(phase="prefill", seq=256, tp=2, check_fit=False))
    (router,) = _rows(r, "router")
    assert router.pred.dims == (256, 1, 8, 4096)
    assert _rows(r, "q_proj")[0].pred.dims == (256, 1, 2048, 4096)


def test_deepseek_v3_moe_layer_by_hand():
    # deepseek-v3 cut to 4 layers (first 3 dense, 1 MoE), 128-token prefill, --tp 8. config.json:
    # 8 of 256 routed experts of 2048 plus 1 shared expert of 2048; q_lora_rank 1536, kv_lora_rank
    # 512 + 64 rope dims (replicated low-rank down-projections)
    spec = replace(load_model("deepseek-v3"), num_layers=4)
    r = predict_model(spec, H100, RooflineOptions(phase="prefill", seq=128, tp=8, check_fit=False))
    dense_act, moe_act = (row for row in r.rows if row.pred.name == "mlp_act*up")
    assert (dense_act.layers, dense_act.count, moe_act.layers, moe_act.count) == ("layers", 3, "moe layers", 1)
    # routed + shared expert widths: 128 x (8 x 2048 + 2048) / 8 ranks, gate and up read, one written
    assert moe_act.pred.write_bytes == 128 * (8 * 2048 + 2048) / 8 * 2
    assert dense_act.pred.write_bytes == 128 * 18432 / 8 * 2  # dense I = 18432
    for row in _rows(r, "q_a_proj"):
        assert row.pred.dims == (128, 1, 1536, 7168)
    for row in _rows(r, "kv_a_proj_with_mqa"):
        assert row.pred.dims == (128, 1, 512 + 64, 7168)
    (router,) = _rows(r, "router")
    assert router.pred.dims == (128, 1, 256, 7168)


def test_one_layer_model_has_one_of_each_layer_kernel():
    spec = replace(load_model("llama3-8b"), num_layers=1)
    r = predict_model(spec, H100, RooflineOptions(phase="prefill", seq=128))
    counts = {row.pred.name: row.count for row in r.rows}
    assert counts["q_proj"] == counts["attention"] == counts["mlp_act*up"] == 1
    assert counts["norm"] == counts["residual_add"] == 2  # pre-attention and pre-MLP; two residuals


@pytest.mark.parametrize("model,tp,vocab", [("llama2-7b", 2, 32000 // 2), ("gpt2", 4, 12565)])
def test_lm_head_vocab_split_pads_to_a_multiple_of_tp(model, tp, vocab):
    # Megatron pads the vocabulary to a multiple of tp: gpt2's 50,257 -> 50,260 = 4 x 12,565
    r = predict_model(load_model(model), H100, RooflineOptions(phase="prefill", seq=128, tp=tp, check_fit=False))
    (head,) = _rows(r, "lm_head")
    assert head.pred.dims[2] == vocab


def test_decode_fit_counts_weights_plus_kv_cache():
    # llama2-7b decode, bf16: 6,738,415,616 params x 2 B = 13.5 GB; KV cache per token 32 layers x
    # 2 (K, V) x 4096 x 2 B = 512 KiB. batch 36 x 4,097 positions = 77.3 GB: 90.8 GB > the 81,559 MiB
    # (85.5 GB) an H100-SXM reports; batch 16: 13.5 + 34.4 GB fits
    spec = load_model("llama2-7b")
    opts = RooflineOptions(phase="decode", batch=36, context=4096, check_fit=False)
    r = predict_model(spec, H100, opts)
    kv = 36 * 4097 * 32 * 2 * 4096 * 2
    assert H100.gpu.memory_bytes == 81_559 * 2**20
    assert (r.weight_bytes, r.kv_cache_bytes) == (6_738_415_616 * 2, kv)
    assert r.fits is False and r.totals()["fits"] is False
    assert predict_model(spec, H100, replace(opts, batch=16)).fits is True
    with pytest.raises(MlsysError, match="does not fit"):
        predict_model(spec, H100, replace(opts, check_fit=True))


@pytest.mark.parametrize("phase,batch,size", [("prefill", 1, 8192), ("prefill", 3, 8192), ("decode", 3, 8192),
                                              ("prefill", 2, 2048)])
def test_sliding_window_model_flops_match_the_kernels(phase, batch, size):
    # mistral-7b (window 4096 on all 32 layers, --sliding-window skip): MFU's model FLOPs
    # (calc.counts.flops' forward minus the tiles the window kernel skips) equal the FLOPs of the step's
    # GEMM and attention kernels (calc.roofline.ops), computed separately
    kw = {"seq": size} if phase == "prefill" else {"context": size}
    r = predict_model(load_model("mistral-7b"), H100, RooflineOptions(phase=phase, batch=batch, check_fit=False, **kw))
    kernels = sum(row.count * row.pred.flops for row in r.rows if row.pred.kind in ("matmul", "attention"))
    assert r.model_flops == pytest.approx(kernels, rel=1e-9)


def test_torch_impl_prefill_ends_with_the_fp32_logits_cast():
    # --impl torch, inference: logits.float() after the lm_head: read T x V bf16, write T x V fp32
    r = predict_model(load_model("llama2-7b"), H100, RooflineOptions(phase="prefill", seq=128, impl="torch"))
    (cast,) = _rows(r, "logits.float")
    assert (cast.pred.read_bytes, cast.pred.write_bytes, cast.count) == (128 * 32000 * 2, 128 * 32000 * 4, 1)


# --- batch sweeps and notes -------------------------------------------------------------------------

def test_sweep_reports_points_that_do_not_fit_instead_of_refusing():
    # llama2-7b decode at 4,096 context: batch 64 needs 13.5 + 137.5 GB (above), reported as not
    # fitting rather than refused; a single batch value is a valid sweep
    from mlsyscalc.calc.roofline.sweep import sweep_batch

    spec, opts = load_model("llama2-7b"), RooflineOptions(phase="decode", context=4096)
    sweep = sweep_batch(spec, H100, opts, [64, 1])
    assert [p.options.batch for p in sweep.points] == [1, 64]
    assert [p.fits for p in sweep.points] == [True, False]
    assert len(sweep_batch(spec, H100, opts, [8]).points) == 1
    with pytest.raises(MlsysError, match="at least one value"):
        sweep_batch(spec, H100, opts, [])


def test_compute_bound_search_stops_at_its_limit():
    # decode of llama2-7b at batch <= 4 reads ~13.5 GB of weights for ~4 x 13.5 GFLOP: memory-bound
    # throughout, so a search limited to 4 finds no compute-bound batch (and returns)
    from mlsyscalc.calc.roofline.sweep import compute_bound_batch

    opts = RooflineOptions(phase="decode", context=128)
    assert compute_bound_batch(load_model("llama2-7b"), H100, opts, limit=4) is None
    assert compute_bound_batch(load_model("llama2-7b"), H100, opts, limit=1) is None
    # llama3-8b prefill of 160 tokens a sequence: memory-bound at batch 1, compute-bound at 2; a
    # search limited to batch 1 does not answer 2
    pre = RooflineOptions(phase="prefill", seq=160)
    assert compute_bound_batch(load_model("llama3-8b"), H100, pre) == 2
    assert compute_bound_batch(load_model("llama3-8b"), H100, pre, limit=1) is None


def test_window_note_needs_sliding_layers():
    # a config with a sliding_window but every layer listed as full attention has no windowed layer
    # (transformers' layer_types): no window note; mistral-7b (window on all 32 layers) has one
    from mlsyscalc.calc.roofline.notes import model_notes
    from mlsyscalc.specs.hf import from_hf_config
    from mlsyscalc.specs.lookup import builtin_configs

    raw = dict(builtin_configs()["llama3-8b"], sliding_window=4096, layer_types=["full_attention"] * 32)
    spec = from_hf_config(raw, name="llama-full-layers", source="test")
    assert (spec.sliding_window, spec.sliding_window_layers) == (4096, 0)
    opts = RooflineOptions(phase="prefill", seq=8192)
    assert not [n for n in model_notes(spec, opts) if "sliding window" in n]
    notes = model_notes(load_model("mistral-7b"), opts)
    assert [n for n in notes if n.startswith("sliding window 4096 on 32 of 32 layers")]


# --- plain-PyTorch kernels (--impl torch, calc.roofline.torch_kernels; docs/roofline.md "Kernels per op") --

def _torch_rows(model, **opts):
    return predict_model(load_model(model) if isinstance(model, str) else model, H100,
                         RooflineOptions(impl="torch", **opts))


def _by_name(r, name, pass_name=None):
    rows = [row for row in r.rows if row.pred.name == name and (pass_name is None or row.pass_name == pass_name)]
    assert rows, name
    return rows


def test_torch_decode_kernels_of_llama2_7b_by_hand():
    # llama2-7b (MHA: 32 heads of 128, I = 11008), batch 1, decode after 8,192 cached tokens, bf16
    r = _torch_rows("llama2-7b", phase="decode", context=8192)
    one = {row.pred.name: row for row in r.rows}
    # KV-cache append: a copy for K and one for V, 32 KV heads x 128 each (bf16 in, bf16 out)
    for name in ("kv_cache_write.k", "kv_cache_write.v"):
        assert (one[name].pred.read_bytes, one[name].pred.write_bytes, one[name].count) == (32 * 128 * 2,) * 2 + (32,)
    # SiLU(gate) and gate * up: one input then two, one output each, over I = 11008
    assert (one["mlp_act"].pred.read_bytes, one["mlp_act"].pred.write_bytes) == (11008 * 2, 11008 * 2)
    assert (one["mlp_mul"].pred.read_bytes, one["mlp_mul"].pred.write_bytes) == (2 * 11008 * 2, 11008 * 2)
    # rotary on q and on k (32 heads each): x * cos, roll, addcmul with the one position's tables
    x, table = 32 * 128 * 2, 128 * 2
    assert (one["rotary.mul_cos"].pred.read_bytes, one["rotary.mul_cos"].count) == (x + table, 64)
    assert one["rotary.addcmul"].pred.read_bytes == 2 * x + table
    # cuBLAS split-K reductions (profiles: q/k/v/o and down_proj split at B1, not gate/up nor
    # lm_head): the q_proj GEMM splits K = 4096 in 4, fp32 partials of 4096 outputs
    reduces = {row.pred.name for row in r.rows if row.pred.name.endswith(".splitk_reduce")}
    assert reduces == {f"{n}.splitk_reduce" for n in ("q_proj", "k_proj", "v_proj", "o_proj", "down_proj")}
    q = one["q_proj.splitk_reduce"].pred
    split = one["q_proj"].pred.tiling.split
    assert (q.read_bytes, q.write_bytes) == (split * 4096 * 4, 4096 * 2)
    # flash-decoding combine: split fp32 partial outputs (32 heads x 128) plus a max and a sum per
    # head and split (2 / d_v of the output), one bf16 output
    att = one["attention"].pred.tiling.split
    assert att > 1
    comb = one["attention.combine"].pred
    assert comb.read_bytes == pytest.approx(att * 4096 * 4 * (1 + 2 / 128), rel=1e-12)
    assert comb.write_bytes == 4096 * 2
    # inference logits cast to fp32 (.float()): 32,000 logits of the one position
    assert (one["logits.float"].pred.read_bytes, one["logits.float"].pred.write_bytes) == (32000 * 2, 32000 * 4)


def test_torch_kv_cache_write_in_fp8():
    # llama3-8b, batch 2 decode, --kv-dtype fp8: each of K and V: 2 tokens x 8 KV heads x 128, read in
    # bf16 and written in fp8 (1 byte)
    r = _torch_rows("llama3-8b", phase="decode", batch=2, context=1024, kv_dtype="fp8")
    for name in ("kv_cache_write.k", "kv_cache_write.v"):
        (row,) = _by_name(r, name)
        assert (row.pred.read_bytes, row.pred.write_bytes) == (2 * 8 * 128 * 2, 2 * 8 * 128)


def test_torch_mla_decode_caches_the_latent():
    # deepseek-v3 (4 layers) decode: the cached latent is kv_lora_rank + rope = 512 + 64 = 576
    # elements a token: concatenated, then written to the cache (bf16)
    spec = replace(load_model("deepseek-v3"), num_layers=4)
    r = _torch_rows(spec, phase="decode", context=128, check_fit=False)
    for name in ("kv_cache_cat", "kv_cache_write"):
        for row in _by_name(r, name):
            assert (row.pred.read_bytes, row.pred.write_bytes) == (576 * 2, 576 * 2)


def test_torch_partial_rotary_of_phi_2():
    # phi-2: 32 heads of 80 dims, partial_rotary_factor 0.4 -> 32 rotated dims; 128-token prefill.
    # per tensor (q, then k, 32 heads each): x * cos, roll, addcmul over the rotated slice, a copy
    # making the slice contiguous, and a cat of the two parts over the whole head
    r = _torch_rows("phi-2", phase="prefill", seq=128)
    one = {row.pred.name: row for row in r.rows}
    x, table, full = 128 * 32 * 32 * 2, 128 * 32 * 2, 128 * 32 * 80 * 2
    assert (one["rotary.mul_cos"].pred.read_bytes, one["rotary.mul_cos"].pred.write_bytes) == (x + table, x)
    assert (one["rotary.roll"].pred.read_bytes, one["rotary.slice_copy"].pred.read_bytes) == (x, x)
    assert (one["rotary.cat"].pred.read_bytes, one["rotary.cat"].pred.write_bytes) == (full, full)
    assert one["rotary.cat"].count == 2 * 32


def test_cublas_split_rule_boundaries():
    from mlsyscalc.calc.roofline.torch_kernels import cublas_splits

    # one decode row, K = 4096: N = 4160 gives 65 tiles of 64 columns (< 132 / 2): split and reduced;
    # N = 4224 gives 66, not fewer than 66: not reduced (K < 2 N)
    small, edge = predict_matmul(1, 4160, 4096), predict_matmul(1, 4224, 4096)
    assert small.tiling.split > 1 and edge.tiling.split > 1
    assert (cublas_splits(small, SMS), cublas_splits(edge, SMS)) == (True, False)
    # a GEMM the large-tile grid fills (99 x 1 tiles of 128x256, no split) has no reduction even with
    # K >= 2 N
    whole = predict_matmul(128 * 99, 256, 8192)
    assert whole.tiling.split == 1 and cublas_splits(whole, SMS) is False
    # a few-tile GEMM of up to 8 rows splits from K = 4096 (SPLIT_FEW_TILES_MIN_K: llama2-7b's
    # 4096 x 4096 split, qwen2.5-7b's 3584 x 3584 and pythia-1.4b's 2048 x 2048 not, H100 decode
    # profiles); from 9 rows from K = 3584 (qwen2.5-7b B16 split)
    assert [cublas_splits(predict_matmul(m, 4096, k), SMS) for m, k in ((1, 4096), (1, 4095), (8, 3584), (9, 3584),
                                                                        (16, 3583))] == [True, False, False, True, False]
    # 33 rows take three 16-row tiles: 40 x 3 = 120 >= 66
    thick = predict_matmul(33, 2560, 4096)
    assert thick.tiling.split > 1 and cublas_splits(thick, SMS) is False
    # a long reduction, K >= 2 N, is split whatever the tile count (66 here)
    assert (cublas_splits(predict_matmul(1, 4224, 8448), SMS), cublas_splits(predict_matmul(1, 4224, 8447), SMS)) \
        == (True, False)


def test_adamw_launches_follow_multi_tensor_apply():
    from mlsyscalc.calc.roofline.torch_kernels import adamw_launches

    # ATen MultiTensorApply.cuh: kChunkSize 65536, 320 blocks a launch, 36 tensors at depth 4
    assert adamw_launches(320 * 65536, 36) == 1
    assert adamw_launches(320 * 65536 + 1, 36) == 2
    assert adamw_launches(1000, 37) == 2
    assert adamw_launches(1, 1) == 1


# parameter tensors and parameters: the plain-torch model builder (bench.torch_models) on tiny
# versions, an independent implementation; parameters also equal calc.counts.params
_HF = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
       "intermediate_size": 96, "vocab_size": 97, "max_position_embeddings": 64}
_TINY = {
    "llama2-7b": _HF, "mixtral-8x7b": {**_HF, "num_local_experts": 4}, "qwen2.5-7b": _HF,
    "phi-2": {**_HF, "num_key_value_heads": 4},
    "pythia-1.4b": {k: v for k, v in _HF.items() if k != "num_key_value_heads"},
    # untied heads: the builder's tied lm_head shares the embedding's tensor
    "gpt2": {"n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 97, "n_positions": 64, "tie_word_embeddings": False},
    "opt-350m": {"hidden_size": 64, "ffn_dim": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 97,
                 "max_position_embeddings": 64, "word_embed_proj_dim": 32, "tie_word_embeddings": False},
}


@pytest.mark.parametrize("name,changes", [(n, {}) for n in _TINY] + [
    ("pythia-1.4b", {"norm_bias": False}), ("gpt2", {"norm_bias": False}), ("llama2-7b", {"norm_bias": True}),
    ("llama2-7b", {"qk_norm": True})])  # phi's qk_layernorm: LayerNorm(head_dim) with a bias, on q and k
def test_param_tensors_match_the_torch_model(name, changes):
    torch = pytest.importorskip("torch")  # noqa: F841
    from mlsyscalc.bench.torch_models import build_model
    from mlsyscalc.calc.counts.params import count_params
    from mlsyscalc.calc.roofline.torch_kernels import param_tensors, step_param_tensors

    # LayerNorm(bias=False); an RMSNorm has no bias whatever the flag
    spec = replace(load_model(name, _TINY[name]), **changes)
    model = build_model(spec, "float32", "meta")
    tensors = list(model.parameters())
    assert step_param_tensors(spec) == len(tensors)
    params = param_tensors(spec, None)[1] + sum(param_tensors(spec, i)[1] for i in range(spec.num_layers))
    assert params == sum(t.numel() for t in tensors) == count_params(spec).total


def _sum_count(r, name, pass_name="backward"):
    return sum(row.count for row in _by_name(r, name, pass_name))


def test_torch_train_backward_kernels_of_llama2_by_hand():
    # llama2-7b cut to 2 layers, 256-token training step, bf16 (a = 2): T = 256, h = 4096,
    # 32 heads of 128, vocabulary 32,000. Byte counts of the kernels docs/roofline.md lists
    spec = replace(load_model("llama2-7b"), num_layers=2)
    r = _torch_rows(spec, phase="train", seq=256)
    t, h, v, a = 256, 4096, 32000, 2
    one = {row.pred.name: row.pred for row in r.rows if row.pass_name == "backward"}

    def rw(name):
        return one[name].read_bytes, one[name].write_bytes

    # cross-entropy backward in fp32: zero fill of T x V, nll scatter (int64 targets), log_softmax
    # backward (reads the output and its gradient), cast back to bf16
    assert rw("loss.bwd_fill") == (0, t * v * 4)
    assert rw("loss.bwd_nll") == (t * 8, t * 4)
    # log_softmax backward reads its output and the gradient at least once each (a vocabulary-wide
    # row may take more passes), writes the input gradient
    assert rw("loss.bwd_log_softmax")[0] >= 2 * t * v * 4 and rw("loss.bwd_log_softmax")[1] == t * v * 4
    assert rw("loss.bwd_cast") == (t * v * 4, t * v * a)
    # final norm backward reads x, its gradient and the output; the embedding's gradient: index
    # sort, a zero fill of the whole V x h table, and the scatter-add of T rows
    assert rw("final_norm.bwd") == (3 * t * h * a, t * h * a)
    assert rw("embedding.bwd_sort") == (t * 16, t * 16)
    assert rw("embedding.bwd_fill") == (0, v * h * a)
    assert rw("embedding.bwd_scatter") == (t * h * a + t * 8, t * h * a)
    # RMSNorm backward: input gradient (x, dy -> dx) and fp32 weight gradient, 2 norms a layer
    assert rw("norm.bwd_input") == (2 * t * h * a, t * h * a)
    assert rw("norm.bwd_weight") == (2 * t * h * a, h * 4)
    assert _sum_count(r, "norm.bwd_input") == 2 * 2
    # rotary backward, 4 kernels per tensor (q and k: 32 heads each), tables of T positions
    x, table = t * 32 * 128 * a, t * 128 * a
    assert rw("rotary.bwd_mul_cos") == rw("rotary.bwd_mul_sin") == (x + table, x)
    assert rw("rotary.bwd_add") == (2 * x, x)
    assert _sum_count(r, "rotary.bwd_mul_cos") == 2 * 2
    assert not [row for row in r.rows if row.pass_name == "backward" and row.pred.name == "rotary.mul_cos"]
    # FA2 backward's dq accumulator converted from fp32
    assert rw("attention.bwd_dq_convert") == (t * 32 * 128 * 4, t * 32 * 128 * a)
    # autograd's gradient sums: 2 residual branch points, q/k/v share an input (2 adds), gate/up (1)
    assert rw("grad_accumulate") == (2 * t * h * a, t * h * a)
    assert one["grad_accumulate"].flops == t * h
    assert _sum_count(r, "grad_accumulate") == 5 * 2
    # one accumulating add into .grad per parameter tensor: 9 a layer (7 linears, 2 norms), 3 in the
    # head (embedding, final norm, lm_head)
    grads = {row.layers: row.count for row in _by_name(r, "grad.accumulate")}
    assert grads == {"layers": 9 * 2, "head": 3}


def test_torch_train_without_a_final_norm():
    # opt-350m is post-norm (do_layer_norm_before false): no final LayerNorm, so none backward
    r = _torch_rows("opt-350m", phase="train", seq=128)
    names = {row.pred.name for row in r.rows}
    assert "final_norm" not in names and "final_norm.bwd" not in names
    assert "loss.bwd_log_softmax" in names


# --- neighbours: the other outputs of the same functions ---------------------------------------------

PEAK_BF16, HBM_BPS = 989.5e12, 3.35e12  # H100-SXM datasheet: 989.5 TFLOP/s dense bf16, 3.35 TB/s


def test_op_prediction_summary_fields():
    # a 4096^3 bf16 GEMM: 2 x 4096^3 FLOPs, 3 x 4096^2 x 2 bytes
    p = predict_matmul(4096, 4096, 4096)
    flops, nbytes = 2 * 4096**3, 3 * 4096 * 4096 * 2
    assert (p.flops, p.bytes) == (flops, nbytes)
    assert p.intensity_flops_per_byte == pytest.approx(flops / nbytes, rel=1e-12)
    assert p.roofline_s == pytest.approx(max(flops / PEAK_BF16, nbytes / HBM_BPS), rel=1e-12)
    assert p.overhead_s == 2e-6  # the fixed per-kernel cost
    assert p.predicted_s == pytest.approx(max(p.compute_s, p.memory_s) + 2e-6, rel=1e-12, abs=0)
    assert (p.bound, p.shape_class) == ("compute", "square")
    assert p.achievable_fraction == pytest.approx(p.roofline_s / p.predicted_s, rel=1e-12)
    assert p.attained_flops_per_s == pytest.approx(flops / p.predicted_s, rel=1e-12)
    d = p.as_dict()
    assert (d["bytes"], d["bound"], d["shape"]) == (nbytes, "compute", "4096x4096x4096")
    # a batch-1 GEMV streams the weights: memory-bound, skinny
    g = predict_matmul(1, 4096, 4096)
    assert (g.bound, g.shape_class) == ("memory", "skinny")
    # a tiny kernel is bound by its fixed cost
    assert elementwise_op(16).bound == "overhead"


@pytest.mark.parametrize("dtype,out_bytes,in_bytes", [("fp8", 2, 1), ("int8", 4, 1), ("bf16", 2, 2), ("fp32", 4, 4)])
def test_matmul_output_dtype(dtype, out_bytes, in_bytes):
    # torch._scaled_mm writes bf16 from fp8, torch._int_mm int32 from int8; others their own dtype
    p = predict_matmul(128, 4096, 1024, dtype)
    assert p.write_bytes == 128 * 4096 * out_bytes
    assert p.read_bytes == (128 * 1024 + 4096 * 1024) * in_bytes


def test_grouped_matmul_with_a_fractional_expert_count():
    # 1024 routed rows over an expected 7.5 distinct experts: weight bytes use 7.5, the grid rounds
    # up to 8 groups of ceil(1024 / 7.5) = 137 rows
    p = predict_grouped_matmul(1024, 7.5, 14336, 4096)
    assert p.read_bytes == 1024 * 4096 * 2 + 7.5 * 14336 * 4096 * 2
    assert p.write_bytes == 1024 * 14336 * 2
    assert p.flops == 2 * 1024 * 14336 * 4096
    assert p.shape == "7.5x(137x14336x4096)"
    assert p.dims == (1024, 7.5, 14336, 4096)
    assert p.tiling.units % 8 == 0  # whole groups of tiles


def test_attention_bytes_forward_backward_and_window():
    # B 2, 32 query heads on 8 KV heads, 1024 x 1024, d 128, bf16
    q = o = 2 * 1024 * 32 * 128 * 2
    kv = 2 * 1024 * 8 * 256 * 2
    fwd = predict_attention(2, 32, 8, 1024, 1024, 128, True)
    assert (fwd.read_bytes, fwd.write_bytes) == (q + kv, o)
    # causal: half the square plus the diagonal's half (continuous convention: S^2 / 2)
    assert fwd.flops == pytest.approx(2 * 2 * 32 * (1024 * 1024 / 2) * 256, rel=1e-12)
    # FA2 backward reads Q, K, V, O, dO and writes dQ, dK, dV; 5 matmuls vs 2: FLOPs x 2.5
    bwd = predict_attention(2, 32, 8, 1024, 1024, 128, True, backward=True)
    assert (bwd.read_bytes, bwd.write_bytes) == (q + kv + 2 * o, q + kv)
    assert bwd.flops == pytest.approx(2.5 * fwd.flops, rel=1e-12)
    # 16 queries at the end of 8192 keys with a 1024 window read only the last 16 + 1023 keys
    w = predict_attention(1, 8, 8, 16, 8192, 128, True, window=1024)
    assert w.read_bytes == 16 * 8 * 128 * 2 + 1039 * 8 * 256 * 2
    # an fp8 KV cache: K and V at 1 byte, Q and O at 2
    f8 = predict_attention(1, 32, 8, 1, 4096, 128, kv_dtype="fp8")
    assert f8.read_bytes == 32 * 128 * 2 + 4096 * 8 * 256 * 1


def test_memory_op_requires_bytes_and_prices_flops_on_cuda_cores():
    from mlsyscalc.calc.roofline.memory_bound import embedding_op, norm_op, softmax_op
    from mlsyscalc.calc.roofline.ops import predict_memory_op

    with pytest.raises(MlsysError, match="fill: no bytes moved"):
        predict_memory_op("fill", 0, 0)
    p = predict_memory_op("x", 100, 100, 1e9)
    assert p.compute_s == pytest.approx(1e9 / H100.flops_per_s("fp32", "matmul"), rel=1e-12, abs=0)
    # RMSNorm of 512 x 4096: read x and the 4096 weights, write y; 4 FLOPs an element
    n = norm_op(512, 4096)
    assert (n.read_bytes, n.write_bytes, n.flops) == (513 * 4096 * 2, 512 * 4096 * 2, 4 * 512 * 4096)
    s = softmax_op(64, 1000)
    assert (s.read_bytes, s.write_bytes, s.flops) == (64000 * 2, 64000 * 2, 5 * 64000)
    # embedding gather of 128 rows plus 768 learned-position columns
    e = embedding_op(128, 768, extra_width=768)
    assert (e.read_bytes, e.write_bytes) == (128 * 1536 * 2, 128 * 768 * 2)


def test_model_totals_follow_their_definitions():
    # llama3-8b prefill 2 x 512 on H100-SXM, --tp 2
    r = predict_model(load_model("llama3-8b"), H100, RooflineOptions(phase="prefill", batch=2, seq=512, tp=2))
    d = r.totals()
    assert d["ttft_s"] == d["predicted_s"] == pytest.approx(d["ops_s"] + d["comm_s"], rel=1e-12)
    assert d["tokens"] == 1024
    assert d["tokens_per_s"] == pytest.approx(1024 / d["predicted_s"], rel=1e-12)
    # MFU against the datasheet peak of both GPUs (PaLM appendix B); MBU against one GPU's bandwidth
    assert d["mfu"] == pytest.approx(d["model_flops"] / (d["predicted_s"] * 2 * PEAK_BF16), rel=1e-12)
    assert d["mbu"] == pytest.approx(d["bytes"] / (d["predicted_s"] * HBM_BPS), rel=1e-12)
    assert d["kernels"] == sum(row.count for row in r.rows)
    assert d["tp_comm_s"] > 0 and d["dp_comm_s"] == 0
    assert d["compute_s"] == pytest.approx(sum(row.count * row.pred.compute_s for row in r.rows), rel=1e-12)
    # weights split over tp: 8,030,261,248 params x 2 B / 2
    assert d["weight_bytes"] == 8_030_261_248 * 2 / 2
    # KV cache per GPU: 2 x 512 positions x 32 layers x (4 KV heads x 256) x 2 B
    assert d["kv_cache_bytes"] == 2 * 512 * 32 * 4 * 256 * 2
    dec = predict_model(load_model("llama3-8b"), H100, RooflineOptions(phase="decode", batch=4, context=100)).totals()
    assert dec["tpot_s"] == dec["predicted_s"] and dec["tokens"] == 4
    assert dec["tokens_per_s"] == pytest.approx(4 / dec["predicted_s"], rel=1e-12)
    train = predict_model(load_model("llama3-8b"), H100, RooflineOptions(phase="train", seq=256)).totals()
    assert train["fits"] is None and train["kv_cache_bytes"] == 0
    # data parallel x4: tokens/s counts every replica's tokens; MFU is per replica (model FLOPs of
    # one replica's batch over its tp GPUs)
    dp = predict_model(load_model("llama3-8b"), H100, RooflineOptions(phase="train", seq=256, dp=4)).totals()
    assert dp["tokens_per_s"] == pytest.approx(4 * 256 / dp["step_s"], rel=1e-12)
    assert dp["mfu"] == pytest.approx(dp["model_flops"] / (dp["step_s"] * PEAK_BF16), rel=1e-12)
    assert dp["dp_comm_s"] > 0 and dp["step_s"] == pytest.approx(dp["ops_s"] + dp["comm_s"] - dp["comm_hidden_s"])


@pytest.mark.parametrize("model,phase,tp", [("gpt2", "prefill", 1), ("falcon-7b", "prefill", 1),
                                            ("gemma2-9b", "prefill", 1), ("phi-2", "decode", 1),
                                            ("mixtral-8x7b", "decode", 1), ("llama3-8b", "prefill", 2)])
def test_model_flops_match_the_kernels(model, phase, tp):
    # calc.counts.flops' forward (MFU's numerator) equals the FLOPs of the step's GEMM and attention
    # kernels, counted separately by calc.roofline.ops, for learned positions, parallel attention,
    # sliding windows, partial rotary, MoE (k of E experts a token) and tensor parallelism (FLOPs on
    # all GPUs = tp x one GPU's; a replicated router would count tp times, hence MoE at tp 1)
    kw = {"seq": 1024} if phase == "prefill" else {"context": 1024}
    r = predict_model(load_model(model), H100, RooflineOptions(phase=phase, batch=2, tp=tp, check_fit=False, **kw))
    kernels = sum(row.count * row.pred.flops for row in r.rows if row.pred.kind in ("matmul", "attention"))
    assert r.model_flops == pytest.approx(tp * kernels, rel=1e-9)


def test_logits_last_skips_the_other_positions():
    # prefill 2 x 512 with --logits last: the lm_head runs on 2 positions, MFU's FLOPs skip the rest
    spec = load_model("llama3-8b")
    r = predict_model(spec, H100, RooflineOptions(phase="prefill", batch=2, seq=512, logits="last"))
    (head,) = _rows(r, "lm_head")
    assert head.pred.dims == (2, 1, 128256, 4096)
    full = predict_model(spec, H100, RooflineOptions(phase="prefill", batch=2, seq=512))
    assert full.model_flops - r.model_flops == pytest.approx(2 * (1024 - 2) * 128256 * 4096, rel=1e-12)
    assert [n for n in r.notes if "--logits last" in n] and not [n for n in full.notes if "--logits last" in n]


def test_layer_structure_of_fused_rows():
    # gpt2: learned positions (the embedding reads 768 + 768 columns a token), a plain GELU MLP
    # (one input), no rotary; 2 LayerNorms and 2 residual adds a layer
    r = predict_model(load_model("gpt2"), H100, RooflineOptions(phase="prefill", seq=128))
    one = {row.pred.name: row for row in r.rows}
    assert (one["embedding"].pred.read_bytes, one["embedding"].pred.write_bytes) == (128 * 1536 * 2, 128 * 768 * 2)
    assert (one["mlp_act"].pred.read_bytes, one["mlp_act"].pred.write_bytes) == (128 * 3072 * 2,) * 2
    assert "rotary" not in one and (one["norm"].count, one["residual_add"].count) == (24, 24)
    # falcon-7b: parallel attention and MLP read one LayerNorm's output: 1 norm, 1 residual add a
    # layer; multi-query: the KV append writes 1 x (64 + 64) a token
    f = {row.pred.name: row for row in predict_model(load_model("falcon-7b"), H100,
                                                     RooflineOptions(phase="prefill", seq=128)).rows}
    assert (f["norm"].count, f["residual_add"].count) == (32, 32)
    assert f["kv_cache_write"].pred.write_bytes == 128 * 128 * 2
    # rotary on 71 query heads + 1 KV head of 64 dims, tables of 128 positions
    assert f["rotary"].pred.read_bytes == 128 * 72 * 64 * 2 + 2 * 128 * 64 * 2


def test_gemma2_decode_window_layers_read_at_most_the_window():
    # gemma2-9b: a 4096-token window on 21 of 42 layers; 16 query heads on 8 KV heads of 256.
    # decode after 8192 cached tokens: full layers read 8193 keys, windowed ones 4096
    r = predict_model(load_model("gemma2-9b"), H100, RooflineOptions(phase="decode", context=8192))
    (full,) = _rows(r, "attention")
    (win,) = _rows(r, "attention (window)")
    q = 16 * 256 * 2
    assert (full.count, win.count) == (21, 21)
    assert full.pred.read_bytes == q + 8193 * 8 * 512 * 2
    assert win.pred.read_bytes == q + 4096 * 8 * 512 * 2


def test_mla_decode_attends_over_the_latent():
    # deepseek-v3 (4 layers) decode, batch 2 after 1000 tokens, --tp 8: 16 heads a GPU attend as MQA
    # over the cached latent (kv_lora_rank 512 + rope 64), V = the first 512 of it (read once)
    spec = replace(load_model("deepseek-v3"), num_layers=4)
    r = predict_model(spec, H100, RooflineOptions(phase="decode", batch=2, context=1000, tp=8, check_fit=False))
    for row in _rows(r, "attention"):
        assert row.pred.read_bytes == 2 * 16 * 576 * 2 + 2 * 1001 * 576 * 2
        assert row.pred.write_bytes == 2 * 16 * 512 * 2
        assert row.pred.flops == pytest.approx(2 * 2 * 16 * 1001 * (576 + 512), rel=1e-12)
    for row in _rows(r, "rotary"):  # 16 query heads + the one shared rope key, 64 dims
        assert row.pred.read_bytes == 2 * 17 * 64 * 2 + 2 * 1 * 64 * 2
    for row in _rows(r, "kv_cache_write"):
        assert row.pred.write_bytes == 2 * 576 * 2
    assert r.kv_cache_bytes == 2 * 1001 * 4 * 576 * 2  # the latent is not split over tp
    assert [n for n in r.notes if n.startswith("MLA:")] and [n for n in r.notes if n.startswith("MoE:")]


def test_compute_bound_batch_is_the_first_compute_bound_batch():
    # the search's answer b: the step is compute-bound at b and memory-bound at b - 1 (the
    # definition; checked with two direct predictions); the sweep's first compute-bound point agrees
    from mlsyscalc.calc.roofline.sweep import compute_bound_batch, sweep_batch

    spec, opts = load_model("llama3-8b"), RooflineOptions(phase="decode", context=128)
    b = compute_bound_batch(spec, H100, opts)
    assert b is not None and b > 1

    def bound(batch):
        return predict_model(spec, H100, replace(opts, batch=batch, check_fit=False)).bound

    assert (bound(b), bound(b - 1)) == ("compute", "memory")
    sweep = sweep_batch(spec, H100, opts, [b + 1, 1, b - 1, b, b])
    assert [p.options.batch for p in sweep.points] == [1, b - 1, b, b + 1]
    assert (sweep.compute_bound_batch, sweep.first_compute_bound_point) == (b, 2)
    # a prefill of 4096 tokens is compute-bound from batch 1
    assert compute_bound_batch(spec, H100, RooflineOptions(phase="prefill", seq=4096)) == 1


def test_sweep_refuses_bad_batch_lists_by_name():
    from mlsyscalc.calc.roofline.sweep import MAX_SWEEP_POINTS, sweep_batch

    spec, opts = load_model("llama3-8b"), RooflineOptions(phase="decode")
    with pytest.raises(MlsysError, match="must be positive"):
        sweep_batch(spec, H100, opts, [4, 0])
    with pytest.raises(MlsysError, match=f"513 values; at most {MAX_SWEEP_POINTS}"):
        sweep_batch(spec, H100, opts, list(range(1, 514)))


def test_training_notes_name_the_options():
    from mlsyscalc.calc.roofline.notes import model_notes

    spec = load_model("llama3-8b")
    base = RooflineOptions(phase="train", seq=256)
    assert model_notes(spec, base) == ("no activation recomputation",)
    assert model_notes(spec, replace(base, recompute="selective"))[0].startswith("selective recomputation")
    assert model_notes(spec, replace(base, recompute="full"))[0].startswith("full recomputation")
    assert any("--no-master-weights" in n for n in model_notes(spec, replace(base, master_weights=False)))
    (dp,) = [n for n in model_notes(spec, replace(base, dp=4, zero=1)) if n.startswith("data parallel")]
    assert dp.startswith("data parallel x4, ZeRO-1") and dp.endswith("AdamW over 1/dp of the parameters")
    assert "not overlapped" in dp
    (dp0,) = [n for n in model_notes(spec, replace(base, dp=2, zero=0, dp_overlap=True)) if "data parallel" in n]
    assert "overlapped (" in dp0 and "1/dp" not in dp0
    assert not [n for n in model_notes(spec, base) if "data parallel" in n]  # dp 1
    # inference: no training notes; --impl torch and --logits last (prefill only) are noted
    assert model_notes(spec, RooflineOptions(phase="decode")) == ()
    assert model_notes(spec, RooflineOptions(phase="decode", logits="last")) == ()
    assert [n for n in model_notes(spec, RooflineOptions(impl="torch")) if n.startswith("kernels as plain PyTorch")]


def test_torch_head_of_learned_positions():
    # gpt2 --impl torch: the token gather, then the position index (int64, 8 B a token), the position
    # gather and their add (two inputs, one output); a plain GELU MLP is one kernel
    r = _torch_rows("gpt2", phase="prefill", seq=128)
    one = {row.pred.name: row.pred for row in r.rows}
    t, h = 128, 768
    assert (one["embedding"].read_bytes, one["embedding"].write_bytes) == (t * h * 2, t * h * 2)
    assert (one["positions.index"].read_bytes, one["positions.index"].write_bytes) == (0, t * 8)
    assert (one["positions.gather"].read_bytes, one["positions.gather"].write_bytes) == (t * h * 2, t * h * 2)
    assert (one["positions.add"].read_bytes, one["positions.add"].write_bytes) == (2 * t * h * 2, t * h * 2)
    assert "mlp_mul" not in one and (one["mlp_act"].read_bytes, one["mlp_act"].write_bytes) == (t * 3072 * 2,) * 2


def test_torch_residual_adds_and_vocab_split():
    # plain PyTorch adds x + attn + mlp as two kernels even with a parallel residual (falcon-7b);
    # the fp32 logits cast of one rank covers ceil(V / tp) columns (llama2-7b --tp 2: 16,000)
    f = _torch_rows("falcon-7b", phase="prefill", seq=128)
    assert sum(row.count for row in _rows(f, "residual_add")) == 2 * 32
    r = _torch_rows("llama2-7b", phase="decode", batch=3, context=64, tp=2)
    (cast,) = _rows(r, "logits.float")
    assert (cast.pred.read_bytes, cast.pred.write_bytes) == (3 * 16000 * 2, 3 * 16000 * 4)
    # the rest of the layer: q (16 heads a rank) and k (16 KV heads) rotated, 3 kernels each
    rot = _rows(r, "rotary.roll")
    assert [(row.pred.read_bytes, row.count) for row in rot] == [(3 * 16 * 128 * 2, 64)]


def test_torch_forward_layer_of_llama3_8b_gqa():
    # llama3-8b --impl torch, prefill 2 x 64: q (32 heads) and k (8 KV heads) rotated separately;
    # 2 RMSNorms a layer; SiLU (4 FLOPs) then gate * up (1): the fused mlp_act*up's 5 in two kernels;
    # the data-movement kernels count no FLOPs
    r = _torch_rows("llama3-8b", phase="prefill", batch=2, seq=64)
    t, a = 128, 2
    rolls = sorted((row.pred.read_bytes, row.count) for row in _rows(r, "rotary.roll"))
    assert rolls == [(t * 8 * 128 * a, 32), (t * 32 * 128 * a, 32)]
    assert all(row.pred.flops == 0 for row in _rows(r, "rotary.roll"))
    assert sum(row.count for row in _rows(r, "norm")) == 2 * 32
    (act,), (mul,) = _rows(r, "mlp_act"), _rows(r, "mlp_mul")
    el = t * 14336
    assert (act.pred.flops, mul.pred.flops) == (4 * el, el)
    assert "rotary" not in {row.pred.name for row in _torch_rows("gpt2", phase="prefill", seq=16).rows}
    # full rotary (rot = head_dim): no slice copy and no cat
    assert not [row for row in r.rows if row.pred.name in ("rotary.slice_copy", "rotary.cat")]
    # the prefill attention runs FA2's grid without KV splits: no combine kernel follows it
    (att,) = _rows(r, "attention")
    assert att.pred.tiling.split == 1 and not [row for row in r.rows if row.pred.name.endswith(".combine")]


def test_torch_qk_norm_kernels():
    # a llama3-8b with per-head q/k RMSNorm (qwen3-style qk_norm): one norm kernel over the 32 query
    # heads' rows and one over the 8 KV heads', each of head_dim 128, weight read once
    spec = replace(load_model("llama3-8b"), qk_norm=True)
    r = _torch_rows(spec, phase="prefill", seq=64)
    norms = sorted((row.pred.read_bytes, row.pred.write_bytes) for row in _rows(r, "qk_norm"))
    assert norms == [((64 * 8 + 1) * 128 * 2, 64 * 8 * 128 * 2), ((64 * 32 + 1) * 128 * 2, 64 * 32 * 128 * 2)]
    # training: each has an input-gradient and a weight-gradient kernel, after the 2 layer norms
    tr = _torch_rows(replace(spec, num_layers=2), phase="train", seq=64)
    assert sum(row.count for row in _by_name(tr, "norm.bwd_weight")) == (2 + 2) * 2
    weights = sorted({row.pred.write_bytes for row in _by_name(tr, "norm.bwd_weight")})
    assert weights == [128 * 4, 4096 * 4]


def test_torch_mla_rotary_rows():
    # deepseek-v3 (4 layers) --tp 8 prefill of 32 tokens: the rope part (64 dims) of 16 query heads
    # a rank and of the one shared key
    spec = replace(load_model("deepseek-v3"), num_layers=4)
    r = _torch_rows(spec, phase="prefill", seq=32, tp=8, check_fit=False)
    rolls = sorted({row.pred.read_bytes for row in _rows(r, "rotary.roll")})
    assert rolls == [32 * 64 * 2, 32 * 16 * 64 * 2]


def test_torch_combine_scales_with_batch():
    # llama2-7b decode, batch 2 after 8,192 tokens: the combine reads split fp32 partials of
    # 2 x 32 heads x 128 (+ 2 / 128 for the max and sum), writes 2 x 4096 bf16
    r = _torch_rows("llama2-7b", phase="decode", batch=2, context=8192)
    (att,) = _rows(r, "attention")
    (comb,) = _rows(r, "attention.combine")
    split, out = att.pred.tiling.split, 2 * 32 * 128
    assert split > 1
    assert comb.pred.read_bytes == pytest.approx(split * out * 4 * (1 + 2 / 128), rel=1e-12)
    assert comb.pred.write_bytes == out * 2


def test_torch_prefill_logits_last_casts_one_row_a_sequence():
    r = _torch_rows("llama2-7b", phase="prefill", batch=3, seq=256, logits="last")
    (cast,) = _rows(r, "logits.float")
    assert (cast.pred.read_bytes, cast.pred.write_bytes) == (3 * 32000 * 2, 3 * 32000 * 4)


def test_torch_train_loss_mlp_and_grad_bytes():
    # llama2-7b cut to 2 layers, 256 tokens, --tp 2: a rank holds 16,000 of the 32,000 logits
    spec = replace(load_model("llama2-7b"), num_layers=2)
    r = _torch_rows(spec, phase="train", seq=256, tp=2)
    t, v, a, el = 256, 16000, 2, 256 * 11008 // 2
    fwd = {row.pred.name: row.pred for row in r.rows if row.pass_name == "forward"}
    bwd = {row.pred.name: row.pred for row in r.rows if row.pass_name == "backward"}
    # forward loss: cast to fp32, log_softmax, nll (reads int64 targets and the fp32 picks, writes one)
    assert (fwd["loss.cast"].read_bytes, fwd["loss.cast"].write_bytes) == (t * v * a, t * v * 4)
    assert fwd["loss.log_softmax"].read_bytes >= t * v * 4 and fwd["loss.log_softmax"].write_bytes == t * v * 4
    assert (fwd["loss.nll"].read_bytes, fwd["loss.nll"].write_bytes) == (t * 12, 4)
    # MLP backward over a rank's I / 2 = 5504 columns: each kernel reads two, writes one
    for name in ("mlp_act.bwd", "mlp_mul.bwd_up", "mlp_mul.bwd_act"):
        assert (bwd[name].read_bytes, bwd[name].write_bytes) == (2 * el * a, el * a)
    assert (bwd["mlp_act.bwd"].flops, bwd["mlp_mul.bwd_up"].flops) == (5 * el, el)
    # FA2 backward's D = rowsum(dO * O): reads dO and O (16 heads a rank x 128), writes fp32 D
    assert (bwd["attention.bwd_dot_do_o"].read_bytes, bwd["attention.bwd_dot_do_o"].write_bytes) == \
        (2 * t * 16 * 128 * a, t * 16 * 4)
    # .grad accumulation of the head (embedding, final norm, lm_head: 2 x 32000 x 4096 + 4096
    # params, halved over tp) spread over its 3 tensors
    head = (2 * 32000 * 4096 + 4096) * a / 2 / 3
    (acc,) = [row for row in _by_name(r, "grad.accumulate") if row.layers == "head"]
    assert (acc.pred.read_bytes, acc.pred.write_bytes, acc.count) == (pytest.approx(2 * head), pytest.approx(head), 3)


@pytest.mark.parametrize("model,adds", [("llama2-7b", 2 + 2 + 1), ("mixtral-8x7b", 2 + 2), ("gpt2", 2 + 2),
                                        ("phi-2", 2 + 2)])
def test_torch_gradient_sums_where_a_tensor_fans_out(model, adds):
    # 2 residual branch points, then one add per extra linear reading the same normed input:
    # q/k/v (2 more); gate/up (1 more: llama); mixtral's experts and router each read it once;
    # gpt2's and phi-2's plain MLP reads it once
    spec = replace(load_model(model), num_layers=1)
    r = _torch_rows(spec, phase="train", seq=64)
    assert _sum_count(r, "grad_accumulate") == adds
    where = "moe layers" if spec.is_moe else "layers"
    assert {row.layers for row in _by_name(r, "grad.accumulate")} == {where, "head"}


@pytest.mark.parametrize("m,n,k,tile", [
    # N / 128 = 8 tiles x 16 splits of K 512 = 128 units, one wave (16x64 x 8 splits ties, later)
    (1, 1024, 8192, (16, 128, 16, 128, 1)),
    # 16 tiles x 8 splits of K 1024
    (16, 2048, 8192, (16, 128, 8, 128, 1)),
    # 64 rows: 16 tiles of 64x128 x 8 splits of 512
    (64, 2048, 4096, (64, 128, 8, 128, 1)),
    # 640 x 1024 fills only 20 of 132 SMs with 128x256 tiles: 10 x 16 tiles of 64x64 x 4 splits
    # of 256 = 640 units in 5 waves
    (640, 1024, 1024, (64, 64, 4, 640, 5)),
])
def test_matmul_tiles_of_skinny_and_small_shapes(m, n, k, tile):
    p = predict_matmul(m, n, k)
    assert _tile(p) == tile
    # every split's K is whole BLOCK_K (64 bf16) rows here: compute = waves x tile FLOPs
    bm, bn, split, _, waves = tile
    per_sm = H100.flops_per_s("bf16", "matmul") / SMS
    assert p.compute_s == pytest.approx(waves * 2.0 * bm * bn * (k // split) / per_sm, rel=1e-12, abs=0)


@pytest.mark.parametrize("kv_heads,split", [(2, 64), (4, 32), (16, 8)])
def test_flash_decoding_splits_fill_one_wave(kv_heads, split):
    # batch 1 decode over 8192 keys: kv_heads units need 128 / kv_heads splits for one full wave
    # of 132 SMs; the 16-row block computes 16 x (8192 / split) keys x 2 (128 + 128) FLOPs each
    p = predict_attention(1, 32, kv_heads, 1, 8192, 128)
    assert _tile(p) == (16, 128, split, kv_heads * split, 1)
    per_sm = H100.flops_per_s("bf16", "attention") / SMS
    assert p.compute_s == pytest.approx(16 * (8192 // split) * 2 * 256 / per_sm, rel=1e-12, abs=0)


def test_small_prefill_attention_takes_64_row_blocks():
    # 4 heads (no GQA) x 512 queries, batch 1: 16 FA2 blocks cannot fill 132 SMs; 64-row blocks
    # (8 x 4 = 32) x 4 KV splits of 128 keys = 128 units in one wave: 64 x 128 per block, as fast
    # as 16-row blocks without splits (a tie: the larger block is kept) and twice 128 x 128
    p = predict_attention(1, 4, 4, 512, 512, 128)
    assert _tile(p) == (64, 128, 4, 128, 1)
    assert p.shape == "B1 H4/4 512x512 d128"
    w = predict_attention(2, 32, 8, 1024, 1024, 128, True, window=256)
    assert w.shape == "B2 H32/8 1024x1024 d128 causal window 256"
    with pytest.raises(MlsysError, match="heads 32 not divisible by kv_heads 6"):
        predict_attention(1, 32, 6, 16, 16, 128)


def test_ridge_and_dict_fields_per_kind():
    # the ridge point of each kind: its achievable compute roof / the achievable copy bandwidth
    # (harmonic mean of read and write ceilings, equal here: their common value)
    bw = 3.35e12 * H100.efficiency.memory
    assert predict_matmul(4096, 4096, 4096).ridge_flops_per_byte == pytest.approx(
        H100.flops_per_s("bf16", "matmul") / bw, rel=1e-12)
    assert predict_attention(1, 8, 8, 1024, 1024, 128).ridge_flops_per_byte == pytest.approx(
        H100.flops_per_s("bf16", "attention") / bw, rel=1e-12)
    assert elementwise_op(1000).ridge_flops_per_byte == pytest.approx(H100.flops_per_s("fp32", "matmul") / bw, rel=1e-12)
    # memory kernels report no tiling and no shape class; a GEMM both
    mem, mm = elementwise_op(1000).as_dict(), predict_matmul(64, 64, 64).as_dict()
    assert "tiling" not in mem and "shape_class" not in mem and mm["shape_class"] in ("skinny", "square")
    assert set(mm["tiling"]) == {"block_m", "block_n", "split", "units", "waves", "wave_fill"}


def test_model_rows_sum_to_the_totals():
    r = predict_model(load_model("mixtral-8x7b"), H100, RooflineOptions(phase="decode", batch=8, context=512, tp=2))
    d = r.totals()
    # each kernel's time plus the stream's idle gap before it
    assert d["ops_s"] == pytest.approx(sum(row.count * row.pred.predicted_s for row in r.rows) + d["gap_s"], rel=1e-12)
    assert d["gap_s"] == pytest.approx(KERNEL_GAP_S * d["kernels"], rel=1e-12) and d["gap_s"] > 0
    assert d["memory_s"] == pytest.approx(sum(row.count * row.pred.memory_s for row in r.rows), rel=1e-12)
    assert d["overhead_s"] == pytest.approx(2e-6 * d["kernels"], rel=1e-12)
    assert d["bytes"] == pytest.approx(sum(row.count * (row.pred.read_bytes + row.pred.write_bytes) for row in r.rows),
                                       rel=1e-12)
    assert d["forward_s"] == pytest.approx(d["ops_s"], rel=1e-12) and d["backward_s"] == 0
    assert d["bound"] == ("compute" if d["compute_s"] >= d["memory_s"] else "memory") == "memory"
    assert d["tp_comm_s"] == pytest.approx(d["comm_s"], rel=1e-12) and d["comm_s"] > 0
    assert d["predicted_s"] == pytest.approx(d["ops_s"] + d["comm_s"], rel=1e-12)


def test_tensor_parallel_shards_of_llama3_8b():
    # Megatron: q/k/v and gate/up column-parallel, o/down row-parallel; 8 KV heads over tp 2 = 4
    r = predict_model(load_model("llama3-8b"), H100, RooflineOptions(phase="prefill", seq=256, tp=2))
    dims = {row.pred.name: row.pred.dims for row in r.rows if row.pred.kind == "matmul"}
    assert dims["q_proj"] == (256, 1, 2048, 4096)
    assert dims["k_proj"] == dims["v_proj"] == (256, 1, 4 * 128, 4096)
    assert dims["o_proj"] == (256, 1, 4096, 2048)
    assert dims["gate_proj"] == (256, 1, 7168, 4096) and dims["down_proj"] == (256, 1, 4096, 7168)
    # a 2-KV-head llama3-8b under tp 4: each rank keeps one KV head (each replicated on 2 ranks)
    spec = replace(load_model("llama3-8b"), num_kv_heads=2)
    f = predict_model(spec, H100, RooflineOptions(phase="decode", batch=2, context=100, tp=4))
    (kv,) = _rows(f, "kv_cache_write")
    assert kv.pred.write_bytes == 2 * 1 * 256 * 2
    assert f.kv_cache_bytes == 2 * 101 * 32 * 256 * 2


def test_quantized_weights_and_fp8_cache_in_the_model():
    # llama3-8b decode with int4 weights: q_proj reads 4096 x 4096 / 2 bytes + a bf16 scale per 128
    # weights; --kv-dtype fp8 halves the KV cache (1 byte an element)
    spec = load_model("llama3-8b")
    r = predict_model(spec, H100, RooflineOptions(phase="decode", batch=2, context=1000, dtype="int4", kv_dtype="fp8"))
    (q,) = _rows(r, "q_proj")
    assert q.pred.read_bytes == 2 * 4096 * 2 + 4096 * 4096 // 2 + 4096 * 32 * 2
    assert r.kv_cache_bytes == 2 * 1001 * 32 * 8 * 256 * 1
    assert r.weight_bytes == 8_030_261_248 * 0.5


def test_window_full_counts_the_whole_causal_sequence():
    # --sliding-window full: gemma2-9b's windowed layers run the full causal kernel (prefill 8192)
    # and decode reads the whole context; the window's note says so
    spec = load_model("gemma2-9b")
    pre = predict_model(spec, H100, RooflineOptions(phase="prefill", seq=8192, window="full"))
    full, win = (_rows(pre, n)[0].pred for n in ("attention", "attention (window)"))
    assert win.flops == full.flops == pytest.approx(2 * 16 * (8192**2 / 2) * 512, rel=1e-12)
    dec = predict_model(spec, H100, RooflineOptions(phase="decode", context=8192, window="full"))
    full, win = (_rows(dec, n)[0].pred for n in ("attention", "attention (window)"))
    assert win.read_bytes == full.read_bytes == 16 * 256 * 2 + 8193 * 8 * 512 * 2
    assert [n for n in dec.notes if "decode reads the whole context" in n]
    # skip (default): the window layers' prefill FLOPs are S W - W^2 / 2 pairs
    skip = predict_model(spec, H100, RooflineOptions(phase="prefill", seq=8192))
    (w,) = _rows(skip, "attention (window)")
    assert w.pred.flops == pytest.approx(2 * 16 * (8192 * 4096 - 4096**2 / 2) * 512, rel=1e-12)
    assert _rows(skip, "norm")[0].count == 4 * 42  # gemma2: 4 RMSNorms a layer


def test_training_model_flops_are_three_forwards():
    # Kaplan et al. 2020: backward = 2 x forward, so a training step's model FLOPs = 3 x forward
    spec = load_model("llama3-8b")
    train = predict_model(spec, H100, RooflineOptions(phase="train", batch=2, seq=512))
    pre = predict_model(spec, H100, RooflineOptions(phase="prefill", batch=2, seq=512))
    assert train.model_flops == pytest.approx(3 * pre.model_flops, rel=1e-12)
    assert train.weight_bytes == 8_030_261_248 * 2


def test_memory_kernel_flops_as_documented():
    # calc.roofline.memory_bound's counts: 1 FLOP an add, 4 a normalised element, 3 a rotated element,
    # none for a copy; --impl torch splits SiLU-gate's 5 into 4 + 1 and adds x + y with 1
    t, h = 128, 4096
    fused = {row.pred.name: row.pred for row in predict_model(
        load_model("llama3-8b"), H100, RooflineOptions(phase="prefill", seq=t)).rows}
    assert fused["residual_add"].flops == t * h
    assert fused["norm"].flops == fused["final_norm"].flops == 4 * t * h
    assert fused["rotary"].flops == 3 * t * (32 + 8) * 128
    assert fused["kv_cache_write"].flops == fused["embedding"].flops == 0
    assert fused["mlp_act*up"].flops == 5 * t * 14336
    torch_rows = {row.pred.name: row.pred for row in _torch_rows("gpt2", phase="prefill", seq=t).rows}
    assert torch_rows["residual_add"].flops == torch_rows["positions.add"].flops == t * 768
    assert torch_rows["kv_cache_write.k"].flops == torch_rows["positions.index"].flops == 0
    assert torch_rows["norm"].flops == 4 * t * 768
    # x + y reads two tensors, writes one (bf16)
    assert (torch_rows["residual_add"].read_bytes, torch_rows["residual_add"].write_bytes) == (2 * t * 768 * 2, t * 768 * 2)
    assert (fused["residual_add"].read_bytes, fused["residual_add"].write_bytes) == (2 * t * h * 2, t * h * 2)


def test_fa2_grid_of_exactly_one_wave_is_kept():
    # batch 66 x 1 head, 200 queries: 66 x 2 = 132 blocks of 128 rows = one full wave of 132 SMs,
    # which FA2 runs as is (the smaller-block search only starts below one wave; 16-row blocks would
    # take 66 x 13 = 858 blocks in 7 waves of 16/128 the work, 7/8 of a wave's time)
    assert _tile(predict_attention(66, 1, 1, 200, 200, 128)) == (128, 128, 1, 132, 1)
    # batch 65: 130 blocks leave SMs idle, so the search runs and finds those 16-row blocks
    assert _tile(predict_attention(65, 1, 1, 200, 200, 128)) == (16, 128, 1, 65 * 13, 7)


def test_sweep_takes_up_to_512_batch_values():
    # MAX_SWEEP_POINTS = 512 values are accepted (513 are refused, above); gpt2 cut to 1 layer
    from mlsyscalc.calc.roofline.sweep import sweep_batch

    spec = replace(load_model("gpt2"), num_layers=1)
    sweep = sweep_batch(spec, H100, RooflineOptions(phase="decode", context=16), list(range(1, 513)))
    assert len(sweep.points) == 512
