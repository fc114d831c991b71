"""Value tests for the roofline's op and kernel lists, the calibration defaults and the scaling fits.

Expected numbers are written out from shapes (config.json), bytes per element, and the kernels'
documented behaviour (cuBLAS 16-byte row alignment, cuDNN head-dim tiles, torch's multi-tensor
launch sizes in ATen's MultiTensorApply.cuh)."""

from __future__ import annotations

import math

import pytest

from mlsyscalc.calc.roofline.calibration import load_ceilings
from mlsyscalc.calc.roofline.model import RooflineOptions, predict_model
from mlsyscalc.specs.lookup import load_model

H100 = load_ceilings("h100-sxm")


def _rows(name, **kw):
    return predict_model(load_model(name), H100, RooflineOptions(impl="torch", check_fit=False, **kw)).rows


def _named(rows, name, layers=None):
    return [r for r in rows if r.pred.name == name and (layers is None or r.layers == layers)]


# --- roofline_ops ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dims,dtype,weight,expect", [
    ((50257,), "bf16", "bf16", True),     # gpt2's vocabulary: 50257 % 8 != 0 (8 bf16 = 16 bytes)
    ((4096, 768), "bf16", "bf16", False),
    ((4100,), "bf16", "bf16", True),      # 4100 % 8 = 4
    ((4100,), "fp32", "fp32", False),     # 4 fp32 = 16 bytes: 4100 % 4 = 0
    ((4104,), "fp8", "fp8", True),        # 16 fp8 = 16 bytes: 4104 % 16 = 8
    ((50257,), "bf16", "int4", False),    # weight-only quantized GEMMs are not cuBLAS's plain GEMM
])
def test_unaligned_rows_need_16_bytes(dims, dtype, weight, expect):
    from mlsyscalc.calc.roofline.ops import unaligned
    assert unaligned(dims, dtype, weight) is expect


@pytest.mark.parametrize("d,padded", [(32, 64), (64, 64), (80, 128), (96, 128), (128, 128), (129, 256),
                                      (192, 256), (256, 256), (300, 512)])
def test_head_dims_pad_to_cudnn_tiles(d, padded):
    from mlsyscalc.calc.roofline.ops import padded_head_dim
    assert padded_head_dim(d) == padded


@pytest.mark.parametrize("sq,skv,w,area", [
    (1, 100, 4096, (100 * 100 - 99 * 99) / 2),     # decode inside the window: the causal strip
    (100, 100, 4096, 100 * 100 / 2),               # prefill inside the window: half the square
    (100, 100, 10, 100 * 10 - 10 * 10 / 2),        # S x W - W^2 / 2
    (10, 100, 20, 20 * 10),                        # every query past the window: W keys each
])
def test_window_fraction_areas(sq, skv, w, area):
    from mlsyscalc.calc.roofline.ops import window_fraction
    assert window_fraction(sq, skv, w) == pytest.approx(area / (sq * skv), rel=1e-12)


def test_memory_op_defaults_to_no_flops_and_attention_streams_at_the_memory_class():
    """Only GEMMs stream their bytes at matmul_skinny; attention and plain memory kernels at memory."""
    from mlsyscalc.calc.roofline.ops import predict_attention, predict_matmul, predict_memory_op
    op = predict_memory_op("copy", 1e6, 1e6)
    assert op.flops == 0.0 and op.kind == "memory" and op.memory_class == "memory"
    assert predict_attention(1, 32, 32, 512, 512, 128).memory_class == "memory"
    assert predict_matmul(4096, 4096, 4096).memory_class == "matmul_skinny"


# --- the --impl torch kernel lists (bytes from shapes, bf16 = 2 bytes) --------------------------------

def test_qwen2_training_bias_gradients_and_gqa_head_reduction():
    """qwen2.5-7b, B1 S512: q/k/v have biases (3584, 512, 512 wide); each bias gradient reads the
    512 x width output gradient and writes width. 28 query heads on 4 KV heads of 128: cuDNN sums dK, dV
    over each KV head's 7 query heads: reads 512 x 28 x 128, writes 512 x 4 x 128."""
    rows = _rows("qwen2.5-7b", phase="train", batch=1, seq=512)
    bias = sorted((r.pred.read_bytes, r.pred.write_bytes, r.count) for r in _named(rows, "bias.bwd_sum", "layers"))
    assert bias == [(512 * 512 * 2, 512 * 2, 28)] * 2 + [(512 * 3584 * 2, 3584 * 2, 28)]
    for x in "kv":
        (r,) = _named(rows, f"attention.bwd_reduce_head.{x}")
        assert (r.pred.read_bytes, r.pred.write_bytes, r.count) == (512 * 28 * 128 * 2, 512 * 4 * 128 * 2, 28)


def test_mha_training_has_no_head_reduction():
    rows = _rows("llama2-7b", phase="train", batch=1, seq=512)
    assert not [r for r in rows if "reduce_head" in r.pred.name]


def test_lm_head_bias_gradient_once_per_step():
    """phi-2's lm_head has a 51200-wide bias: one reduction over 512 tokens in the head's backward."""
    (r,) = _named(_rows("phi-2", phase="train", batch=1, seq=512), "bias.bwd_sum", "head")
    assert (r.count, r.pred.read_bytes, r.pred.write_bytes) == (1, 512 * 51200 * 2, 51200 * 2)


def test_partial_rotary_backward_adds_two_head_tensors():
    """phi-2 rotates 32 of 80 dims; the backward's slice add reads two 512 x 32-head x 80 tensors and writes one
    (q and k: two rows)."""
    rows = _named(_rows("phi-2", phase="train", batch=1, seq=512), "rotary.bwd_slice_add")
    full = 512 * 32 * 80 * 2
    assert [(r.pred.read_bytes, r.pred.write_bytes) for r in rows] == [(2 * full, full)] * 2


def test_decode_split_kv_combine_bytes():
    """llama2-7b decode B1: 32 heads x 128 = 4096 outputs, 4 KV splits each writing fp32 partial outputs
    plus a max and a sum per row (2 / 128 of the width); the combine writes 4096 bf16."""
    (r,) = _named(_rows("llama2-7b", phase="decode", batch=1, context=2048), "attention.combine")
    assert r.pred.read_bytes == pytest.approx(4 * 4096 * 4 * (1 + 2 / 128), rel=1e-12)
    assert r.pred.write_bytes == 4096 * 2


def test_mla_decode_cache_concat_is_a_copy():
    """deepseek-v3 caches kv_lora_rank + rope dims = 512 + 64 elements a token: the concat copies them
    (no arithmetic)."""
    for r in _named(_rows("deepseek-v3", phase="decode", batch=1, context=128), "kv_cache_cat"):
        assert (r.pred.flops, r.pred.read_bytes, r.pred.write_bytes) == (0.0, 576 * 2, 576 * 2)


def test_zero_grad_launches_follow_the_chunk_limit():
    """qwen2.5-7b: 7,615,616,512 parameters in chunks of 320 x 65,536 elements a launch: ceil(363.15) = 364
    launches (more than ceil(339 tensors / 110)), together writing every bf16 gradient once."""
    (r,) = _named(_rows("qwen2.5-7b", phase="train", batch=1, seq=512), "grad.zero")
    assert r.count == math.ceil(7_615_616_512 / (320 * 65536)) == 364
    assert r.count * r.pred.write_bytes == pytest.approx(7_615_616_512 * 2, rel=1e-9)


# --- calibration, training state bytes, options -------------------------------------------------------

def test_calibrated_classes_keep_their_ratio_to_the_kind_default():
    """docs: a class keeps its ratio to its kind's default (0.32 / 0.89, 0.12 / 0.74, 0.8 x 0.82)."""
    from mlsyscalc.calc.roofline.calibration import CALIBRATED_EFFICIENCY as c
    assert c.memory_broadcast == pytest.approx(0.32 / 0.89, abs=0.005)
    assert c.matmul_unaligned == pytest.approx(0.12 / 0.74, abs=0.005)
    assert c.attention_small_head == pytest.approx(0.8 * 0.82, abs=0.005)


@pytest.mark.parametrize("dtype,master,expect", [("fp32", False, (16.0, 12.0)), ("bf16", False, (8.0, 6.0))])
def test_adamw_bytes_without_master_weights(dtype, master, expect):
    """torch's AdamW on parameters of the model dtype: reads weight, grad, m, v; writes weight, m, v."""
    from mlsyscalc.calc.roofline.training import state_bytes
    assert state_bytes(dtype, master) == expect


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_every_zero_stage_is_accepted_for_training(zero):
    predict_model(load_model("gpt2"), H100, RooflineOptions(phase="train", seq=128, zero=zero, dp=2, check_fit=False))


def test_power_law_fit_recovers_an_exact_law():
    """N = 3 C^0.5 sampled exactly: least squares on the logs returns (0.5, 3)."""
    from mlsyscalc.calc.scaling.laws import fit_power_law
    rows = tuple((3.0 * c ** 0.5, c, 0.0) for c in (1e18, 1e20, 1e22, 1e24))
    a, k = fit_power_law(rows)
    assert a == pytest.approx(0.5, rel=1e-9) and k == pytest.approx(3.0, rel=1e-6)


# --- pinned after the second held-out sample was scored (docs/mutation.md) ---------------------------

def test_kernels_by_class_add_up_to_the_kernel_count():
    """Every priced kernel has exactly one efficiency class, so the per-class counts sum to the total."""
    for phase, kw in (("decode", dict(context=2048)), ("prefill", dict(seq=512)), ("train", dict(seq=512))):
        r = predict_model(load_model("llama3-8b"), H100, RooflineOptions(impl="torch", check_fit=False, phase=phase, **kw))
        assert sum(r.kernels_by_class.values()) == r.kernels > 0


def test_affine_free_norm_has_no_parameters():
    """norm 'none' (a LayerNorm without elementwise affine): 0 parameters per element; RMSNorm 1, LayerNorm 2."""
    from dataclasses import replace

    from mlsyscalc.calc.counts.layers import norm_width
    gpt2 = load_model("gpt2")
    assert (norm_width(replace(gpt2, norm="none")), norm_width(gpt2), norm_width(load_model("llama3-8b"))) == (0, 2, 1)


def test_a_config_file_is_named_by_its_folder_or_its_stem(tmp_path):
    """models/mymodel/config.json is 'mymodel'; other.json is 'other' (unless the file sets _name)."""
    import json

    from mlsyscalc.specs.lookup import builtin_configs
    raw = {k: v for k, v in builtin_configs()["gpt2"].items() if not k.startswith("_")}
    (tmp_path / "mymodel").mkdir()
    (tmp_path / "mymodel" / "config.json").write_text(json.dumps(raw))
    (tmp_path / "other.json").write_text(json.dumps(raw))
    assert load_model(str(tmp_path / "mymodel" / "config.json")).name == "mymodel"
    assert load_model(str(tmp_path / "other.json")).name == "other"


def test_bootstrap_above_its_limit_is_refused():
    """--bootstrap is capped at 2,000 resamples (docs/scaling.md)."""
    from mlsyscalc.calc.scaling.fit import FitOptions, Runs, fit_runs
    from mlsyscalc.errors import MlsysError
    grid = [(n, d) for n in (1e8, 3e8, 1e9) for d in (2e9, 6e9, 2e10)]
    runs = Runs(tuple(n for n, _ in grid), tuple(d for _, d in grid),
                tuple(1.8 + 450 / n ** 0.34 + 1800 / d ** 0.37 for n, d in grid))
    with pytest.raises(MlsysError, match="--bootstrap must be 0 to 2,000 resamples, got 2,001"):
        fit_runs(runs, FitOptions(starts=4, bootstrap=2001))
