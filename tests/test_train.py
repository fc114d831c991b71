"""`mlsys train`: one step of a full layout against the calculators it is built from and hand arithmetic."""

from __future__ import annotations

import json

import pytest

from mlsyscalc.calc.roofline.calibration import load_ceilings
from mlsyscalc.calc.train.step import train_step
from mlsyscalc.calc.train.options import TrainStepOptions
from mlsyscalc.specs.lookup import load_model

A100 = ("--gpu", "A100-80GB-SXM")
PARTS = ("compute_s", "fp8_scaling_s", "contention_s", "bubble_s", "optimizer_s", "host_s", "tp_comm_s", "cp_comm_s", "dp_comm_s", "pp_comm_s", "ep_comm_s")


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_one_gpu_equals_roofline_train_step(run_cli, recompute):
    """One GPU, one micro-batch: the step is `mlsys roofline MODEL --phase train` (whose rows include
    the AdamW step) and nothing else."""
    roof = run_cli.json("roofline", "llama2-7b", "--phase", "train", "--batch", "2", "--seq", "1024",
                        "--gpu", "H100-SXM", "--recompute", recompute)
    step = run_cli.json("train", "llama2-7b", "--gpus", "1", "--gpu", "H100-SXM", "--seq", "1024",
                        "--global-batch", "2", "--micro-batch", "2", "--recompute", recompute, "--no-clip-grad")
    assert step["step_time_s"] == pytest.approx(roof["totals"]["predicted_s"], rel=1e-9)
    assert step["breakdown"]["optimizer_s"] == pytest.approx(roof["totals"]["optimizer_s"], rel=1e-9)
    assert step["breakdown"]["bubble_s"] == 0 and step["layout"]["num_micro_batches"] == 1


def test_json_contract_and_parts_add_up(run_cli):
    data = run_cli.json("train", "llama2-70b", "--gpus", "1024", *A100, "--seq", "4096", "--global-batch", "1024",
                        "--tp", "8", "--pp", "8", "--vp", "2", "--recompute", "selective", "--zero", "1")
    for key in ("step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "hfu", "memory_bytes_per_gpu", "fits",
                "breakdown", "layout"):
        assert key in data
    assert set(data["breakdown"]) == set(PARTS)
    assert data["step_time_s"] == pytest.approx(sum(data["breakdown"].values()), rel=1e-12)
    assert all(v >= 0 for v in data["breakdown"].values())
    assert data["layout"] == {"tp": 8, "pp": 8, "dp": 16, "cp": 1, "ep": 1, "etp": 8, "edp": 16, "vp": 2, "sp": True, "micro_batch": 1,
                              "num_micro_batches": 64, "zero": 1, "recompute": "selective", "dtype": "bf16"}
    assert data["tokens_per_s"] == pytest.approx(1024 * 4096 / data["step_time_s"])
    # hand arithmetic: MFU = model FLOPs / (time x GPUs x A100 bf16 dense 312 TFLOP/s)
    flops = run_cli.json("flops", "llama2-70b", "--batch", "1024", "--seq", "4096", "--causal")
    assert data["model_flops"] == flops["train_step_flops"] == 3 * flops["forward_flops"]
    assert data["mfu"] == pytest.approx(flops["train_step_flops"] / (data["step_time_s"] * 1024 * 312e12))
    assert data["tflops_per_gpu"] == pytest.approx(data["mfu"] * 312e12)
    # selective recompute repeats the attention core's forward: HFU counts it
    extra = flops["breakdown"]["attention_core"]
    assert data["hfu"] == pytest.approx(data["mfu"] * (flops["train_step_flops"] + extra) / flops["train_step_flops"])


def test_bubble_is_p_minus_1_over_v_m(run_cli):
    """Narayanan et al. 2021: bubble / compute = (p - 1) / (v m); here p = 4, v = 2, m = 8: 3/16."""
    data = run_cli.json("train", "llama2-13b", "--gpus", "32", *A100, "--seq", "2048", "--global-batch", "32",
                        "--tp", "2", "--pp", "4", "--vp", "2", "--micro-batch", "1")
    assert data["layout"]["num_micro_batches"] == 8 and data["layout"]["dp"] == 4
    assert data["breakdown"]["bubble_s"] / data["breakdown"]["compute_s"] == pytest.approx(3 / 16)
    plain = run_cli.json("train", "llama2-13b", "--gpus", "32", *A100, "--seq", "2048", "--global-batch", "32",
                         "--tp", "2", "--pp", "4", "--micro-batch", "1")
    assert plain["breakdown"]["bubble_s"] / plain["breakdown"]["compute_s"] == pytest.approx(3 / 8)


@pytest.mark.parametrize("layout", [
    ("--tp", "8", "--pp", "4", "--zero", "1", "--recompute", "selective"),
    ("--tp", "4", "--pp", "2", "--cp", "2", "--zero", "3", "--recompute", "full", "--no-sp"),
])
def test_memory_equals_memory_train(run_cli, layout):
    """Memory per GPU is `mlsys memory train` of the same layout (1F1B: no interleaving extra)."""
    step = run_cli.json("train", "llama2-70b", "--gpus", "128", *A100, "--seq", "4096", "--global-batch", "64",
                        *layout)
    lay = step["layout"]
    mem = run_cli.json("memory", "train", "llama2-70b", "--seq", "4096", "--batch", "1", "--grad-accum",
                       str(lay["num_micro_batches"]), "--dp", str(lay["dp"]), "--tp", str(lay["tp"]), "--pp",
                       str(lay["pp"]), "--cp", str(lay["cp"]), "--zero", str(lay["zero"]), "--recompute",
                       lay["recompute"], *(("--sp",) if lay["sp"] else ()))
    assert step["memory_bytes_per_gpu"] == mem["total_bytes"]
    assert step["fits"] == (mem["total_bytes"] <= 0.9 * 80e9 // 1)


def test_interleaving_adds_korthikanti_activation_share():
    """Korthikanti et al. 2022, 4.2.3: interleaving keeps (1 + (p-1)/(p v)) x the first stage's activations."""
    spec, ceil = load_model("llama2-13b"), load_ceilings("A100-80GB-SXM")
    base = dict(gpus=32, seq=2048, global_batch=64, tp=2, pp=4)
    one = train_step(spec, ceil, "dgx-a100", TrainStepOptions(**base))
    two = train_step(spec, ceil, "dgx-a100", TrainStepOptions(**base, vp=2))
    detail = one.memory.peak_stage.detail
    in_flight = detail["activations_layers"] + detail["activations_embedding_head"]
    assert one.memory.peak_stage.stage == 0 and one.memory.peak_stage.micro_batches_in_flight == 4
    assert two.memory_bytes_per_gpu - one.memory_bytes_per_gpu == round(in_flight * 3 / 8)


def _ideal_cluster(tmp_path) -> str:
    path = tmp_path / "ideal.json"
    link = {"bandwidth_GBps": 1e9, "latency_us": 0}
    path.write_text(json.dumps({"name": "ideal", "gpu": "H100-SXM", "gpus_per_node": 8,
                                "intra_node": {"link": "ideal", **link}, "inter_node": {"link": "ideal", **link}}))
    return str(path)


def test_more_gpus_never_slower_per_token_with_ideal_comm(run_cli, tmp_path):
    cluster, rates = _ideal_cluster(tmp_path), []
    for gpus in (8, 16, 32, 64):
        data = run_cli.json("train", "llama2-7b", "--gpus", str(gpus), "--cluster", cluster, "--seq", "2048",
                            "--global-batch", "64", "--tp", "2", "--pp", "2")
        assert data["breakdown"]["dp_comm_s"] + data["breakdown"]["tp_comm_s"] < 1e-6
        rates.append(data["tokens_per_s"])
    assert rates == sorted(rates) and rates[-1] > 3 * rates[0]


def test_overlap_hides_dp_traffic_only_when_asked(run_cli):
    args = ("train", "llama2-7b", "--gpus", "64", "--gpu", "H100-SXM", "--seq", "2048", "--global-batch", "64", "--tp", "1")
    hidden = run_cli.json(*args, "--overlap", "dp")
    shown = run_cli.json(*args, "--overlap", "none")
    assert shown["breakdown"]["dp_comm_s"] == pytest.approx(shown["comm_total_s"]["dp"])
    assert hidden["breakdown"]["dp_comm_s"] < shown["breakdown"]["dp_comm_s"]
    assert hidden["comm_total_s"]["dp"] == pytest.approx(shown["comm_total_s"]["dp"])


def test_moe_with_expert_parallel_and_mla(run_cli):
    moe = run_cli.json("train", "mixtral-8x7b", "--gpus", "64", "--gpu", "H100-SXM", "--seq", "4096",
                       "--global-batch", "128", "--tp", "2", "--pp", "4", "--ep", "8", "--recompute", "full")
    assert moe["breakdown"]["ep_comm_s"] > 0 and moe["layout"]["ep"] == 8
    assert moe["hfu"] > moe["mfu"] > 0
    mla = run_cli.json("train", "deepseek-v3", "--set", "num_hidden_layers=8", "--gpus", "64", "--gpu", "H100-SXM",
                       "--seq", "4096", "--global-batch", "64", "--tp", "4", "--pp", "2", "--ep", "8")
    assert mla["step_time_s"] == pytest.approx(sum(mla["breakdown"].values()))


@pytest.mark.parametrize("args,rule", [
    (("--gpus", "96", "--tp", "8", "--pp", "8"), "gpus % (tp*pp*cp)"),
    (("--gpus", "64", "--tp", "8", "--dp", "4"), "tp*pp*dp*cp == gpus"),
    (("--gpus", "64", "--tp", "16", "--pp", "1"), "TP within a node"),
    (("--gpus", "64", "--tp", "8", "--pp", "2", "--dp", "2"), "tp*pp*dp*cp == gpus"),
    (("--gpus", "48", "--tp", "8", "--pp", "3"), "layers % (pp*vp)"),
    (("--gpus", "64", "--tp", "8", "--global-batch", "12"), "global_batch % (dp*micro_batch)"),
    (("--gpus", "64", "--tp", "8", "--pp", "2", "--vp", "3"), "layers % (pp*vp)"),
    (("--gpus", "64", "--tp", "8", "--vp", "2"), "vp needs pp > 1"),
    (("--gpus", "64", "--tp", "8", "--ep", "2"), "no routed experts"),
    (("--gpus", "48", "--tp", "3"), "num_heads"),
])
def test_bad_layouts_exit_2_naming_the_rule(run_cli, args, rule):
    code, out, err = run_cli("train", "llama2-70b", *A100, "--seq", "4096", "--global-batch", "64", *args)
    assert code == 2 and rule in err and "Traceback" not in err and out == ""


@pytest.mark.parametrize("argv", [["train", "llama2-7b", "--gpus", "16", "--gpu", "H100-SXM", "--tp", "8",
                                   "--global-batch", "16", "--json"],
                                  ["plan", "gpt2", "--gpus", "4", "--gpu", "H100-SXM", "--seq", "1024",
                                   "--global-batch", "8", "--json"]])
def test_train_and_plan_are_import_light(argv):
    """No torch/triton/pandas/matplotlib on the calculator path; `train` answers in well under a second."""
    import subprocess
    import sys

    probe = (
        "import sys, io, time, contextlib\nfrom mlsyscalc.cli.main import main\nt = time.process_time()\n"
        f"sys.argv=['mlsys', *{argv!r}]\nbuf=io.StringIO()\n"
        "try:\n  with contextlib.redirect_stdout(buf): main()\nexcept SystemExit as e: assert e.code in (0, None), e.code\n"
        "print([m for m in ('torch','triton','pandas','matplotlib') if m in sys.modules], time.process_time() - t)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    heavy, seconds = out.strip().splitlines()[-1].rsplit("]", 1)
    assert heavy + "]" == "[]"
    assert argv[0] != "train" or float(seconds) < 2.0  # ~0.2 s alone; generous for a loaded CI box


def test_a_group_with_an_uneven_share_per_node_is_refused(run_cli):
    # 240 GPUs as tp 1 x pp 12 x dp 20 on 8-GPU nodes: data-parallel ranks 0-19 fill 2 nodes and half of a
    # third, which the collective model cannot split evenly; `plan` skips such layouts instead of failing
    code, _, err = run_cli("train", "gpt2", "--gpus", "240", "--cluster", "dgx-a100", "--seq", "1024",
                           "--global-batch", "240", "--micro-batch", "1", "--tp", "1", "--pp", "12")
    assert code == 2 and "rule whole groups per node: the dp group of 20 ranks" in err
    # 192 GPUs as pp 12 x dp 16: two whole nodes per data-parallel group
    assert run_cli.json("train", "gpt2", "--gpus", "192", "--cluster", "dgx-a100", "--seq", "1024",
                        "--global-batch", "192", "--micro-batch", "1", "--tp", "1", "--pp", "12")["layout"]["dp"] == 16
