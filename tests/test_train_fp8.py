"""FP8 training as Transformer Engine runs it (calc.precision.fp8): saved activations and weight copies in
memory, the scaling kernels in the step. Oracles: byte counts written out by hand from the tensors TE
saves and casts (docs/train.md, "FP8 training"), and the datasheet ceilings' memory formula."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mlsyscalc import load_model
from mlsyscalc.calc.roofline.calibration import load_ceilings
from mlsyscalc.calc.precision.fp8 import Gemm, gemm_kernels, weight_kernels

H, INTER, LAYERS = 4096, 11008, 32  # llama2-7b: MHA, SwiGLU
SEQ = 1024
LINEAR = 4 * H * H + 3 * H * INTER  # q, k, v, o + gate, up, down weight elements of one layer


def test_fp8_activations_per_layer_by_hand(run_cli):
    """Per token, bytes: bf16 saves 2 (2h norms + h qkv input + 3h Q K V + h O + h mlp input + 4I);
    fp8 keeps norms, Q K V, O and gate, act(gate), up in bf16 (2 bytes) and the FP8 linears' inputs at 1
    byte: qkv input h, o_proj's copy of O h, mlp input h, down_proj input I."""
    bf16 = run_cli.json("memory", "train", "llama2-7b", "--seq", str(SEQ), "--dtype", "bf16")
    fp8 = run_cli.json("memory", "train", "llama2-7b", "--seq", str(SEQ), "--dtype", "fp8")
    assert sum(bf16["activation_bytes_per_layer"].values()) == SEQ * 2 * (8 * H + 4 * INTER)
    by_hand = 2 * (2 * H + 3 * H + H + 3 * INTER) + 1 * (H + H + H + INTER)
    assert sum(fp8["activation_bytes_per_layer"].values()) == SEQ * by_hand
    items = fp8["activation_bytes_per_layer"]
    assert items["attention output O"] == SEQ * H * 2 and items["o_proj input (fp8 copy)"] == SEQ * H


def test_fp8_weight_copies_by_hand(run_cli):
    """TE caches each FP8 linear's weight as FP8 rowwise + transpose: 2 bytes per element of the 32 layers'
    linears; FP8 parameters (--fp8-params) are the rowwise copy themselves: the transpose is the only
    copy and the weights shrink from 2 bytes to 1 per linear element."""
    bf16 = run_cli.json("memory", "train", "llama2-7b", "--seq", str(SEQ), "--dtype", "bf16")
    fp8 = run_cli.json("memory", "train", "llama2-7b", "--seq", str(SEQ), "--dtype", "fp8")
    params = run_cli.json("memory", "train", "llama2-7b", "--seq", str(SEQ), "--dtype", "fp8", "--fp8-params")
    linear = LAYERS * LINEAR
    assert fp8["detail"]["fp8_weight_copies_bytes"] == 2 * linear
    assert fp8["weights_bytes"] == bf16["weights_bytes"] + 2 * linear
    assert params["detail"]["fp8_weight_copies_bytes"] == linear
    assert params["weights_bytes"] == bf16["weights_bytes"] - linear + linear  # 1 byte less a weight, 1 more a copy
    assert fp8["gradients_bytes"] == bf16["gradients_bytes"] and fp8["optimizer_bytes"] == bf16["optimizer_bytes"]


def _gemm(kind: str, norm_fed: bool) -> Gemm:
    return Gemm("g", tokens=1000, width=64, out=32, weights=64 * 32, kind=kind, norm_fed=norm_fed)


def _bytes(kernels: list[tuple[str, float, float]]) -> tuple[float, float, int]:
    return sum(k[1] for k in kernels), sum(k[2] for k in kernels), len(kernels)


def test_scaling_kernels_by_hand():
    """x = 1000 x 64 input elements, dy = 1000 x 32 output-gradient elements, tp 4."""
    x, dy = 1000 * 64, 1000 * 32
    # row-parallel linear, no SP, current scaling: amax (read 2x), scale, cast + transpose (read 2x, write 2x)
    k = gemm_kernels(_gemm("row", False), 4, False, "current")
    assert _bytes(k["forward"]) == (2 * x + 2 * x + 4, 2 * x + 4 + 8, 3)
    assert _bytes(k["backward"]) == (2 * dy + 2 * dy + 4, 2 * dy + 4 + 8, 3)
    # same with SP: the output gradient is cast on the local quarter (rowwise), gathered, then transposed
    k = gemm_kernels(_gemm("row", False), 4, True, "current")
    assert _bytes(k["backward"]) == (2 * dy / 4 + 2 * dy / 4 + 4 + dy, dy / 4 + 4 + 8 + dy, 4)
    # column-parallel, norm-fed, SP, current: the norm gave the amax; local rowwise cast; transpose after re-gather
    k = gemm_kernels(_gemm("column", True), 4, True, "current")
    assert _bytes(k["forward"]) == (2 * x / 4 + 4, x / 4 + 8, 2)
    assert _bytes(k["backward"])[:2] == (x + 2 * dy + 2 * dy + 4, x + 2 * dy + 4 + 8)
    # delayed scaling: no amax pass or scale kernel; a norm-fed input without SP is only transposed
    k = gemm_kernels(_gemm("column", True), 4, False, "delayed")
    assert _bytes(k["forward"]) == (x, x, 1) and _bytes(k["backward"]) == (2 * dy, 2 * dy, 1)
    # weights once a step: bf16 -> FP8 + transpose; FP8 parameters: fp32 master shard (1/2) cast, then transpose
    w = 64 * 32
    assert _bytes(weight_kernels(_gemm("row", False), "delayed", False, 2)) == (2 * w, 2 * w, 1)
    assert _bytes(weight_kernels(_gemm("row", False), "delayed", True, 2)) == (4 * w / 2 + w, w / 2 + w, 2)


def test_step_prices_the_scaling_kernels_by_hand(run_cli):
    """One H100, llama2-7b, one micro-batch of 1024 tokens, delayed scaling, no TP: per layer the four
    GEMM groups cast x = T h (qkv input: norm wrote FP8, transpose only: read x, write x), T h (o input:
    read 2x, write 2x), T h (gate/up input: transpose only), T INTER (down input: read 2, write 2); the output
    gradients T (3h), T h, T (2I), T h each read 2, write 2; the weights once: read 2, write 2 per element.
    Each kernel at the datasheet bandwidth x efficiency.memory plus the fixed cost of a kernel."""
    ceil = load_ceilings("H100-SXM")
    t = SEQ
    kernels = [(t * H, t * H), (2 * t * H, 2 * t * H), (t * H, t * H), (2 * t * INTER, 2 * t * INTER),
               (2 * t * 3 * H, 2 * t * 3 * H), (2 * t * H, 2 * t * H), (2 * t * 2 * INTER, 2 * t * 2 * INTER),
               (2 * t * H, 2 * t * H)]
    weights = [(2 * 3 * H * H, 2 * 3 * H * H), (2 * H * H, 2 * H * H), (2 * 2 * H * INTER, 2 * 2 * H * INTER),
               (2 * H * INTER, 2 * H * INTER)]

    def seconds(read: float, write: float) -> float:
        return (read / ceil.read_Bps + write / ceil.write_Bps) / ceil.efficiency.memory + ceil.overhead_s("memory") + ceil.gap_s

    expected = LAYERS * sum(seconds(r, w) for r, w in kernels + weights)
    args = ("train", "llama2-7b", "--gpus", "1", "--gpu", "H100-SXM", "--seq", str(SEQ), "--global-batch", "1")
    fp8 = run_cli.json(*args, "--dtype", "fp8")
    assert fp8["breakdown"]["fp8_scaling_s"] == pytest.approx(expected, rel=1e-9)
    assert fp8["step_time_s"] == pytest.approx(sum(fp8["breakdown"].values()), rel=1e-12)
    assert fp8["fp8_recipe"] == "delayed" and fp8["fp8_params"] is False
    current = run_cli.json(*args, "--dtype", "fp8", "--fp8-recipe", "current")
    assert current["breakdown"]["fp8_scaling_s"] > fp8["breakdown"]["fp8_scaling_s"]
    assert current["breakdown"]["compute_s"] == pytest.approx(fp8["breakdown"]["compute_s"], rel=1e-12)
    assert run_cli.json(*args, "--dtype", "bf16")["breakdown"]["fp8_scaling_s"] == 0


def test_fp8_scaling_recomputed_with_full_recompute(run_cli):
    """Full recomputation re-runs each layer's forward, its input casts included; the weight casts
    stay once a step."""
    args = ("train", "llama2-7b", "--gpus", "1", "--gpu", "H100-SXM", "--seq", str(SEQ), "--global-batch", "1",
            "--dtype", "fp8")
    none = run_cli.json(*args)["breakdown"]["fp8_scaling_s"]
    full = run_cli.json(*args, "--recompute", "full")["breakdown"]["fp8_scaling_s"]
    ceil = load_ceilings("H100-SXM")
    forward = [(SEQ * H, SEQ * H), (2 * SEQ * H, 2 * SEQ * H), (SEQ * H, SEQ * H), (2 * SEQ * INTER, 2 * SEQ * INTER)]
    again = LAYERS * sum((r / ceil.read_Bps + w / ceil.write_Bps) / ceil.efficiency.memory + ceil.overhead_s("memory")
                         + ceil.gap_s for r, w in forward)
    assert full - none == pytest.approx(again, rel=1e-9)


@pytest.mark.parametrize("args,message", [
    (("memory", "train", "llama2-7b", "--fp8-params"), "--fp8-params needs --dtype fp8"),
    (("train", "llama2-7b", "--gpus", "1", "--gpu", "H100-SXM", "--global-batch", "1", "--fp8-params"),
     "--fp8-params needs --dtype fp8"),
])
def test_fp8_options_need_fp8(run_cli, args, message):
    code, _, err = run_cli(*args)
    assert code == 2 and message in err


def test_model_is_llama2_7b():
    spec = load_model("llama2-7b")
    assert (spec.hidden_size, spec.intermediate_size, spec.num_layers, spec.num_kv_heads) == (H, INTER, LAYERS, 32)


def test_head_runs_in_bf16():
    """Megatron-LM's output layer is not a Transformer Engine module: with --dtype fp8 the embedding, final
    norm and lm_head cost what they cost in bf16, while the decoder layers' matmuls run at the FP8 rate."""
    from mlsyscalc.calc.train.parts import roofline_pass, stage_parts

    spec, ceil = load_model("llama2-7b"), load_ceilings("H100-SXM")
    parts = {d: stage_parts(spec, roofline_pass(spec, ceil, tp=2, cp=1, micro_batch=1, seq=SEQ, dtype=d,
                                                clocks="burst"), sp=True)  # one clock for both (calc.roofline.steady)
             for d in ("bf16", "fp8")}
    assert parts["fp8"].last_s == parts["bf16"].last_s and parts["fp8"].first_s == parts["bf16"].first_s
    fp8_layer = parts["fp8"].layer_s["dense"]["forward"] - parts["fp8"].fp8_s["dense"]["forward"]
    assert fp8_layer < 0.75 * parts["bf16"].layer_s["dense"]["forward"]


def test_amax_all_reduces_under_sequence_parallelism(run_cli):
    """Current scaling with SP reduces the amax of q/k/v's and gate/up's local input shards (forward) and of
    o_proj's and down_proj's output-gradient shards (backward) over the TP group: 4 all-reduces of one fp32
    a layer and micro-batch, each `mlsys comm all-reduce --size 4` over the TP GPUs; the step's other FP8
    seconds are m x those plus the weight casts."""
    from mlsyscalc.calc.train.step import step_fp8_s
    from mlsyscalc.calc.precision.fp8 import weight_cast_s
    from mlsyscalc.calc.train.options import TrainStepOptions
    from mlsyscalc.calc.train.parts import pipeline_stages, roofline_pass, stage_parts
    from mlsyscalc.specs.cluster import load_cluster

    spec, ceil, cluster = load_model("llama2-7b"), load_ceilings("H100-SXM"), load_cluster("hgx-h100")
    t = run_cli.json("comm", "all-reduce", "--size", "4", "--gpus", "4", "--cluster", "hgx-h100")["time_s"]
    opts = TrainStepOptions(gpus=4, tp=4, seq=SEQ, global_batch=3, dtype="fp8", fp8_recipe="current")
    result = roofline_pass(spec, ceil, tp=4, cp=1, micro_batch=1, seq=SEQ, dtype="fp8")
    parts = stage_parts(spec, result, sp=True, fp8_recipe="current")
    _, other = step_fp8_s(parts, pipeline_stages(spec, 1, 1), opts, ceil, cluster)
    weights = LAYERS * weight_cast_s(parts.fp8_gemms, ceil, recipe="current", fp8_params=False, shard=1)["dense"]
    assert other == pytest.approx(3 * LAYERS * 4 * t + weights, rel=1e-9)
    delayed = stage_parts(spec, result, sp=True, fp8_recipe="delayed")
    _, other = step_fp8_s(delayed, pipeline_stages(spec, 1, 1), replace(opts, fp8_recipe="delayed"), ceil, cluster)
    casts = weight_cast_s(delayed.fp8_gemms, ceil, recipe="delayed", fp8_params=False, shard=1)["dense"]
    assert other == pytest.approx(LAYERS * casts, rel=1e-12)  # no amax all-reduces


def test_fp8_parameters_under_zero3_shrink_the_held_shard_not_the_whole_model(run_cli):
    """FP8 weights under ZeRO-3 save on the shard a rank holds: the weights stay positive (they went negative
    before, the whole model's saving taken off one shard) and more data-parallel ranks never hold more."""
    def weights(gpus: int) -> float:
        d = run_cli.json("train", "llama3-8b", "--gpus", str(gpus), "--cluster", "hgx-h200", "--seq", "8192",
                         "--global-batch", "64", "--micro-batch", "2", "--zero", "3", "--no-sp", "--dtype", "fp8",
                         "--framework", "torch", "--fp8-params")
        return d["memory"]["breakdown"]["weights_bytes"]
    w8, w32 = weights(8), weights(32)
    assert 0 < w32 < w8
