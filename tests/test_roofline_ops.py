"""Op-level roofline: exact FLOP/byte counts, wave quantisation arithmetic, measured anchors,
calibration files, and properties that hold for any shape."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsyscalc import MlsysError, load_gpu, load_model
from mlsyscalc.calc.roofline.calibration import Efficiency, load_ceilings, match_gpu
from mlsyscalc.calc.counts.flops import attention_core_flops
from mlsyscalc.calc.roofline.memory_bound import elementwise_op, embedding_op, norm_op
from mlsyscalc.calc.roofline.ops import predict_attention, predict_matmul


def test_matmul_counts_and_wave_quantisation_h200():
    p = predict_matmul(4096, 4096, 4096, "bf16", "H200")
    assert p.flops == 2 * 4096**3
    assert p.bytes == 3 * 4096 * 4096 * 2  # A, B read once, C written once, bf16
    assert p.intensity_flops_per_byte == pytest.approx(2 * 4096**3 / (3 * 4096 * 4096 * 2))
    # 128x256 tiles: 32 x 16 = 512 CTAs over 132 SMs -> ceil(3.88) = 4 waves
    t = p.tiling
    assert (t.block_m, t.block_n, t.split, t.units, t.waves) == (128, 256, 1, 512, 4)
    per_sm = 989.5e12 * 0.74 / 132  # H200 datasheet bf16 dense x default matmul efficiency / SMs
    assert p.compute_s == pytest.approx(4 * 2 * 128 * 256 * 4096 / per_sm)
    assert p.bound == "compute"
    assert p.predicted_s == pytest.approx(p.compute_s + 2e-6)


def test_matmul_anchor_h200_cublas_within_5_percent():
    # ARCHITECTURE.md, "Reference measurements": H200 cuBLAS bf16 4096^3 measured 732 TFLOP/s; 8192^3 693 TFLOP/s (do_bench median)
    for size, measured in ((4096, 732e12), (8192, 693e12)):
        p = predict_matmul(size, size, size, "bf16", "H200")
        assert p.attained_flops_per_s == pytest.approx(measured, rel=0.05)


def test_skinny_matmul_is_memory_bound_and_reads_weights_once():
    p = predict_matmul(1, 4096, 4096, "bf16", "H200")
    assert p.bound == "memory"
    assert p.read_bytes == (4096 + 4096 * 4096) * 2
    # H200 copy anchor 4.26 TB/s ~ 4.8 TB/s x 0.89, and a GEMM streams at 0.88 of the copy rate
    # (matmul_skinny 0.78 of the datasheet: the decode GEMM profile of reports/models): 33.6 MB / 3.74 TB/s
    assert p.shape_class == "skinny"
    assert p.memory_s == pytest.approx((p.read_bytes + p.write_bytes) / (4.8e12 * 0.78))


def test_low_precision_outputs_and_weight_only_bytes():
    fp8 = predict_matmul(256, 512, 1024, "fp8", "H100")
    assert fp8.write_bytes == 256 * 512 * 2  # torch._scaled_mm writes bf16
    int8 = predict_matmul(256, 512, 1024, "int8", "H100")
    assert int8.write_bytes == 256 * 512 * 4  # torch._int_mm writes int32
    w4 = predict_matmul(1, 4096, 4096, "bf16", "H100", weight_dtype="int4")
    assert w4.read_bytes == 4096 * 2 + 4096 * 4096 * 0.5 + 4096 * (4096 // 128) * 2  # packed int4 + bf16 scales


def test_fp8_gemms_compute_at_their_own_efficiency():
    """A compute-bound fp8 GEMM runs at efficiency.matmul_fp8 of the fp8 datasheet (the measured fp8 / bf16 ratio is
    1.56-1.87, not 2); bf16 at matmul; a measured fp8 peak is the ceiling itself (calibrated matmul_fp8 1.0)."""
    e = Efficiency()
    shape = (8192, 8192, 8192)
    fp8, bf16 = predict_matmul(*shape, "fp8", "H100"), predict_matmul(*shape, "bf16", "H100")
    assert fp8.compute_class == "matmul_fp8" and bf16.compute_class == "matmul"
    assert bf16.compute_s / fp8.compute_s == pytest.approx(1979 * e.matmul_fp8 / (989.5 * e.matmul), rel=1e-9)
    measured = load_ceilings("H100", {"gpu": "NVIDIA H100 80GB HBM3", "peak_flops": {"fp8": 1.2e15}})
    assert measured.flops_per_s("fp8", "matmul_fp8") == pytest.approx(1.2e15)
    # the matmul ceiling a caller asks for in fp8 (the JSON's, the roofline plot's) is the one fp8 GEMMs get
    datasheet = load_ceilings("H100")
    assert datasheet.flops_per_s("fp8") == datasheet.flops_per_s("fp8", "matmul_fp8") == pytest.approx(1979e12 * 0.65)
    assert datasheet.as_dict("fp8")["matmul_flops_per_s"] == datasheet.flops_per_s("fp8", "matmul_fp8")
    unmeasured = load_ceilings("H100", {"gpu": "NVIDIA H100 80GB HBM3", "peak_flops": {"bf16": 7e14}})
    assert unmeasured.flops_per_s("fp8", "matmul_fp8") == pytest.approx(1979e12 * e.matmul_fp8)


def test_attention_flops_match_flop_calculator_and_io_aware_bytes():
    spec = load_model("llama2-7b")
    p = predict_attention(2, 32, 32, 1024, 1024, 128, True, "bf16", "H100")
    per_layer = attention_core_flops(spec, 2, 1024, 1024, True) / spec.num_layers
    assert p.flops == per_layer
    assert p.read_bytes == 2 * 1024 * 32 * 128 * 2 * 3  # Q, K, V once
    assert p.write_bytes == 2 * 1024 * 32 * 128 * 2  # O once; no S x S matrix
    gqa = predict_attention(2, 32, 8, 1, 4096, 128, False, "bf16", "H100", kv_dtype="fp8")
    assert gqa.read_bytes == 2 * 32 * 128 * 2 + 2 * 4096 * 8 * 256 * 1
    assert gqa.bound in ("memory", "overhead")


def test_attention_backward_is_two_and_a_half_forward():
    """2.5x the FLOPs; the time also carries each pass's measured shape factor (ATTENTION_SHAPE: causal S2048,
    forward 1.008 x (1 + 357/2048), backward 1.079 x (1 + 1027/2048)); without a mask (full) and long rows both
    approach their factors' ratio, 1.08 / 1.0."""
    fwd = predict_attention(1, 16, 16, 2048, 2048, 128, True, "bf16", "H100")
    bwd = predict_attention(1, 16, 16, 2048, 2048, 128, True, "bf16", "H100", backward=True)
    assert bwd.flops == pytest.approx(2.5 * fwd.flops)
    ratio = 1.079 * (1 + 1027 / 2048) / (1.008 * (1 + 357 / 2048))
    assert bwd.compute_s == pytest.approx(2.5 * fwd.compute_s * ratio)
    fwd, bwd = (predict_attention(1, 16, 16, 2048, 2**20, 128, False, "bf16", "H100", backward=b) for b in (False, True))
    assert bwd.compute_s / fwd.compute_s == pytest.approx(2.5 * 1.08, rel=2e-3)


def test_attention_shape_factor_matches_the_measured_cudnn_rows():
    """The H200 cuDNN rows the factors were read from (reports/attention/rows.jsonl, B x S = 16k tokens, H32,
    d128): measured TFLOP/s of the causal forward at S1k and S16k, and of the causal backward at the same, over
    the priced rate, within 4%."""
    measured = {("fwd", 1024): 423e12, ("fwd", 16384): 554e12, ("bwd", 1024): 270e12, ("bwd", 16384): 510e12}
    for (passname, s), rate in measured.items():
        p = predict_attention(16384 // s, 32, 32, s, s, 128, True, "bf16", "H200", backward=passname == "bwd")
        assert p.flops / p.compute_s == pytest.approx(rate, rel=0.04), (passname, s)


def test_memory_ops_count_their_bytes():
    assert norm_op(8, 4096, "bf16", "H100").bytes == (9 * 4096 + 8 * 4096) * 2
    assert embedding_op(3, 4096, "bf16", "H100").read_bytes == 3 * 4096 * 2  # only looked-up rows
    copy = elementwise_op(2**30, 1, 1, 0, "fp32", "H100")
    # default memory efficiency 0.89 of the H100's 3.35 TB/s (the per-SM cap, 23.75 GB/s x 132, binds only above it)
    assert copy.bytes / copy.predicted_s == pytest.approx(0.89 * 3.35e12, rel=0.01)
    assert copy.bound == "memory"


def test_tiny_ops_are_overhead_bound():
    assert norm_op(1, 64, "bf16", "H100").bound == "overhead"


def _calibration(tmp_path, **changes):
    record = {
        "gpu": "NVIDIA H100 80GB HBM3", "sm_count": 132,
        "peak_flops": {"bf16": 700e12, "fp16": 710e12, "fp8": 1200e12, "int8": None, "tf32": 380e12},
        "bandwidth_Bps": {"read": 3.1e12, "write": 2.9e12, "copy": 2.95e12},
        "env": {"torch": "2.11"}, "measured_at": "2026-11-26T00:00:00+00:00",
    }
    record.update(changes)
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(record))
    return path


def test_calibration_file_replaces_datasheet(tmp_path):
    ceil = load_ceilings(None, _calibration(tmp_path))
    assert ceil.gpu.name == "H100-SXM" and ceil.calibrated
    assert ceil.flops_per_s("bf16") == 700e12  # matmul efficiency 1 on a measured peak
    assert ceil.read_ceiling_Bps == 3.1e12 and ceil.write_ceiling_Bps == 2.9e12
    assert ceil.flops_per_s("int8") == pytest.approx(1979e12 * Efficiency().matmul)  # null -> datasheet
    assert any("int8" in n for n in ceil.notes)
    p = predict_matmul(8192, 8192, 8192, "bf16", ceil)
    waves = math.ceil(2048 / 132)
    assert p.compute_s == pytest.approx(waves * 2 * 128 * 256 * 8192 / (700e12 / 132))
    assert p.roofline_s == pytest.approx(2 * 8192**3 / 989.5e12)  # naive roof stays the datasheet


def test_calibration_errors(tmp_path):
    with pytest.raises(MlsysError, match="not valid JSON"):
        bad = tmp_path / "bad.json"
        bad.write_text("{")
        load_ceilings("H100", bad)
    with pytest.raises(MlsysError, match="positive"):
        load_ceilings("H100", _calibration(tmp_path, bandwidth_Bps={"copy": -1}))
    with pytest.raises(MlsysError, match="no built-in GPU"):
        load_ceilings(None, _calibration(tmp_path, gpu="Imaginary X9"))


def test_device_names_match_builtins():
    assert match_gpu("NVIDIA H100 80GB HBM3").name == "H100-SXM"
    assert match_gpu("NVIDIA H200").name == "H200"
    assert match_gpu("NVIDIA A100-SXM4-80GB").name == "A100-80GB-SXM"
    assert match_gpu("NVIDIA H100 PCIe").name == "H100-PCIe"
    # the harness may pass torch's device name straight through
    assert predict_matmul(64, 64, 64, "bf16", "NVIDIA H200").flops == 2 * 64**3
    with pytest.raises(MlsysError, match="did you mean"):
        predict_matmul(64, 64, 64, "bf16", "H300")


GPUS = ["A100-80GB", "H100", "H200", "B200", "L40S"]


@settings(max_examples=150, deadline=None)
@given(m=st.integers(1, 20000), n=st.integers(1, 20000), k=st.integers(1, 20000), gpu=st.sampled_from(GPUS),
       dtype=st.sampled_from(["bf16", "fp16", "int8"]))
def test_matmul_never_beats_the_naive_roofline(m, n, k, gpu, dtype):
    p = predict_matmul(m, n, k, dtype, gpu)
    spec = load_gpu(gpu)
    assert p.predicted_s >= p.flops / spec.peak_flops(dtype)
    assert p.predicted_s >= p.bytes / spec.memory_bandwidth_Bps
    assert 0 < p.achievable_fraction <= 1
    assert p.tiling.waves == math.ceil(p.tiling.units / spec.sm_count)


@settings(max_examples=100, deadline=None)
@given(b=st.integers(1, 64), kv=st.sampled_from([1, 2, 4, 8]), group=st.sampled_from([1, 2, 4, 8]),
       sq=st.integers(1, 4096), extra=st.integers(0, 8192), causal=st.booleans(), gpu=st.sampled_from(GPUS))
def test_attention_never_beats_the_naive_roofline(b, kv, group, sq, extra, causal, gpu):
    p = predict_attention(b, kv * group, kv, sq, sq + extra, 128, causal, "bf16", gpu)
    spec = load_gpu(gpu)
    assert p.predicted_s >= max(p.flops / spec.peak_flops("bf16"), p.bytes / spec.memory_bandwidth_Bps)
    longer = predict_attention(b, kv * group, kv, sq, 2 * (sq + extra), 128, causal, "bf16", gpu)
    assert longer.bytes > p.bytes and longer.flops > p.flops
