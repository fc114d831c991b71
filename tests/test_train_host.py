"""`mlsys train --framework`: the host's issue time (calc.train.host) against hand arithmetic and its properties."""

from __future__ import annotations

import pytest

from mlsyscalc.calc.train.host import FRAMEWORKS, FrameworkCosts, StageWork, exposed_host_s, host_paths

H200 = ("--gpu", "H200")
# A llama layer's kernels as the roofline prices them: forward 7 matmuls (q, k, v, o, gate, up, down), 2 norms,
# rotary, SiLU x up, 2 residual adds, attention = 14; backward a dgrad and a wgrad per matmul (14), 2 norm, rotary,
# act, 2 residual backwards and attention = 21. The ends: embedding, final norm, lm_head forward (3); embedding,
# final norm, lm_head dgrad and wgrad backward (4). Parameter tensors: 7 weights + 2 norms a layer; embedding,
# final norm and lm_head.
LAYER_OPS, LAYER_MATMULS, LAYER_TENSORS = 14 + 21, 7 + 14, 9
# the ends: the embedding (a forward, and its backward's sort, fill, scatter and main-gradient add: 5); the final norm
# (2), lm_head (3: forward, dgrad, wgrad) and Megatron's fp32 loss (6 forward, 2 backward): 13
FIRST_OPS, LAST_OPS, LAST_MATMULS = 5, 13, 3


def _train(run_cli, *args):
    return run_cli.json("train", "llama2-7b", "--gpus", "2", *H200, "--seq", "2048", "--no-sp", *args)


def test_work_counts_are_the_layer_kernels(run_cli):
    """32 layers of 35 kernels plus the 18 of the ends; 21 matmuls a layer plus lm_head's 3; 9 tensors a layer plus 3."""
    data = _train(run_cli, "--global-batch", "2", "--micro-batch", "2", "--tp", "2")
    assert data["host_work"] == {"ops": 32 * LAYER_OPS + FIRST_OPS + LAST_OPS, "matmuls": 32 * LAYER_MATMULS + LAST_MATMULS,
                                 "layers": 32, "tensors": 32 * LAYER_TENSORS + 3}
    # pipeline of 2: the last stage (16 layers, final norm and lm_head) issues the most
    pp = _train(run_cli, "--global-batch", "4", "--micro-batch", "1", "--pp", "2")
    assert pp["host_work"] == {"ops": 16 * LAYER_OPS + LAST_OPS, "matmuls": 16 * LAYER_MATMULS + LAST_MATMULS,
                               "layers": 16, "tensors": 16 * LAYER_TENSORS + 2}
    # full recomputation issues every layer's forward again: + 14 kernels (7 matmuls) a layer
    full = _train(run_cli, "--global-batch", "2", "--micro-batch", "2", "--tp", "2", "--recompute", "full")
    assert full["host_work"]["ops"] == data["host_work"]["ops"] + 32 * 14
    assert full["host_work"]["matmuls"] == data["host_work"]["matmuls"] + 32 * 7


def test_torch_tp_host_path_by_hand(run_cli):
    """TP 2, one micro-batch: host_fb = 1138 op_s + 675 dtensor_matmul_s; host_opt = 291 dtensor_param_s; the step
    is the GPU's parts plus what each host path adds beyond them."""
    c = FRAMEWORKS["torch"]
    data = _train(run_cli, "--global-batch", "2", "--micro-batch", "2", "--tp", "2", "--framework", "torch")
    fb, opt = 1138 * c.op_s + 675 * c.dtensor_matmul_s, 291 * c.dtensor_param_s
    assert data["host_path_s"] == pytest.approx({"forward_backward": fb, "optimizer": opt})
    gpu = _train(run_cli, "--global-batch", "2", "--micro-batch", "2", "--tp", "2")
    gpu_fb = gpu["step_time_s"] - gpu["breakdown"]["optimizer_s"]
    assert gpu["breakdown"]["host_s"] == 0 and gpu["framework"] == "megatron"
    assert "fitted" in data["framework_source"] and "measured" in data["framework_source"]
    assert data["step_time_s"] == pytest.approx(max(fb, gpu_fb) + max(opt, data["breakdown"]["optimizer_s"]))
    assert data["step_time_s"] == pytest.approx(sum(data["breakdown"].values()), rel=1e-12)


def test_torch_fsdp_and_ddp_host_paths_by_hand(run_cli):
    """ZeRO-3 over 2 GPUs, 2 micro-batches: host_fb = 2 x (1138 op_s + 32 fsdp_layer_s), no DTensor matmuls;
    DDP (ZeRO-0, tp 1): plain eager, host_fb = 2 x 1138 op_s and no optimizer host path."""
    c = FRAMEWORKS["torch"]
    fsdp = _train(run_cli, "--global-batch", "4", "--micro-batch", "1", "--zero", "3", "--framework", "torch")
    assert fsdp["host_path_s"] == pytest.approx({"forward_backward": 2 * (1138 * c.op_s + 32 * c.fsdp_layer_s),
                                                 "optimizer": 291 * c.dtensor_param_s})
    ddp = _train(run_cli, "--global-batch", "4", "--micro-batch", "1", "--framework", "torch")
    assert ddp["host_path_s"] == pytest.approx({"forward_backward": 2 * 1138 * c.op_s, "optimizer": 0.0})


@pytest.fixture
def fused_kernels(monkeypatch):
    """Both frameworks priced with the fused kernel list, so a test sees the torch framework's other terms alone."""
    import mlsyscalc.calc.train.step as train

    monkeypatch.setattr(train, "kernel_impl", lambda framework, dtype: "fused")


@pytest.mark.parametrize("layout", [("--tp", "2"), ("--zero", "3"), ("--pp", "2"), ()])
def test_torch_adds_its_host_overlap_and_optimizer_and_megatron_is_unchanged(run_cli, fused_kernels, layout):
    """The default (megatron) is the step without the torch terms: with the kernels priced alike (the fixture),
    torch - megatron = host_s + overlap_slowdown x hidden seconds (comm total - exposed, dims overlapped) + the
    optimizer's difference (torch's cast, step and copy: 40 bytes a parameter against Megatron's 30; FSDP2's fp32
    shards 28) + TP's extra backward all-reduces (one per column-parallel linear: 7 a llama layer against 4; TP is
    not overlapped by default). Both reduce gradients in bf16 (--grad-reduce), so their DP traffic is the same."""
    base = ("--global-batch", "4", "--micro-batch", "1", "--grad-reduce", "bf16", *layout)
    default = _train(run_cli, *base)
    assert _train(run_cli, *base, "--framework", "megatron") == default
    torch = _train(run_cli, *base, "--framework", "torch")
    hidden = sum(torch["comm_total_s"][d] - torch["breakdown"][f"{d}_comm_s"] for d in torch["overlap"])
    optimizer = torch["breakdown"]["optimizer_s"] - default["breakdown"]["optimizer_s"]
    assert (optimizer < 0) == ("--zero" in layout) and optimizer != 0
    tp = torch["breakdown"]["tp_comm_s"] - default["breakdown"]["tp_comm_s"]
    assert tp == pytest.approx(default["breakdown"]["tp_comm_s"] * 3 / 4, rel=1e-12)  # 7 / 4 of Megatron's
    extra = torch["breakdown"]["host_s"] + FRAMEWORKS["torch"].overlap_slowdown * hidden + optimizer + tp
    assert torch["step_time_s"] - default["step_time_s"] == pytest.approx(extra, abs=1e-12)
    assert all(v >= 0 for v in torch["breakdown"].values())


def test_exposed_host_is_the_excess_of_each_path():
    """max(0, 0.3 - 0.2) + max(0, 0.01 - 0.02) = 0.1; arrays elementwise (plan)."""
    import numpy as np

    assert exposed_host_s((0.3, 0.01), 0.2, 0.02) == pytest.approx(0.1)
    got = exposed_host_s((np.array([0.1, 0.5]), 0.04), np.array([0.2, 0.2]), np.array([0.01, 0.05]))
    assert got == pytest.approx([0.03, 0.3])


def test_host_paths_pick_the_terms_of_the_layout():
    """op 1, DTensor matmul 10, FSDP layer 100, DTensor tensor 1000 (seconds): ops 5, matmuls 2, layers 3,
    tensors 4, m = 2. tp 1 ZeRO-0: 2 x 5 = 10, no optimizer term; tp 2: 2 x (5 + 20) = 50, 4000; ZeRO-3:
    2 x (5 + 300) = 610, 4000; both: 2 x (5 + 20 + 300) = 650."""
    costs, work = FrameworkCosts(1.0, 10.0, 100.0, 1000.0), StageWork(5, 2, 3, 4)
    assert host_paths(work, costs, micro_batches=2, tp=1, zero=0) == (10, 0)
    assert host_paths(work, costs, micro_batches=2, tp=2, zero=1) == (50, 4000)
    assert host_paths(work, costs, micro_batches=2, tp=1, zero=3) == (610, 4000)
    assert host_paths(work, costs, micro_batches=2, tp=2, zero=3) == (650, 4000)


def test_unknown_framework_exits_2(run_cli):
    code, _, err = run_cli("train", "llama2-7b", "--gpus", "1", *H200, "--framework", "jax")
    assert code == 2 and "jax" in err


def test_torch_interleaved_pipeline_loses_the_p2p_share(run_cli):
    """pp 2, vp 2, dp 1 (no overlapped traffic): contention = 0.129 x (compute + bubble) with torch, 0 with megatron;
    1F1B (vp 1) has none."""
    base = ("--global-batch", "4", "--micro-batch", "1", "--pp", "2")
    inter = _train(run_cli, *base, "--vp", "2", "--framework", "torch")["breakdown"]
    assert inter["contention_s"] == pytest.approx(FRAMEWORKS["torch"].p2p_slowdown * (inter["compute_s"] + inter["bubble_s"]))
    assert _train(run_cli, *base, "--vp", "2")["breakdown"]["contention_s"] == 0
    assert _train(run_cli, *base, "--framework", "torch")["breakdown"]["contention_s"] == 0


def test_one_framework_list_for_memory_and_host_time():
    """`--framework` means one thing in `mlsys train`: the memory rules and the host costs know the same names."""
    from mlsyscalc.calc.memory.schedule import FRAMEWORKS as MEMORY_FRAMEWORKS
    from mlsyscalc.calc.train.host import DEFAULT_FRAMEWORK, FRAMEWORKS as HOST_FRAMEWORKS

    assert tuple(HOST_FRAMEWORKS) == MEMORY_FRAMEWORKS == ("megatron", "torch")
    assert DEFAULT_FRAMEWORK == "megatron"


def test_ddp_contention_by_hand(run_cli):
    """DDP over 2 GPUs: contention = (16 / 132 + 0.726) x hidden all-reduce seconds with torch, 16 / 132 x hidden
    with megatron (H200: 132 SMs); the all-reduce is hidden behind the last backward."""
    base = ("--global-batch", "4", "--micro-batch", "2")
    for framework, share in (("megatron", 16 / 132), ("torch", 16 / 132 + 0.726)):
        step = _train(run_cli, *base, "--framework", framework)
        hidden = step["comm_total_s"]["dp"] - step["breakdown"]["dp_comm_s"]
        assert hidden > 0
        assert step["breakdown"]["contention_s"] == pytest.approx(share * hidden, rel=1e-12)


def test_calibration_torch_host_replaces_the_costs(run_cli, tmp_path):
    """A calibration file's torch_host fields replace torch's costs (here a DTensor matmul of 378 us and a free
    op): host_fb of tp 2, 2 micro-batches = 2 x matmuls x 378 us by hand; megatron ignores them; bad keys exit 2."""
    import json

    from mlsyscalc.calc.roofline.calibration import read_calibration

    record = read_calibration("model_specs/calibrations/h200-fused.json")
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({**record, "torch_host": {"dtensor_matmul_s": 378e-6, "op_s": 0.0}}))
    args = ("--global-batch", "4", "--micro-batch", "1", "--tp", "2", "--dp", "1", "--calibration", str(path))
    data = run_cli.json("train", "llama2-7b", "--gpus", "2", "--gpu", "H200", "--seq", "2048", *args,
                        "--framework", "torch")
    matmuls = data["host_work"]["matmuls"]
    assert data["host_path_s"]["forward_backward"] == pytest.approx(4 * matmuls * 378e-6, rel=1e-12)
    assert data["host_costs"]["dtensor_matmul_s"] == 378e-6 and data["host_costs"]["fsdp_layer_s"] == FRAMEWORKS["torch"].fsdp_layer_s
    assert "torch_host" in data["framework_source"]
    mega = run_cli.json("train", "llama2-7b", "--gpus", "2", "--gpu", "H200", "--seq", "2048", *args)
    assert mega["host_path_s"] == {"forward_backward": 0.0, "optimizer": 0.0}
    path.write_text(json.dumps({**record, "torch_host": {"dtensor_matmul": 1e-4}}))
    code, out, err = run_cli("train", "llama2-7b", "--gpus", "2", "--gpu", "H200", "--seq", "2048", *args)
    assert code == 2 and "torch_host keys" in err and out == ""


def test_plan_takes_the_calibration_host_costs(run_cli, tmp_path):
    """plan --framework torch with a torch_host calibration prices its best layout as train does with it."""
    import json

    from mlsyscalc.calc.roofline.calibration import read_calibration

    record = read_calibration("model_specs/calibrations/h200-fused.json")
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({**record, "torch_host": {"dtensor_matmul_s": 1e-3, "op_s": 1e-4}}))
    base = ("llama2-7b", "--gpus", "2", "--gpu", "H200", "--seq", "2048", "--global-batch", "4",
            "--calibration", str(path), "--framework", "torch")
    best = run_cli.json("plan", *base, "--top", "1", "--quiet", "--fix", "tp=2")["candidates"][0]
    lay = best["layout"]
    one = run_cli.json("train", *base, "--tp", "2", "--pp", str(lay["pp"]), "--micro-batch", str(lay["micro_batch"]),
                       "--zero", str(lay["zero"]), "--recompute", lay["recompute"], "--vp", str(lay["vp"]))
    assert one["host_costs"]["dtensor_matmul_s"] == 1e-3 and one["breakdown"]["host_s"] > 0
    assert one["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-12)


def test_torch_optimizer_moves_the_bytes_of_its_cast_step_and_copy():
    """Plain torch's mixed precision (scripts/train_measure.py's MixedAdamW) at bf16: cast the gradient (read 2,
    write 4), fused AdamW on fp32 (read 16, write 12), copy back (read 4, write 2) = (22, 18) bytes a parameter;
    FSDP2 steps fp32 shards with fp32 gradients: (16, 12). Megatron's fused optimizer: (16, 14). Priced as one
    memory-bound op, so a billion parameters take (22 + 18) / (16 + 14) of Megatron's time less the fixed cost."""
    from mlsyscalc.calc.roofline.calibration import load_ceilings
    from mlsyscalc.calc.roofline.training import state_bytes, torch_mixed_state_bytes
    from mlsyscalc.calc.train.step import optimizer_s

    assert torch_mixed_state_bytes("bf16", 0) == (22, 18) and torch_mixed_state_bytes("bf16", 1) == (22, 18)
    assert torch_mixed_state_bytes("bf16", 3) == (16, 12) and state_bytes("bf16") == (16, 14)
    ceil = load_ceilings("H200")
    counts = ((10**9, 0),)
    megatron, torch = (optimizer_s(counts, 0, 1, 1, "bf16", ceil, f) for f in ("megatron", "torch"))
    fixed = ceil.launch_s + ceil.gap_s  # the kernel's fixed cost and the stream's gap before it
    assert (torch - fixed) / (megatron - fixed) == pytest.approx(40 / 30, rel=1e-9)
    # ZeRO-3 over 4 ranks: a quarter of the parameters, 28 bytes each
    fsdp = optimizer_s(counts, 3, 4, 1, "bf16", ceil, "torch")
    assert (fsdp - fixed) / (megatron - fixed) == pytest.approx(28 / 30 / 4, rel=1e-9)


@pytest.mark.parametrize("layout", [("--tp", "2"), ("--zero", "3"), ("--pp", "2"), ("--cp", "2")])
def test_torch_prices_plain_torch_kernels_and_counts_host_work_in_fused_ones(run_cli, layout):
    """--framework torch times the step's kernels with plain PyTorch's list (calc.roofline.model --impl torch: the
    separate elementwise, norm and cast kernels Megatron-LM fuses), so its compute is longer; the host's work stays
    counted in the fused list's kernels, the unit its costs were fitted in (same host_work as megatron's)."""
    from mlsyscalc.calc.roofline.calibration import load_ceilings
    from mlsyscalc.calc.train.step import train_parts
    from mlsyscalc.calc.train.options import TrainStepOptions
    from mlsyscalc.calc.train.parts import pipeline_stages, slowest_stage
    from mlsyscalc.specs.lookup import load_model

    base = ("--global-batch", "4", "--micro-batch", "1", *layout)
    torch, megatron = _train(run_cli, *base, "--framework", "torch"), _train(run_cli, *base)
    assert (torch["kernels"], megatron["kernels"]) == ("torch", "fused")
    assert torch["host_work"] == megatron["host_work"]
    assert torch["breakdown"]["compute_s"] > 1.05 * megatron["breakdown"]["compute_s"]
    lay = dict(zip(layout[::2], map(int, layout[1::2])))
    pp, tp, cp = lay.get("--pp", 1), lay.get("--tp", 1), lay.get("--cp", 1)
    opts = TrainStepOptions(gpus=2, seq=2048, global_batch=4, micro_batch=1, tp=tp, pp=pp, cp=cp,
                            zero=lay.get("--zero", 0), sp=False, framework="torch")
    spec, ceil = load_model("llama2-7b"), load_ceilings("H200")
    for impl, data in (("torch", torch), ("fused", megatron)):
        f, b, _ = slowest_stage(train_parts(spec, ceil, opts, impl), pipeline_stages(spec, pp, 1), "none")
        assert data["breakdown"]["compute_s"] == pytest.approx(opts.num_micro_batches * (f + b), rel=1e-12)


def test_fp8_is_priced_with_transformer_engines_fused_kernels_under_either_framework(run_cli):
    """--dtype fp8 is Transformer Engine's: its kernels are the fused list whatever --framework says."""
    base = ("--global-batch", "4", "--micro-batch", "1", "--dtype", "fp8")
    torch, megatron = _train(run_cli, *base, "--framework", "torch"), _train(run_cli, *base)
    assert torch["kernels"] == megatron["kernels"] == "fused"
    assert torch["breakdown"]["compute_s"] == pytest.approx(megatron["breakdown"]["compute_s"], rel=1e-12)
