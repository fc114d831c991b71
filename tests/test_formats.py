"""Block-scaled formats (NVFP4, MXFP4, MXFP6, MXFP8): bytes with their scales in memory, KV cache and the
roofline, peaks at the element's tensor rate, quantised serving, and the block-scaled training recipes."""

from __future__ import annotations

import pytest

from mlsyscalc.calc.memory.inference import InferOptions, infer_memory
from mlsyscalc.calc.memory.training import TrainOptions, train_memory
from mlsyscalc.calc.roofline.model import predict_model
from mlsyscalc.calc.roofline.ops import predict_matmul, resolve_ceilings
from mlsyscalc.calc.roofline.options import RooflineOptions
from mlsyscalc.calc.train.step import train_step
from mlsyscalc.calc.train.options import TrainStepOptions
from mlsyscalc.dtypes import bytes_per_element, dtype_name
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.gpu import load_gpu
from mlsyscalc.specs.lookup import load_model


def test_bytes_per_element_count_the_block_scales():
    # NVFP4: 4 bits + one E4M3 byte per 16 (NVIDIA 2025); MX: one E8M0 byte per 32 (OCP MX v1.0, Table 1)
    assert bytes_per_element("nvfp4") == 0.5 + 1 / 16 == 0.5625
    assert bytes_per_element("mxfp4") == 0.5 + 1 / 32
    assert bytes_per_element("mxfp6") == bytes_per_element("fp6") == 0.75 + 1 / 32
    assert bytes_per_element("mxfp8") == 1 + 1 / 32
    assert dtype_name("MXFP6_E2M3") == "mxfp6"
    with pytest.raises(MlsysError, match="fp4 names a tensor rate.*nvfp4.*mxfp4"):
        bytes_per_element("fp4")


def test_peaks_are_the_elements_tensor_rate():
    b200, mi355 = load_gpu("B200"), load_gpu("MI355X")
    assert b200.peak_flops("nvfp4") == b200.peak_flops("mxfp4") == 9e15
    assert b200.peak_flops("mxfp6") == b200.peak_flops("fp8")  # Blackwell: FP6 at the FP8 rate
    assert mi355.peak_flops("mxfp6") == mi355.peak_flops("mxfp4")  # CDNA 4: FP6 at the FP4 rate
    assert b200.peak_flops("mxfp8") == b200.peak_flops("fp8")


def test_weights_in_memory_are_values_block_scales_and_nvfp4s_tensor_scale():
    spec = load_model("llama3-8b")
    bf16, nv, mx = (infer_memory(spec, InferOptions(dtype=d)) for d in ("bf16", "nvfp4", "mxfp4"))
    elements = bf16.detail["weights_quantised"] / 2  # the decoder projections
    tensors = 7 * spec.num_layers  # q, k, v, o, gate, up, down
    assert nv.detail["weights_quantised"] == elements / 2
    assert nv.detail["weights_scales"] == elements / 16 + 4 * tensors
    assert mx.detail["weights_scales"] == elements / 32
    assert nv.detail["weights_unquantised"] == bf16.detail["weights_unquantised"]  # embeddings, head, norms: bf16
    with pytest.raises(MlsysError, match="its format fixes the block"):
        infer_memory(spec, InferOptions(dtype="nvfp4", group_size=64))


def test_kv_cache_in_nvfp4():
    spec = load_model("llama3-8b")
    bf16, nv = (infer_memory(spec, InferOptions(kv_dtype=d)) for d in ("bf16", "nvfp4"))
    assert nv.kv_bytes_per_token == bf16.kv_bytes_per_token / 2 * 0.5625
    assert nv.breakdown["kv_cache"] == pytest.approx(bf16.breakdown["kv_cache"] * 0.5625 / 2, abs=1)


def test_fp4_gemm_computes_at_the_fp4_rate_and_reads_the_scales():
    ceil = resolve_ceilings("B200")
    m, n, k = 8192, 8192, 8192
    fp4, bf16 = predict_matmul(m, n, k, "nvfp4", ceil), predict_matmul(m, n, k, "bf16", ceil)
    assert fp4.read_bytes == (m * k + n * k) * 0.5625 and fp4.write_bytes == m * n * 2  # writes bf16
    assert fp4.compute_s == pytest.approx(bf16.compute_s / 4, rel=1e-9)  # 9 vs 2.25 PFLOPS, the same tiles
    assert fp4.tiling.block_m == bf16.tiling.block_m
    with pytest.raises(MlsysError, match="H100-SXM: no fp4 peak"):
        predict_matmul(m, n, k, "nvfp4", resolve_ceilings("H100"))


def test_weight_only_fp4_computes_in_bf16():
    ceil = resolve_ceilings("H100")
    w4a16 = predict_matmul(1, 4096, 4096, "bf16", ceil, weight_dtype="nvfp4")
    assert w4a16.read_bytes == 4096 * 2 + 4096 * 4096 * 0.5625 and w4a16.floor_s == 0.0
    opts = RooflineOptions(phase="decode", context=1024, dtype="nvfp4", matmul_dtype="bf16")
    assert opts.compute_dtype == "bf16" and opts.activation_dtype == "bf16"
    assert RooflineOptions(dtype="nvfp4").compute_dtype == "nvfp4"
    with pytest.raises(MlsysError, match="int4/nf4 are weight formats"):
        RooflineOptions(matmul_dtype="int4").validate(load_model("llama3-8b"))


def test_decode_step_shrinks_with_the_weights():
    spec, ceil = load_model("llama3-70b"), resolve_ceilings("B200")
    run = {d: predict_model(spec, ceil, RooflineOptions(phase="decode", batch=8, context=1024, dtype=d, kv_dtype="fp8"))
           for d in ("fp8", "nvfp4")}
    assert run["nvfp4"].weight_bytes == pytest.approx(run["fp8"].weight_bytes * 0.5625, rel=1e-12)
    gemm_s = {d: sum(r.count * r.pred.memory_s for r in m.rows if r.pred.kind == "matmul") for d, m in run.items()}
    assert 0.5625 < gemm_s["nvfp4"] / gemm_s["fp8"] < 0.58  # the weights' bytes, plus the few activation bytes
    assert run["nvfp4"].time_s < run["fp8"].time_s


def test_serving_nvfp4_holds_more_kv_and_runs_faster(run_cli):
    args = ("serve", "llama3-70b", "--gpu", "B200", "--kv-dtype", "fp8", "--rate", "1000", "--requests", "60",
            "--prompt-len", "512", "--output-len", "256")
    fp8, nv, w4a8 = (run_cli.json(*args, "--dtype", *d) for d in (["fp8"], ["nvfp4"], ["nvfp4", "--matmul-dtype", "fp8"]))
    assert nv["kv_blocks"] > fp8["kv_blocks"] == pytest.approx(fp8["kv_blocks"])
    assert nv["throughput_tokens_per_s"] > w4a8["throughput_tokens_per_s"]


LAYOUT = dict(gpus=8, seq=4096, global_batch=16, micro_batch=1, tp=2, pp=2, zero=1)


def _step(dtype: str, **kw):
    spec = load_model("llama3-8b")
    return train_step(spec, resolve_ceilings("B200"), "dgx-b200", TrainStepOptions(**{**LAYOUT, **kw}, dtype=dtype))


def test_block_scaled_training_prices_its_casts():
    bf16, fp8, mx, nv = (_step(d) for d in ("bf16", "fp8", "mxfp8", "nvfp4"))
    assert nv.step_time_s < fp8.step_time_s < bf16.step_time_s
    for step in (mx, nv):
        assert step.step_time_s == pytest.approx(sum(step.breakdown.values()), rel=1e-12)
        assert step.breakdown["fp8_scaling_s"] > 0 and step.as_dict()["scaling_recipe"] == step.options.dtype
    # NVFP4 casts each tensor twice (rowwise, columnwise with the Hadamard transform) after an amax pass: more kernels
    # than MXFP8's single cast writing both copies
    assert nv.breakdown["fp8_scaling_s"] > mx.breakdown["fp8_scaling_s"]
    assert fp8.as_dict()["scaling_recipe"] == "delayed" and bf16.breakdown["fp8_scaling_s"] == 0


def test_block_scaled_training_memory():
    spec = load_model("llama3-8b")
    mem = {d: train_memory(spec, TrainOptions(batch=1, seq=4096, dtype=d, tp=2)) for d in ("fp8", "mxfp8", "nvfp4")}
    fp8_in = lambda m: sum(v for k, v in m.activation_items if "fp8" in k)  # noqa: E731
    # the weight-gradient GEMM's saved copy: 1 byte (fp8), 1 + 1/32 (mxfp8), 0.5 + 1/16 (nvfp4)
    assert fp8_in(mem["mxfp8"]) == pytest.approx(fp8_in(mem["fp8"]) * 1.03125, rel=1e-9)
    assert fp8_in(mem["nvfp4"]) == pytest.approx(fp8_in(mem["fp8"]) * 0.5625, rel=1e-9)
    copies = {d: m.peak_stage.detail["fp8_weight_copies"] for d, m in mem.items()}
    # rowwise + columnwise weight copies: 2 bytes (fp8), 2 x 1.03125 (mxfp8), 2 x (0.5 + 1/256) (nvfp4's 16 x 16 blocks)
    assert copies["mxfp8"] == pytest.approx(copies["fp8"] * 1.03125, rel=1e-9)
    assert copies["nvfp4"] == pytest.approx(copies["fp8"] * (0.5 + 1 / 256), rel=1e-9)


def test_plan_prices_nvfp4_as_train_does(run_cli):
    args = ("llama3-8b", "--gpus", "8", "--gpu", "B200", "--seq", "4096", "--global-batch", "16", "--dtype", "nvfp4")
    best = run_cli.json("plan", *args, "--top", "1", "--quiet", "--even-splits-only")["candidates"][0]
    lay = best["layout"]
    flags = [f"--{k.replace('_', '-')}={lay[k]}" for k in ("tp", "pp", "cp", "ep", "etp", "vp", "micro_batch", "zero", "recompute")]
    step = run_cli.json("train", *args, *flags, *(["--no-sp"] if not lay["sp"] else []))
    assert step["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-9)
    assert step["memory_bytes_per_gpu"] == best["memory_bytes_per_gpu"]
