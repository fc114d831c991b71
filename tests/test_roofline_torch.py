"""`--impl torch`: the kernels plain PyTorch runs, against hand counts and the H200 profiles of
reports/models (kernel names and launch counts measured by torch.profiler), and the properties
every roofline keeps: times >= 0, parts adding up, more kernels never less time."""

from __future__ import annotations


import pytest

from mlsyscalc.bench.model_profile import _range_copy, kernel_kind
from mlsyscalc.calc.roofline.calibration import load_ceilings
from mlsyscalc.calc.counts.params import count_params
from mlsyscalc.calc.roofline.model import RooflineOptions, predict_model
from mlsyscalc.calc.roofline.torch_kernels import adamw_launches, step_param_tensors
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.lookup import load_model, parse_overrides

H200 = load_ceilings("H200")
TINYLLAMA = ["hidden_size=2048", "num_hidden_layers=22", "intermediate_size=5632", "num_key_value_heads=4"]


def _torch(spec, **kw) -> object:
    return predict_model(spec, H200, RooflineOptions(impl="torch", check_fit=False, **kw))


def test_llama2_decode_b1_kernel_count_by_hand():
    """Per layer: 7 GEMMs, 5 split-K reductions (q, k, v, o: N = K = 4096 gives 64 output tiles
    < 132 / 2; down_proj: K = 11008 >= 2 N), 2 norms, 3 + 3 rotary kernels (q and k), 2 KV
    copies, SiLU and the gate product, 2 residual adds, the attention kernel and its split-KV
    combine (32 heads x 1 token < 132 SMs) = 28; head: embedding, final norm, lm_head, fp32 cast.
    The H200 profile (reports/models/h200.jsonl) shows the same 160 cublasLt splitKreduce and 32
    lean_reduction launches, 65 norm and 64 roll kernels."""
    r = _torch(load_model("llama2-7b"), phase="decode", context=2048)
    assert r.kernels == 32 * 28 + 4 == 900
    names = {row.pred.name: row.count for row in r.rows}
    assert sum(c for n, c in names.items() if n.endswith("splitk_reduce")) == 160
    assert names["attention.combine"] == 32 and names["norm"] == 64 and names["rotary.roll"] == 64
    fused = predict_model(load_model("llama2-7b"), H200, RooflineOptions(phase="decode", context=2048))
    assert fused.kernels == 483 and r.totals()["kernels"] == 900 and r.totals()["impl"] == "torch"


def test_rotary_kernels_move_their_bytes():
    """llama2-7b prefill B1 S16: q is 16 x 32 rows of 128 dims (bf16): x * cos reads x (131072 B)
    and the 16 x 128 cos table (4096 B) and writes x; roll reads and writes x; addcmul reads
    x * cos, the rolled x and the sin table and writes x."""
    r = _torch(load_model("llama2-7b"), phase="prefill", seq=16)
    q = 16 * 32 * 128 * 2
    table = 16 * 128 * 2
    rows = {(row.pred.name, row.pred.shape): row.pred for row in r.rows}
    assert rows[("rotary.mul_cos", "512x128")].read_bytes == q + table
    assert rows[("rotary.roll", "512x128")].bytes == 2 * q
    assert rows[("rotary.addcmul", "512x128")].read_bytes == 2 * q + table


def test_fused_adamw_launches_match_the_profile():
    """torch's fused AdamW on TinyLlama (1.1e9 parameters): the H200 profile shows 53
    multi_tensor_apply launches; 1.1e9 / (320 x 65536) rounds up to 53."""
    spec = load_model("llama2-7b", parse_overrides(TINYLLAMA))
    total = count_params(spec).total
    assert adamw_launches(total, step_param_tensors(spec)) == 53
    r = _torch(spec, phase="train", batch=4, seq=2048, master_weights=False)
    adam = [row for row in r.rows if row.pred.name == "adamw"]
    assert adam[0].count == 53
    # bf16 states: read weight, gradient, m, v (8 B), write weight, m, v (6 B) per parameter
    assert sum(row.count * row.pred.bytes for row in adam) == pytest.approx(14 * total, rel=1e-3)


def test_logits_last_prices_one_position_per_sequence():
    spec = load_model("llama2-7b")
    every = predict_model(spec, H200, RooflineOptions(phase="prefill", batch=2, seq=512))
    last = predict_model(spec, H200, RooflineOptions(phase="prefill", batch=2, seq=512, logits="last"))
    head = {r.pred.name: r.pred for r in last.rows}
    assert head["lm_head"].shape == "2x32000x4096"
    # model FLOPs lose the lm_head of the other 2 x 511 positions: 2 x 1022 x 4096 x 32000
    assert every.model_flops - last.model_flops == 2 * 1022 * 4096 * 32000
    assert last.time_s < every.time_s
    with pytest.raises(MlsysError, match="logits last"):
        predict_model(spec, H200, RooflineOptions(phase="train", logits="last"))


MODELS = ["llama2-7b", "gpt2", "phi-2", "gemma2-9b", "falcon-7b", "mixtral-8x7b", "qwen2.5-7b", "pythia-1.4b"]
PHASES = [dict(phase="decode", context=1000, batch=4), dict(phase="prefill", seq=512, batch=2),
          dict(phase="train", seq=512, batch=1)]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("shape", PHASES, ids=lambda s: s["phase"])
def test_torch_kernels_are_more_kernels_and_never_less_time(model, shape):
    spec = load_model(model)
    fused = predict_model(spec, H200, RooflineOptions(check_fit=False, **shape))
    torch = _torch(spec, **shape)
    assert torch.kernels > fused.kernels and torch.time_s >= fused.time_s
    for r in torch.rows:
        assert r.count >= 1 and r.pred.predicted_s >= 0 and r.pred.bytes >= 0
    passes = sum(torch.pass_s(p) for p in ("forward", "backward", "recompute", "optimizer"))
    assert passes == pytest.approx(torch.ops_s, rel=1e-12)
    gpu = torch.ops_s + torch.comm_s - torch.comm_hidden_s
    assert torch.time_s == pytest.approx(max(gpu, torch.host_path_s), rel=1e-12)  # eager training: host path
    t = torch.totals()
    assert t["compute_s"] >= 0 and t["overhead_s"] == pytest.approx(torch.kernels * H200.launch_s)


def test_a_slower_gemm_stream_never_speeds_a_step_up():
    spec = load_model("llama2-7b")
    opts = RooflineOptions(phase="decode", context=2048, impl="torch")
    slow = predict_model(spec, H200.with_efficiency(matmul_skinny=0.6), opts)
    assert slow.time_s > predict_model(spec, H200, opts).time_s


def test_profiler_sorting_of_kernel_names():
    assert kernel_kind("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16>") == "memory"
    assert kernel_kind("void cudnn::fusion::lean_reduction_kernel<false, false, false>(void*)") == "memory"
    assert kernel_kind("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_TNT") == "matmul"
    assert kernel_kind("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16") == "attention"
    # kernels whose names hold a lambda's '#' are kernels; a profiler range's copy is not
    assert not _range_copy("void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel("
                           "at::TensorIteratorBase&)::{lambda()#1}::operator()() const>(int)")
    assert _range_copy("Optimizer.step#AdamW.step")


def test_cli_impl_logits_and_master_weights(run_cli):
    args = ("roofline", "llama2-7b", "--gpu", "H200", "--seq", "512")
    fused = run_cli.json(*args)
    torch = run_cli.json(*args, "--impl", "torch", "--logits", "last")
    assert fused["totals"]["kernels"] == 483 and fused["totals"]["impl"] == "fused"
    assert torch["totals"]["impl"] == "torch" and torch["totals"]["logits"] == "last"
    assert torch["totals"]["kernels"] > 483 and any("--impl torch" in n for n in torch["notes"])
    head = [op for op in torch["ops"] if op["name"] == "lm_head"]
    assert head[0]["shape"] == "1x32000x4096" and head[0]["shape_class"] == "skinny"
    train = ("roofline", "llama2-7b", "--gpu", "H200", "--phase", "train", "--seq", "512")
    adam = [op for op in run_cli.json(*train, "--no-master-weights")["ops"] if op["name"] == "adamw"][0]
    master = [op for op in run_cli.json(*train)["ops"] if op["name"] == "adamw"][0]
    # bf16 states: 8 B read + 6 B written per parameter, against 16 + (12 + 2) with fp32 master weights
    assert adam["bytes"] / master["bytes"] == pytest.approx(14 / 30)


def test_cli_refuses_last_logits_in_training(run_cli):
    code, _, err = run_cli("roofline", "llama2-7b", "--phase", "train", "--logits", "last")
    assert code == 2 and "logits last" in err and "Traceback" not in err


INDEPENDENT_H200_MS = [  # an independent plain-torch Llama on one H200 (bf16, SDPA, decode under CUDA graphs,
    # fused AdamW), measured outside this repository (the table of the whole-model validation issue), and the
    # same cases of `mlsys bench model` on a lent H200 (reports/models/h200.jsonl, torch 2.11; None: not run)
    ("llama2-7b", dict(phase="prefill", seq=512, logits="last"), 12.2, 13.32),
    ("llama2-7b", dict(phase="prefill", seq=2048, logits="last"), 46.7, 49.68),
    ("llama2-7b", dict(phase="prefill", seq=2048, batch=8, logits="last"), 373, 410.0),
    ("llama2-7b", dict(phase="decode", context=2048), 5.02, 5.99),
    ("llama2-7b", dict(phase="decode", context=2048, batch=16), 8.68, 10.34),
    ("llama2-7b", dict(phase="decode", context=2048, batch=64), 19.9, 21.63),
    ("tinyllama", dict(phase="train", seq=2048, batch=4, master_weights=False), 120, None),
    ("tinyllama", dict(phase="train", seq=2048, batch=8, master_weights=False), 233, None),
]


@pytest.mark.parametrize("model,shape,measured_ms,ours_ms", INDEPENDENT_H200_MS)
def test_torch_kernels_price_an_independent_runner_within_17_percent(model, shape, measured_ms, ours_ms):
    """Datasheet x default efficiencies, uncalibrated: within +-17% of every step the independent runner
    measured (-16.9% to +2.7% once the stream's gap between kernels is priced) and within
    +-10% of our own runner on a lent H200 (-4.1% to +8.0%). The independent runner is 7-19% faster than
    ours on the same cases, the compute-bound prefill B8 S2048 included (373 vs 410 ms), so not only
    through fewer kernels: its card or software ran faster; before the gap was priced it was -10.2% to
    +3.0%."""
    spec = load_model("llama2-7b", parse_overrides(TINYLLAMA) if model == "tinyllama" else None)
    predicted_ms = _torch(spec, **shape).time_s * 1e3
    assert abs(measured_ms - predicted_ms) / predicted_ms < 0.17
    if ours_ms is not None:
        assert abs(ours_ms - predicted_ms) / predicted_ms < 0.10


def test_a_long_reduction_splits_only_a_skinny_gemm():
    """cuBLAS splits a long reduction (K >= 2 N) and launches a splitKreduce only for skinny GEMMs:
    phi-2's down_proj (N = 2560, K = 10240 = 4 N) in decode (one row per sequence) is split and
    reduced, in a B1 S1024 prefill (1024 rows) it runs as one GEMM kernel (H100 profile: 32
    nvjet GEMMs for 32 layers, no splitKreduce). Per layer of phi-2 prefill, by hand: 6 GEMMs and
    no reduction; 32 layers + the lm_head = 193 GEMM kernels, the profile's count."""
    from mlsyscalc.calc.roofline.ops import predict_matmul
    from mlsyscalc.calc.roofline.cublas_split import SPLIT_LONG_K_MAX_ROWS, cublas_splits

    sms = H200.sm_count
    assert SPLIT_LONG_K_MAX_ROWS == 128
    # 127 rows: 40 column tiles of 64 x 4 row tiles of 32 = 160 >= 66, so only K >= 2 N splits it
    skinny, thick = predict_matmul(127, 2560, 10240, "bf16", H200), predict_matmul(128, 2560, 10240, "bf16", H200)
    assert skinny.tiling.split > 1 and cublas_splits(skinny, sms) is True
    assert thick.tiling is None or cublas_splits(thick, sms) is False
    r = _torch(load_model("phi-2"), phase="prefill", seq=1024)
    names = {row.pred.name: row.count for row in r.rows}
    assert not [n for n in names if n.endswith("splitk_reduce")]
    assert sum(row.count for row in r.rows if row.pred.kind == "matmul") == 6 * 32 + 1
    d = _torch(load_model("phi-2"), phase="decode", context=2048)
    assert {row.pred.name: row.count for row in d.rows}["down_proj.splitk_reduce"] == 32


@pytest.mark.parametrize("model,batch,per_layer", [
    ("phi-2", 1, ("down_proj",)),  # 2560 x 2560: 40 tiles, K = 2560 < 4096; K = 10240 >= 2 N
    ("qwen2.5-7b", 1, ("k_proj", "v_proj", "down_proj")),  # q/o 3584 x 3584: K < 4096; k/v N = 512: K >= 2 N
    ("qwen2.5-7b", 16, ("q_proj", "k_proj", "v_proj", "o_proj", "down_proj")),  # 16 rows: K = 3584 splits
    ("llama2-7b", 32, ("down_proj",)),  # 4096 x 4096 at 32 rows: 64 x 2 = 128 tiles of 16 rows >= 66
])
def test_decode_split_k_reductions_per_layer_match_the_profiles(model, batch, per_layer):
    """cuBLAS's splitKreduce launches per layer in the H100 decode profiles (reports/models, torch
    2.11: phi-2 B1 32 for 32 layers; qwen2.5-7b B4 56 + 28 for 28 layers, B16 84 + 56; llama2-7b
    B32 32), by the rule of cublas_splits worked out by hand for each linear."""
    spec = load_model(model)
    r = _torch(spec, phase="decode", batch=batch, context=2048)
    reduced = {row.pred.name.removesuffix(".splitk_reduce"): row.count for row in r.rows
               if row.pred.name.endswith(".splitk_reduce")}
    assert reduced == {name: spec.num_layers for name in per_layer}
