"""Value tests of the roofline model and its calibration: single-kernel predictions (GEMM floor and
block-K padding, cuBLAS's unaligned kernels by row count, cuDNN head-dim tiles), model rows (which
kernels a step runs, the host path, the fit check at the byte boundary), the calibrated efficiency
ratios and the fit's bounds and precision. Oracles: hand arithmetic from the H100-SXM datasheet
(989.5 TFLOP/s bf16 dense, 3.35 TB/s, 132 SMs, 80 GiB HBM3) and config.json, the measurements
calc/roofline/calibration.py cites, and properties the docs state (docs/roofline.md, docs/calibrate.md)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from mlsyscalc import MlsysError, count_params, load_model
from mlsyscalc.calc.roofline.calibration import CALIBRATED_EFFICIENCY, Efficiency, datasheet_ceilings, load_ceilings
from mlsyscalc.calc.roofline.calibration_fit import EFFICIENCIES, Observation, Term, fit, predict
from mlsyscalc.calc.roofline.model import ModelRoofline, RooflineOptions, predict_model
from mlsyscalc.calc.roofline.ops import predict_attention, predict_matmul

H100 = load_ceilings("H100-SXM")
BF16_PEAK = 989.5e12  # H100-SXM datasheet, dense bf16
HBM_BPS = 3.35e12  # H100-SXM datasheet bandwidth
SMS = 132


# ----- single kernels -----------------------------------------------------------------------------

def test_tiny_plain_gemm_runs_at_the_measured_floor():
    """gpt2 decode B1's 768x768 projection: 1,182,720 bytes (768x2 in, 768x768x2 weight, 768x2 out) at
    0.78 x 3.35 TB/s is 0.45 us, and 1.67 us by its 768 / 64 = 12 CTAs at 59 GB/s each, both below the
    cuBLAS floor. calibration.py's measurement: 4.08-4.19 us per kernel on the H100, 2.15 us of floor
    + 2 us of fixed cost = 4.15 us."""
    p = predict_matmul(1, 768, 768, "bf16", H100)
    assert p.read_bytes + p.write_bytes == 768 * 2 + 768 * 768 * 2 + 768 * 2 == 1_182_720
    assert p.memory_s == pytest.approx(1_182_720 / (12 * 59e9), rel=1e-12)
    assert p.floor_s == 2.15e-6
    assert p.predicted_s == pytest.approx(4.15e-6, rel=1e-12, abs=0)
    assert p.bound == "overhead"


def test_weight_only_gemm_has_no_cublas_floor():
    """A 4-bit weight-only GEMM is the project's own kernel, not cuBLAS: no floor, so its time is the
    larger of compute and memory plus the 2 us fixed cost (int4: 768x768/2 weight bytes + one bf16
    scale per 128 weights)."""
    p = predict_matmul(1, 768, 768, "bf16", H100, weight_dtype="int4")
    assert p.floor_s == 0.0
    weight = 768 * 768 // 2 + 768 * (768 // 128) * 2
    assert p.read_bytes == 768 * 2 + weight
    assert p.predicted_s == pytest.approx(max(p.compute_s, p.memory_s) + 2e-6, rel=1e-12, abs=0)
    assert p.predicted_s < 2.2e-6


def test_gemm_pads_k_to_a_64_wide_block_in_bf16():
    """BLOCK_K = 128 bytes / 2 B = 64 bf16 elements: K = 72 computes as 128. 4096 x 4096: 128x256
    tiles, 32 x 16 = 512 tiles over 132 SMs = 4 waves (fill 0.97, no split-K); per SM 989.5e12 x 0.74
    / 132 FLOP/s; compute = 4 x 2 x 128 x 256 x 128 / that."""
    p = predict_matmul(4096, 4096, 72, "bf16", H100)
    assert (p.tiling.block_m, p.tiling.block_n, p.tiling.split, p.tiling.waves) == (128, 256, 1, 4)
    per_sm = BF16_PEAK * 0.74 / SMS
    assert p.compute_s == pytest.approx(4 * 2 * 128 * 256 * 128 / per_sm, rel=1e-12, abs=0)
    # K = 64 is one whole block: no padding
    q = predict_matmul(4096, 4096, 64, "bf16", H100)
    assert q.compute_s == pytest.approx(4 * 2 * 128 * 256 * 64 / per_sm, rel=1e-12, abs=0)


@pytest.mark.parametrize("rows, memory_class, eff", [(1, "matmul_skinny", 0.78), (7, "matmul_skinny", 0.78),
                                                    (8, "matmul_unaligned_stream", 0.22),
                                                    (9, "matmul_unaligned_stream", 0.22)])
def test_unaligned_lm_head_streams_slowly_from_eight_rows(rows, memory_class, eff):
    """gpt2's 50257-wide lm_head (50257 is not a multiple of 8 bf16 elements): cuBLAS runs one row on
    its GEMV, 2-7 rows on gemmSN, and from 8 rows its align1 CUTLASS kernels, which stream at 0.22 of
    3.35 TB/s (calibration.py: B8-B64 lm_head 0.218 / 0.241 / 0.221 / 0.152, the median). Bytes: rows
    x 768 x 2 in, 50257 x 768 x 2 weight, rows x 50257 x 2 out."""
    p = predict_matmul(rows, 50257, 768, "bf16", H100)
    assert p.compute_class == "matmul_unaligned"
    assert p.memory_class == memory_class
    moved = rows * 768 * 2 + 50257 * 768 * 2 + rows * 50257 * 2
    assert p.memory_s == pytest.approx(moved / (eff * HBM_BPS), rel=1e-12, abs=0)


def test_unaligned_stream_default_is_the_measured_median():
    """Efficiency.matmul_unaligned_stream: the median of gpt2 decode lm_head's 0.218, 0.241, 0.221 and
    0.152 of 3.35 TB/s (calibration.py), 0.22 to two digits."""
    measured = sorted([0.218, 0.241, 0.221, 0.152])
    median = (measured[1] + measured[2]) / 2
    assert Efficiency().matmul_unaligned_stream == round(median, 2) == 0.22


def test_calibrated_classes_keep_their_ratio_to_their_kind():
    """calibration.py: with measured ceilings each class keeps its ratio to its kind's default:
    matmul_skinny and memory_broadcast to memory (0.89 -> 1.0), matmul_unaligned to matmul
    (0.74 -> 1.0), the unaligned GEMMs' stream rate to the copy rate (0.22 / 0.89), small-head
    attention 0.8 x the calibrated attention 0.82; each rounded to two digits."""
    d, c = Efficiency(), CALIBRATED_EFFICIENCY
    expected = {"matmul_skinny": d.matmul_skinny / d.memory, "memory_broadcast": d.memory_broadcast / d.memory,
                "matmul_unaligned": d.matmul_unaligned / d.matmul,
                "matmul_unaligned_stream": d.matmul_unaligned_stream / d.memory,
                "attention_small_head": 0.8 * c.attention}
    for name, value in expected.items():
        assert getattr(c, name) == pytest.approx(value, abs=0.005), name
    assert (c.matmul, c.memory, c.attention) == (1.0, 1.0, 0.82)


def test_attention_does_not_pad_head_dims_by_default():
    """The fused (FlashAttention-style) default computes on the model's head dim: FLOPs per row are 2 x
    (d_qk + d_v), so phi-2's d80 costs 160 / 256 of d128 on the same grid, and d64 is priced at the
    attention efficiency, not the small-head one."""
    d80 = predict_attention(4, 32, 32, 2048, 2048, 80, True, "bf16", H100)
    d128 = predict_attention(4, 32, 32, 2048, 2048, 128, True, "bf16", H100)
    assert d80.compute_s == pytest.approx(d128.compute_s * 160 / 256, rel=1e-12, abs=0)
    assert predict_attention(4, 32, 32, 2048, 2048, 64, True, "bf16", H100).compute_class == "attention"


def test_cudnn_pads_head_dims_to_64_128_256_tiles():
    """--impl torch (cuDNN SDPA): d80 computes on 128-wide tiles (same time as d128), d64 on 64-wide
    ones at attention_small_head 0.49 instead of attention 0.61, d128 stays at attention."""
    def att(d: int, pad: bool):
        return predict_attention(4, 32, 32, 2048, 2048, d, True, "bf16", H100, pad_head_dim=pad)

    assert att(80, True).compute_s == pytest.approx(att(128, False).compute_s, rel=1e-12, abs=0)
    assert att(128, True).compute_class == "attention"
    assert att(128, True).compute_s == att(128, False).compute_s
    small = att(64, True)
    assert small.compute_class == "attention_small_head"
    assert small.compute_s == pytest.approx(att(64, False).compute_s * 0.61 / 0.49, rel=1e-12, abs=0)
    assert att(256, True).compute_class == "attention"


# ----- model rows ---------------------------------------------------------------------------------

def _attention_classes(spec, impl: str) -> set[str]:
    r = predict_model(spec, H100, RooflineOptions(phase="prefill", batch=1, seq=128, impl=impl))
    return {row.pred.compute_class for row in r.rows if row.pred.kind == "attention"}


def test_gpt2_attention_class_by_impl():
    """gpt2 (config.json: 12 heads of 64): the fused default runs d64 attention at the attention
    efficiency; --impl torch's cuDNN kernels run it on 64-wide tiles (attention_small_head)."""
    gpt2 = load_model("gpt2")
    assert _attention_classes(gpt2, "fused") == {"attention"}
    assert _attention_classes(gpt2, "torch") == {"attention_small_head"}


def test_mla_attention_is_not_padded_under_torch():
    """DeepSeek-V3's MLA prefill (q/k head 192, v 128) runs in the model's own attention code, not
    cuDNN's padded tiles: the fused and torch attention rows are priced at the same class."""
    ds = load_model("deepseek-v3")
    opts = dict(phase="prefill", batch=1, seq=128, check_fit=False)
    for impl in ("fused", "torch"):
        r = predict_model(ds, H100, RooflineOptions(impl=impl, **opts))
        assert {row.pred.compute_class for row in r.rows if row.pred.kind == "attention"} == {"attention"}


def test_step_time_is_the_longer_of_gpu_and_host_paths():
    """An eager one-GPU torch training step of gpt2 at 64 tokens: the host issues every kernel at 29 us
    (roofline_host), far more than the GPU's kernels take, so the step is the host path and host_s is
    its excess over the GPU path."""
    r = predict_model(load_model("gpt2"), H100, RooflineOptions(phase="train", batch=1, seq=64, impl="torch"))
    assert r.host_path_s == pytest.approx(r.kernels * 29e-6, rel=1e-12, abs=0)
    assert r.host_path_s > r.gpu_s > 0
    assert r.host_s == pytest.approx(r.host_path_s - r.gpu_s, rel=1e-12)
    assert r.time_s == pytest.approx(r.host_path_s, rel=1e-12, abs=0)
    assert r.totals()["step_s"] == r.time_s


def test_model_roofline_without_host_path_is_the_gpu_path():
    """A ModelRoofline built without a host path (0: none) takes the GPU's path; fits compares weights
    + KV with the card's memory inclusively (a step exactly filling it fits)."""
    r = predict_model(load_model("gpt2"), H100, RooflineOptions(phase="decode", batch=1, context=10))
    bare = ModelRoofline(r.model, r.gpu, r.options, r.ceilings, r.rows, r.comm, r.model_flops,
                         r.weight_bytes, r.kv_cache_bytes)
    assert bare.host_path_s == 0.0 and bare.host_s == 0.0
    assert bare.time_s == bare.gpu_s == r.ops_s
    full = replace(bare, kv_cache_bytes=H100.gpu.memory_bytes - r.weight_bytes)
    assert full.fits is True
    assert replace(full, kv_cache_bytes=full.kv_cache_bytes + 1).fits is False


def _gpt2_bytes(context: int) -> int:
    """gpt2 in bf16: 124,439,808 parameters (transformers' GPT2LMHeadModel, tied head) x 2 B, plus the
    KV cache: 12 layers x (768 K + 768 V) x 2 B per token at batch 1."""
    return 124_439_808 * 2 + context * 12 * 2 * 768 * 2


def test_fit_check_accepts_a_step_that_exactly_fills_the_card():
    """--fit-check: weights + KV cache up to the card's memory fit (the same inclusive rule as `fits`);
    one byte less of memory is an error naming the model and the remedy."""
    context = 1000
    need = _gpt2_bytes(context)
    assert count_params(load_model("gpt2")).total == 124_439_808
    gpt2 = load_model("gpt2")
    exact = datasheet_ceilings(replace(H100.gpu, memory_bytes=need))
    opts = RooflineOptions(phase="decode", batch=1, context=context - 1)
    r = predict_model(gpt2, exact, opts)
    assert r.weight_bytes + r.kv_cache_bytes == need
    assert r.fits is True
    short = datasheet_ceilings(replace(H100.gpu, memory_bytes=need - 1))
    with pytest.raises(MlsysError, match="gpt2 does not fit.*--tp"):
        predict_model(gpt2, short, opts)


def test_router_kernels_run_only_on_moe_layers():
    """DeepSeek-V3 (config.json: 61 layers, first_k_dense_replace 3): the router top-k and the token
    permute run on the 58 MoE layers only, none on the 3 dense ones."""
    r = predict_model(load_model("deepseek-v3"), H100,
                      RooflineOptions(phase="decode", batch=1, context=10, check_fit=False))
    moe_rows = [(row.pred.name, row.layers, row.count) for row in r.rows
                if row.pred.name in ("router_topk", "moe_permute")]
    assert sorted(moe_rows) == [("moe_permute", "moe layers", 58), ("router_topk", "moe layers", 58)]


def test_all_windowed_layers_list_only_the_window_kernel():
    """Mistral-7B (config.json: sliding_window 4096 on all 32 layers) at 8192 tokens: every layer runs
    the windowed attention kernel; no full-attention row, and no row a step runs zero times."""
    r = predict_model(load_model("mistral-7b"), H100, RooflineOptions(phase="prefill", batch=1, seq=8192))
    att = [(row.pred.name, row.count) for row in r.rows if row.pred.kind == "attention"]
    assert att == [("attention (window)", 32)]
    assert all(row.count >= 1 for row in r.rows)
    assert all(n >= 1 for n in r.kernels_by_class.values())


def test_embedding_reads_positions_only_for_learned_positions():
    """Embedding gather: llama2-7b (rotary, hidden 4096) at 16 tokens reads and writes 16 x 4096 x 2 B;
    gpt2 (learned positions, hidden 768) reads the token and the position rows, 16 x 2 x 768 x 2 B."""
    def embedding(name: str):
        r = predict_model(load_model(name), H100, RooflineOptions(phase="prefill", batch=1, seq=16))
        (row,) = [row for row in r.rows if row.pred.name == "embedding"]
        return row.pred

    llama = embedding("llama2-7b")
    assert (llama.read_bytes, llama.write_bytes) == (16 * 4096 * 2, 16 * 4096 * 2)
    gpt2 = embedding("gpt2")
    assert (gpt2.read_bytes, gpt2.write_bytes) == (16 * 2 * 768 * 2, 16 * 768 * 2)


def test_norm_kernels_run_with_or_without_affine_weights():
    """llama2-7b's RMSNorm runs 2 per layer (64) plus the final one, each reading 16 x 4096 x 2 B + the
    4096 x 2 B weight. norm "none" is a LayerNorm without affine weights (OPT's
    layer_norm_elementwise_affine=False): it still normalises, so the same 64 + 1 kernels run."""
    llama = load_model("llama2-7b")
    opts = RooflineOptions(phase="prefill", batch=1, seq=16)
    norms = {row.pred.name: row for row in predict_model(llama, H100, opts).rows if "norm" in row.pred.name}
    assert norms["norm"].count == 64 and norms["final_norm"].count == 1
    assert norms["norm"].pred.read_bytes == 16 * 4096 * 2 + 4096 * 2
    bare = {row.pred.name: row for row in predict_model(replace(llama, norm="none"), H100, opts).rows
            if "norm" in row.pred.name}
    assert bare["norm"].count == 64 and bare["final_norm"].count == 1


# ----- calibration fit ----------------------------------------------------------------------------

BASE = tuple(getattr(Efficiency(), name) for name in EFFICIENCIES)


def _obs(label: str, terms: tuple[Term, ...], true: dict[str, float]) -> Observation:
    o = Observation(label, 1.0, terms, BASE)
    return replace(o, measured_s=predict(o, true))


def test_fit_recovers_exact_parameters_to_rounding():
    """Steps generated from known efficiencies (matmul 0.6, memory 0.8, 3 us fixed cost) with the
    model of calibration_fit's docstring: a compute-bound GEMM row and a memory row at 0.74 and 0.89,
    in three mixes. The loss is zero at the truth and the fit finds it to 1e-9."""
    true = {"matmul": 0.6, "memory": 0.8, "launch_s": 3e-6}
    gemm = Term(1, "matmul", 1e-3, 1e-5)
    copy = Term(1, "memory", 0.0, 2e-3)
    obs = [_obs("a", (replace(gemm, count=10), replace(copy, count=1)), true),
           _obs("b", (replace(gemm, count=1), replace(copy, count=10)), true),
           _obs("c", (replace(gemm, count=3), replace(copy, count=3), Term(400, "memory", 0.0, 1e-9)), true)]
    start = {name: getattr(Efficiency(), name) for name in EFFICIENCIES} | {"launch_s": 2e-6, "matmul_floor_s": 2e-6}
    got = fit(obs, start)
    for name, value in true.items():
        assert got[name] == pytest.approx(value, rel=1e-9, abs=0), name
    # measured time by hand for "a": 10 x (1e-3 x 0.74 / 0.6 + 3e-6) + (2e-3 x 0.89 / 0.8 + 3e-6)
    assert obs[0].measured_s == pytest.approx(10 * (1e-3 * 0.74 / 0.6 + 3e-6) + 2e-3 * 0.89 / 0.8 + 3e-6, rel=1e-12)


@pytest.mark.parametrize("floor_wanted, bound", [(5e-5, 2e-5), (5e-8, 1e-7)])
def test_fit_clamps_the_gemm_floor_to_its_bounds(floor_wanted, bound):
    """matmul_floor_s is searched within [0.1 us, 20 us] (docs/calibrate.md): tiny GEMMs measured at
    2 us fixed cost + 50 us (or + 0.05 us) come out at the bound, exactly."""
    term = Term(1, "matmul", 1e-9, 1e-9, floor_s=2e-6)
    obs = [Observation("tiny", 2e-6 + floor_wanted, (term,), BASE)]
    start = {name: getattr(Efficiency(), name) for name in EFFICIENCIES} | {"launch_s": 2e-6, "matmul_floor_s": 2e-6}
    got = fit(obs, start, fixed=("launch_s", "matmul"))
    assert got["matmul_floor_s"] == bound
    assert math.isclose(got["launch_s"], 2e-6)


def test_fit_and_predict_guard_their_inputs_and_add_comm_and_host():
    """calibration_fit.predict: the re-priced kernels plus the collectives, or the host path when that is
    longer; fit refuses an empty or non-positive measurement set with a message naming the problem."""
    copy = Term(2, "memory", 0.0, 1e-3)
    obs = Observation("x", 1.0, (copy,), BASE, comm_s=5e-4)
    params = {"memory": 0.445, "launch_s": 1e-6}
    # 2 x (1e-3 x 0.89 / 0.445 + 1 us) + 0.5 ms = 4.502 ms
    assert predict(obs, params) == pytest.approx(2 * (2e-3 + 1e-6) + 5e-4, rel=1e-12, abs=0)
    assert predict(replace(obs, host_path_s=1.0), params) == 1.0
    start = {name: getattr(Efficiency(), name) for name in EFFICIENCIES} | {"launch_s": 2e-6, "matmul_floor_s": 2e-6}
    with pytest.raises(MlsysError, match="no measured rows"):
        fit([], start)
    with pytest.raises(MlsysError, match="must be positive"):
        fit([replace(obs, measured_s=0.0)], start)


# ----- neighbouring quantities --------------------------------------------------------------------

@pytest.mark.parametrize("seq_q, seq_kv, window, area", [
    (8192, 8192, 4096, 8192 * 4096 - 4096**2 / 2),  # S x W - W^2 / 2
    (1, 8192, 4096, 4096),  # one query sees W keys
    (100, 100, 200, 100 * 100 / 2),  # W >= Skv: the causal triangle
    (4, 10, 8, (8**2 - 6**2) / 2 + 8 * (10 - 8)),  # queries at 6..10: integral of min(p, 8)
])
def test_window_fraction_is_the_integral_of_min_p_w(seq_q, seq_kv, window, area):
    """window_fraction = (integral of min(p, W) over p in [Skv - Sq, Skv]) / (Sq x Skv), worked by hand."""
    from mlsyscalc.calc.roofline.ops import window_fraction

    assert window_fraction(seq_q, seq_kv, window) == pytest.approx(area / (seq_q * seq_kv), rel=1e-12, abs=0)


def test_gemma2_full_and_window_attention_flops():
    """gemma2-9b (config.json: 42 layers alternating sliding 4096 / global, 16 heads of 256) at 8192
    tokens: 21 full layers at 2 x 8192^2 x 16 x 512 x 1/2 FLOPs, 21 windowed at x 0.375 / 0.5 (window
    fraction above)."""
    r = predict_model(load_model("gemma2-9b"), H100, RooflineOptions(phase="prefill", batch=1, seq=8192))
    att = {row.pred.name: (row.count, row.pred.flops) for row in r.rows if row.pred.kind == "attention"}
    full = 2 * 8192 * 8192 * 16 * (256 + 256) * 0.5
    assert att == {"attention": (21, full), "attention (window)": (21, full * 0.375 / 0.5)}


def test_llama3_8b_tp2_shards_and_kv_bytes():
    """llama3-8b (config.json: hidden 4096, 32 heads / 8 KV heads of 128, MLP 14336, vocab 128256, 32
    layers) at --tp 2: q 4096 -> 2048, k/v 4 KV heads x 128 = 512, o and down row-parallel (2048 and
    7168 in), lm_head 128256 / 2; KV cache after a decode step at context 1000: 1001 tokens x 32 layers
    x 4 heads x (128 + 128) x 2 B; weights 8,030,261,248 x 2 B / 2."""
    r = predict_model(load_model("llama3-8b"), H100, RooflineOptions(phase="decode", batch=1, context=1000, tp=2))
    nk = {row.pred.name: row.pred.dims[2:] for row in r.rows if row.pred.kind == "matmul"}
    assert nk == {"q_proj": (2048, 4096), "k_proj": (512, 4096), "v_proj": (512, 4096), "o_proj": (4096, 2048),
                  "gate_proj": (7168, 4096), "up_proj": (7168, 4096), "down_proj": (4096, 7168),
                  "lm_head": (64128, 4096)}
    assert r.kv_cache_bytes == 1001 * 32 * 4 * 256 * 2
    assert r.weight_bytes == 8_030_261_248 * 2 / 2


def test_gqa_decode_attention_reads_kv_heads_only():
    """Decode with 32 query heads over 8 KV heads of 128 at 4096 cached tokens: reads Q 32 x 128 x 2 B
    and K, V 2 x 8 x 4096 x 128 x 2 B, writes O 32 x 128 x 2 B; FLOPs 2 x 4096 x 32 x (128 + 128)."""
    a = predict_attention(1, 32, 8, 1, 4096, 128, False, "bf16", H100)
    assert a.read_bytes == 32 * 128 * 2 + 2 * 8 * 4096 * 128 * 2
    assert a.write_bytes == 32 * 128 * 2
    assert a.flops == 2 * 4096 * 32 * 256


def test_ceilings_price_reads_and_writes_on_one_bus():
    """H100-SXM datasheet ceilings: a copy's reads and writes add (3.35 TB/s x 0.89 each way), the
    bandwidth is their harmonic mean, the ridge is 989.5e12 x 0.74 / that; unknown efficiency names
    are refused by name."""
    assert H100.memory_s(1e9, 1e9) == pytest.approx(2e9 / (HBM_BPS * 0.89), rel=1e-12, abs=0)
    assert H100.memory_s(1e9, 0.0, cls="memory_broadcast") == pytest.approx(1e9 / (HBM_BPS * 0.32), rel=1e-12)
    assert H100.bandwidth_Bps == pytest.approx(HBM_BPS * 0.89, rel=1e-12)
    assert H100.ridge("bf16") == pytest.approx(BF16_PEAK * 0.74 / (HBM_BPS * 0.89), rel=1e-12)
    with pytest.raises(MlsysError, match="unknown efficiency bogus"):
        H100.with_efficiency(bogus=0.5)


def test_model_rates_follow_their_definitions():
    """tokens_per_s = tokens x dp / step; MFU = model FLOPs / (step x tp x 989.5e12) (PaLM app. B);
    MBU = bytes / (step x 3.35e12); llama2-7b prefill of 2048 tokens: model FLOPs are 2 x 6,607,077,376
    matmul weights (config.json; the embedding gather is no matmul) x 2048 plus 32 layers of causal
    attention, 2 x 2048^2 x 32 heads x (128 + 128) x 1/2."""
    r = predict_model(load_model("llama2-7b"), H100, RooflineOptions(phase="prefill", batch=1, seq=2048))
    assert r.tokens_per_s == pytest.approx(2048 / r.time_s, rel=1e-12)
    assert r.mfu == pytest.approx(r.model_flops / (r.time_s * BF16_PEAK), rel=1e-12)
    assert r.mbu == pytest.approx(r.bytes / (r.time_s * HBM_BPS), rel=1e-12)
    attention = 2 * 2048 * 2048 * 32 * 256 * (1 - 2048 / (2 * 2048))
    assert r.model_flops == 2 * 6_607_077_376 * 2048 + 32 * attention == 28_162_100_559_872


def test_mixtral_decode_moe_rows_by_hand():
    """Mixtral-8x7B (config.json: 8 experts, top-2, hidden 4096, expert MLP 14336, 8 KV heads of 128)
    decoding 4 sequences: 8 routed tokens over E(1 - (1 - k/E)^T) = 8 (1 - (3/4)^4) = 5.46875 distinct
    experts, each expert GEMM reading 8 x 4096 x 2 B of tokens and 5.46875 x 14336 x 4096 x 2 B of
    weights; the activation reads gate and up of 4 x 2 routed rows of 14336 (x 2 inputs x 2 B) and
    writes them once; router top-k reads 4 x 8
    logits (2 B) and writes 4 x 2 (index, weight) of 8 B; dispatch + combine move 2 x 4 x 2 x 4096
    elements; the KV append writes 4 x 8 x 256 elements."""
    r = predict_model(load_model("mixtral-8x7b"), H100,
                      RooflineOptions(phase="decode", batch=4, context=100, check_fit=False))
    rows = {row.pred.name: row for row in r.rows}
    gate = rows["experts.gate_proj"].pred
    assert gate.dims == (8, 5.46875, 14336, 4096)
    assert gate.read_bytes == 8 * 4096 * 2 + 5.46875 * 14336 * 4096 * 2
    assert (rows["mlp_act*up"].pred.read_bytes, rows["mlp_act*up"].pred.write_bytes) == (4 * 2 * 14336 * 2 * 2,
                                                                                         4 * 2 * 14336 * 2)
    assert (rows["router_topk"].pred.read_bytes, rows["router_topk"].pred.write_bytes) == (4 * 8 * 2, 4 * 2 * 8)
    assert rows["moe_permute"].pred.read_bytes == 2 * 4 * 2 * 4096 * 2
    assert rows["kv_cache_write"].pred.write_bytes == 4 * 8 * 256 * 2
    assert all(rows[name].count == 32 for name in ("experts.down_proj", "router_topk", "moe_permute"))


def test_parallel_attention_has_one_residual_add_and_plain_mlp():
    """falcon-7b (config.json: parallel_attn, one LayerNorm per layer, hidden 4544, MLP 4 x 4544 = 18176
    with GELU, no gate) at 16 tokens: one residual add per layer, one norm per layer, and the
    activation reads 16 x 18176 x 2 B (one input)."""
    r = predict_model(load_model("falcon-7b"), H100, RooflineOptions(phase="prefill", batch=1, seq=16))
    rows = {row.pred.name: row for row in r.rows}
    assert rows["residual_add"].count == 32 and rows["norm"].count == 32
    assert rows["mlp_act"].pred.read_bytes == 16 * 18176 * 2


def test_logits_last_runs_lm_head_on_one_row_per_sequence():
    """--logits last: the lm_head computes one position per sequence (llama2-7b, vocab 32000): 1 x 32000
    x 2 B written, 2 x 4096 x 32000 FLOPs, however many prompt tokens."""
    r = predict_model(load_model("llama2-7b"), H100, RooflineOptions(phase="prefill", batch=1, seq=16, logits="last"))
    (head,) = [row.pred for row in r.rows if row.pred.name == "lm_head"]
    assert head.write_bytes == 32000 * 2 and head.flops == 2 * 4096 * 32000


@pytest.mark.parametrize("dtype, out_bytes", [("bf16", 2), ("fp8", 2), ("int8", 4)])
def test_gemm_output_dtype(dtype, out_bytes):
    """torch._scaled_mm (fp8) writes bf16 and torch._int_mm (int8) writes int32: 16 x 4096 outputs."""
    p = predict_matmul(16, 4096, 4096, dtype, H100)
    assert p.write_bytes == 16 * 4096 * out_bytes
