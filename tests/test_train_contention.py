"""`mlsys train --comm-sms`: compute lost to the SMs NCCL holds while overlapped traffic runs."""

from __future__ import annotations

import numpy as np
import pytest

from mlsyscalc.calc.roofline.calibration import load_ceilings
from mlsyscalc.calc.train.step import train_step
from mlsyscalc.calc.comm.exposed import contention_s
from mlsyscalc.calc.train.options import TrainStepOptions
from mlsyscalc.specs.lookup import load_model

H100 = ("--gpu", "H100-SXM")  # 132 SMs (NVIDIA H100 datasheet)
DDP = ("llama2-7b", "--gpus", "8", *H100, "--seq", "2048", "--global-batch", "16", "--micro-batch", "2")
LAYOUTS = [
    DDP,
    ("llama2-13b", "--gpus", "32", *H100, "--seq", "2048", "--global-batch", "64", "--tp", "2", "--pp", "4",
     "--vp", "2", "--zero", "1", "--overlap", "dp,tp,pp"),
    ("llama2-7b", "--gpus", "8", *H100, "--seq", "4096", "--global-batch", "8", "--zero", "3", "--cp", "2"),
]


def _step(run_cli, args, *extra):
    return run_cli.json("train", *args, *extra)


def test_contention_is_share_times_hidden_seconds():
    """Hand arithmetic: 16 of 132 SMs over 0.3 s hidden dp traffic (0.5 total, 0.2 exposed) and 0.1 s
    hidden tp traffic (all of it); pp is not overlapped, so its 1 s does not count."""
    total = {"dp": 0.5, "tp": 0.1, "pp": 1.0}
    exposed = {"dp": 0.2, "tp": 0.0, "pp": 1.0}
    assert contention_s(total, exposed, ("dp", "tp"), 16 / 132) == pytest.approx(16 / 132 * 0.4)
    assert contention_s(total, exposed, (), 16 / 132) == 0
    arrays = contention_s({"dp": np.array([0.5, 0.1])}, {"dp": np.array([0.2, 0.1])}, ("dp",), 0.5)
    assert arrays.tolist() == pytest.approx([0.15, 0.0])


def test_ddp_contention_by_hand(run_cli):
    """DDP on 8 x H100: the gradient all-reduce hidden behind the backward costs 24/132 of its hidden time."""
    data = _step(run_cli, DDP, "--comm-sms", "24")
    hidden = data["comm_total_s"]["dp"] - data["breakdown"]["dp_comm_s"]
    assert hidden > 0 and data["comm_sms"] == 24
    assert data["breakdown"]["contention_s"] == pytest.approx(24 / 132 * hidden, rel=1e-12)


@pytest.mark.parametrize("args", LAYOUTS)
def test_zero_comm_sms_is_free_overlap(run_cli, args):
    """--comm-sms 0 gives back the step without the term: the other parts are unchanged, contention 0."""
    free, default = _step(run_cli, args, "--comm-sms", "0"), _step(run_cli, args)
    assert free["breakdown"]["contention_s"] == 0
    assert {k: v for k, v in free["breakdown"].items() if k != "contention_s"} == \
        {k: v for k, v in default["breakdown"].items() if k != "contention_s"}
    assert default["step_time_s"] == pytest.approx(free["step_time_s"] + default["breakdown"]["contention_s"],
                                                   rel=1e-12)


@pytest.mark.parametrize("args", LAYOUTS)
def test_more_comm_sms_never_faster(run_cli, args):
    steps = [_step(run_cli, args, "--comm-sms", str(n)) for n in (0, 1, 8, 16, 32, 64, 131)]
    times = [s["step_time_s"] for s in steps]
    assert times == sorted(times)
    for s in steps:
        assert all(v >= 0 for v in s["breakdown"].values())
        assert s["step_time_s"] == pytest.approx(sum(s["breakdown"].values()), rel=1e-12)


@pytest.mark.parametrize("args", LAYOUTS)
def test_no_overlap_no_slowdown(run_cli, args):
    args = tuple(a for i, a in enumerate(args) if a != "--overlap" and (i == 0 or args[i - 1] != "--overlap"))
    data = _step(run_cli, args, "--overlap", "none", "--comm-sms", "64")
    assert data["breakdown"]["contention_s"] == 0


def test_one_gpu_has_no_contention():
    step = train_step(load_model("llama2-7b"), load_ceilings("H100-SXM"), "hgx-h100",
                      TrainStepOptions(gpus=1, seq=2048, global_batch=2, micro_batch=2, comm_sms=64))
    assert step.breakdown["contention_s"] == 0


@pytest.mark.parametrize("value", ["-1", "132", "1000"])
def test_bad_comm_sms_is_one_line_exit_2(run_cli, value):
    code, out, err = run_cli("train", *DDP, "--comm-sms", value)
    assert code == 2 and "comm-sms" in err and "Traceback" not in err
