"""The host probe (calc.train.probe, scripts/train_host_probe.py) and `mlsys train/plan --host-costs`."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlsyscalc.calc.train.host import StageWork
from mlsyscalc.calc.train.probe import ProbeStep, solve_probe
from mlsyscalc.errors import MlsysError

from .conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
# A work count for the solver's algebra (any counts do): 147 ops, 87 matmuls, 4 layers, 39 tensors.
TINY4 = StageWork(ops=147, matmuls=87, layers=4, tensors=39)
# A 4-layer llama's work as `mlsys train` counts it (tests/test_train_host.py: 35 kernels of which 21 matmuls and 9
# tensors a layer; the ends 18 kernels (the embedding's 5, the final norm's 2, lm_head's 3, the loss's 8), 3 matmuls,
# 3 tensors): 4 x 35 + 18 = 158 ops, 4 x 21 + 3 = 87 matmuls, 4 x 9 + 3 = 39 tensors.
TINY4_TRAIN = StageWork(ops=158, matmuls=87, layers=4, tensors=39)
TINY_SET = ("--set", "hidden_size=128", "--set", "num_attention_heads=4", "--set", "num_key_value_heads=4",
            "--set", "intermediate_size=256", "--set", "vocab_size=1024", "--set", "num_hidden_layers=4")


def _step(fb, opt=0.0, tp=1, zero=0, m=1, work=TINY4):
    return ProbeStep(work, m, tp, zero, fb, opt)


def test_solve_by_hand():
    """Costs op_s 50 us, dtensor_matmul_s 400 us, fsdp_layer_s 3 ms, dtensor_param_s 60 us give, by hand:
    plain step 147 x 50 us = 7.35 ms; TP step 7.35 + 87 x 400 us = 7.35 + 34.8 = 42.15 ms; FSDP2 x TP step with
    2 micro-batches 2 x (42.15 + 4 x 3) = 108.3 ms and its optimizer 39 x 60 us = 2.34 ms. The solve gives them back."""
    got = solve_probe([_step(7.35e-3), _step(42.15e-3, 1e-3, tp=2), _step(108.3e-3, 2.34e-3, tp=2, zero=3, m=2)])
    assert got.costs == pytest.approx({"op_s": 50e-6, "dtensor_matmul_s": 400e-6, "fsdp_layer_s": 3e-3,
                                       "dtensor_param_s": 60e-6})
    assert got.clamped == ()


def test_solve_fsdp_and_ddp_by_hand():
    """FSDP2 after a plain step: (20 ms - 147 x 50 us) / 4 layers = (20 - 7.35) / 4 = 3.1625 ms; optimizer
    3.9 ms / 39 tensors = 100 us. A DDP step alone: op_s = 14.7 ms / (2 x 147) = 50 us, no DTensor cost."""
    fsdp = solve_probe([_step(7.35e-3), _step(20e-3, 3.9e-3, zero=3)])
    assert fsdp.costs == pytest.approx({"op_s": 50e-6, "fsdp_layer_s": 3.1625e-3, "dtensor_param_s": 100e-6})
    ddp = solve_probe([_step(14.7e-3, 5e-3, m=2)])
    assert ddp.costs == pytest.approx({"op_s": 50e-6})


def test_a_cost_below_zero_is_clamped_and_named():
    """A TP step faster than its plain step's ops (5 ms < 7.35 ms): dtensor_matmul_s would be negative."""
    got = solve_probe([_step(7.35e-3), _step(5e-3, 1e-3, tp=2)])
    assert got.costs["dtensor_matmul_s"] == 0 and got.clamped == ("dtensor_matmul_s",)


def test_each_step_must_add_one_cost():
    with pytest.raises(MlsysError, match="adds \\['op_s', 'dtensor_matmul_s'\\]"):
        solve_probe([_step(1e-2, tp=2)])  # TP without a plain step first: two unknowns
    with pytest.raises(MlsysError, match="adds none"):
        solve_probe([_step(1e-2), _step(1e-2)])
    with pytest.raises(MlsysError, match="positive time"):
        solve_probe([_step(0.0)])


def test_mlsys_train_prices_the_probe_step_at_its_measured_time(run_cli):
    """Exact for the tiny step: solved from a plain step of 10 ms and a TP 2 step of 50 ms (optimizer 3 ms),
    `mlsys train --framework torch --host-costs` of the same tiny layout prices host paths of 50 ms and 3 ms
    (the measured times are the oracle)."""
    costs = solve_probe([_step(10e-3, work=TINY4_TRAIN), _step(50e-3, 3e-3, tp=2, work=TINY4_TRAIN)]).costs
    assert costs["dtensor_matmul_s"] == pytest.approx(40e-3 / 87)
    data = run_cli.json("train", "llama2-7b", *TINY_SET, "--gpus", "2", "--gpu", "H200", "--seq", "128",
                        "--global-batch", "4", "--micro-batch", "4", "--tp", "2", "--no-sp", "--framework", "torch",
                        "--host-costs", json.dumps(costs))
    assert data["host_work"] == {"ops": 158, "matmuls": 87, "layers": 4, "tensors": 39}
    assert data["host_path_s"] == pytest.approx({"forward_backward": 50e-3, "optimizer": 3e-3})
    assert data["host_costs"]["op_s"] == pytest.approx(10e-3 / 158)
    assert data["host_costs"]["fsdp_layer_s"] == 4.30e-3  # not probed: the built-in cost stays
    assert data["framework_source"].endswith("; overridden by --host-costs")


def test_host_costs_from_a_file_over_the_calibration_and_in_plan(run_cli, tmp_path):
    """A file works as inline JSON does; --host-costs wins over the calibration's torch_host; plan takes it."""
    path = tmp_path / "costs.json"
    path.write_text(json.dumps({"op_s": 20e-6}))
    args = ("train", "llama2-7b", "--gpus", "2", "--gpu", "H200", "--seq", "2048", "--global-batch", "2",
            "--micro-batch", "2", "--tp", "2", "--no-sp", "--framework", "torch")
    data = run_cli.json(*args, "--host-costs", str(path))
    assert data["host_costs"]["op_s"] == 20e-6
    plan = run_cli.json("plan", "llama2-7b", "--gpus", "2", "--gpu", "H200", "--seq", "2048", "--global-batch", "4",
                        "--framework", "torch", "--top", "1", "--quiet", "--host-costs", str(path))
    slow = run_cli.json("plan", "llama2-7b", "--gpus", "2", "--gpu", "H200", "--seq", "2048", "--global-batch", "4",
                        "--framework", "torch", "--top", "1", "--quiet", "--host-costs", '{"op_s": 0.5}')
    assert slow["candidates"][0]["step_time_s"] > plan["candidates"][0]["step_time_s"]


@pytest.mark.parametrize("value, message", [
    ('{"op_s": -1e-5}', "--host-costs: op_s must be a number in [0, 1)"),
    ('{"op_s": NaN}', "--host-costs: op_s must be a number in [0, 1)"),
    ('{"op_s": Infinity}', "--host-costs: op_s must be a number in [0, 1)"),
    ('{"op_s": "5e-5"}', "--host-costs: op_s must be a number in [0, 1)"),
    ('{"launch_s": 5e-5}', "--host-costs keys are op_s, "),
    ("[5e-5]", "--host-costs must be an object"),
    ('{"op_s": 5e-5', "--host-costs: not valid JSON"),
    ("missing.json", "--host-costs: no such file 'missing.json'"),
])
def test_bad_host_costs_exit_2(run_cli, value, message):
    code, out, err = run_cli("train", "llama2-7b", "--gpus", "2", "--gpu", "H200", "--seq", "2048", "--global-batch",
                             "2", "--tp", "2", "--framework", "torch", "--host-costs", value)
    assert code == 2 and message in err and "Traceback" not in err and out == ""


def test_host_costs_need_torch_and_one_op_s(run_cli):
    base = ("train", "llama2-7b", "--gpus", "2", "--gpu", "H200", "--seq", "2048", "--global-batch", "2", "--tp", "2")
    code, _, err = run_cli(*base, "--host-costs", '{"op_s": 5e-5}')
    assert code == 2 and "add --framework torch" in err
    code, _, err = run_cli(*base, "--framework", "torch", "--host-costs", '{"op_s": 5e-5}', "--host-us-per-kernel", "30")
    assert code == 2 and "give op_s once" in err
    # --host-us-per-kernel beside --host-costs without op_s: each sets its own field
    data = run_cli.json(*base, "--framework", "torch", "--host-costs", '{"dtensor_matmul_s": 3e-4}',
                        "--host-us-per-kernel", "30")
    assert data["host_costs"]["op_s"] == pytest.approx(30e-6) and data["host_costs"]["dtensor_matmul_s"] == 3e-4


def test_probe_plans():
    """Each case's probe steps, each adding one cost (scripts/train_host_probe.py's table)."""
    hp = load_script("train_host_probe")
    tm = load_script("train_measure")
    names = lambda case, world: [n for n, _ in hp.probe_plan(case, tm.layout(case, world))]  # noqa: E731
    assert names("single", 1) == ["single"] and names("pp-1f1b", 4) == ["single"] and names("ddp", 2) == ["ddp"]
    assert names("tp", 2) == ["single", "tp"] and names("fsdp", 4) == ["single", "fsdp"]
    assert names("fsdp-tp", 4) == ["single", "tp", "fsdp-tp"] and names("tp-pp", 4) == ["single", "tp"]
    tp_pairs = dict(hp.probe_plan("fsdp-tp", tm.layout("fsdp-tp", 4)))["tp"]
    assert tp_pairs == {"dp": 1, "tp": 2, "pp": 1, "vp": 1, "micro_batch": 4, "micro_batches": 1}


def test_compare_prices_each_row_with_its_own_probe(tmp_path):
    tc = load_script("validate/train_compare")
    row = {"case": "tp", "model": {"base": "llama2-7b", "overrides": {"num_hidden_layers": 2}}, "gpus": 2,
           "dp": 1, "tp": 2, "pp": 1, "vp": 1, "micro_batch": 4, "micro_batches": 1, "seq": 2048, "global_batch": 4,
           "step_time_s": 0.5, "peak_bytes_per_rank": [2**30, 2**30], "host_probe": {"costs": {"op_s": 4e-5}}}
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(row) + "\n" + json.dumps({k: v for k, v in row.items() if k != "host_probe"}) + "\n")
    seen = []

    def fake(args):
        seen.append(args)
        return {"step_time_s": 0.45, "memory_bytes_per_gpu": 2**30}

    page = tc.compare_table(rows, "hgx-h200", fake, host_probe=True)
    assert len(seen) == 1 and seen[0][seen[0].index("--framework") + 1] == "torch"
    assert json.loads(seen[0][seen[0].index("--host-costs") + 1]) == {"op_s": 4e-5}
    assert "-10.0%" in page and "no host probe in this row" in page and "own host probe" in page
    probes = page[page.index("Host probe of each row"):]
    assert "| tp | 2 | 2 | 40.0 | - | - | - |" in probes  # 4e-5 s = 40.0 us; the unprobed costs as "-"


def test_two_gloo_ranks_probe_then_measure(tmp_path):
    """DTensor TP and FSDP2 on 2 CPU ranks with the probe before and after: each row carries the costs its probe
    steps solve to, and each step's measured time is what those costs price it at (unless its cost was clamped at 0).
    On the CPU the tiny model's compute is no longer negligible: the numbers say nothing about a GPU host."""
    pytest.importorskip("torch.distributed.pipelining")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(ROOT / "scripts/train_measure.py"), "--device", "cpu", "--tiny", "--seq", "16", "--warmup", "1",
           "--steps", "1", "--out", str(tmp_path), "--host-probe", "--probe-seq", "16", "--probe-steps", "1",
           "--probe-after", "--case", "tp", "--case", "fsdp"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "train_rows.jsonl").read_text().splitlines()]
    assert [r["case"] for r in rows] == ["tp", "fsdp"]
    for row, second in zip(rows, ("dtensor_matmul_s", "fsdp_layer_s")):
        probe = row["host_probe"]
        assert [s["step"] for s in probe["steps"]] == ["single", row["case"]]
        assert probe["model"]["hidden_size"] == 128 and probe["model"]["num_layers"] == 4
        costs = probe["costs"]
        assert set(costs) == {"op_s", second, "dtensor_param_s"} and all(math.isfinite(v) and v >= 0 for v in costs.values())
        plain, probed = probe["steps"]
        assert plain["work"] == {"ops": 158, "matmuls": 87, "layers": 4, "tensors": 39}
        assert plain["fwd_bwd_s"] == pytest.approx(158 * costs["op_s"])
        count = 87 if second == "dtensor_matmul_s" else 4
        if second not in probe["clamped"]:
            assert probed["fwd_bwd_s"] == pytest.approx(158 * costs["op_s"] + count * costs[second])
        assert probed["optimizer_s"] == pytest.approx(39 * costs["dtensor_param_s"])
        # --probe-after: the same probe once more after the case
        assert [s["step"] for s in row["host_probe_after"]["steps"]] == ["single", row["case"]]
        assert set(row["host_probe_after"]["costs"]) == set(costs)
