"""The held-out ranges beside printed times (model_specs/intervals.json, scripts/validate/intervals.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlsyscalc.specs.intervals import Interval, intervals

from .conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


def test_the_file_is_what_the_script_computes_from_the_committed_predictions(tmp_path, monkeypatch):
    script = load_script("validate/intervals")
    monkeypatch.setattr(script, "OUT", tmp_path / "intervals.json")
    script.main()
    assert json.loads((tmp_path / "intervals.json").read_text()) == json.loads(
        (ROOT / "model_specs/intervals.json").read_text())


def test_a_range_is_where_measured_times_fell_relative_to_the_prediction():
    """e = predicted / measured - 1 of -0.2 means the run took 1 / 0.8 - 1 = +25% of the prediction."""
    script = load_script("validate/intervals")
    got = script.spread([-0.2] * 5 + [0.0] * 5, "s", "n")
    assert got["high"] == pytest.approx(0.25) and got["low"] == pytest.approx(0.0) and got["runs"] == 10
    i = Interval(10, -0.1, 0.05, 0.3, 0.8, "s", "n")
    assert i.around(10.0) == {"low_s": pytest.approx(9.0), "median_s": pytest.approx(10.5), "high_s": pytest.approx(13.0),
                              "low_rel": -0.1, "high_rel": 0.3, "coverage": 0.8, "runs": 10, "source": "s"}
    assert "likely 9-13 s" in i.text(10.0)


def test_train_plan_serve_and_the_torch_roofline_carry_their_range(run_cli):
    ranges = intervals()
    assert {"train", "serve_ttft", "serve_tpot", "roofline_torch_train"} <= set(ranges)
    step = run_cli.json("train", "llama2-7b", "--gpus", "8", "--gpu", "H100-SXM", "--seq", "2048", "--global-batch", "16")
    assert step["interval"]["high_s"] == pytest.approx(step["step_time_s"] * (1 + ranges["train"].high))
    best = run_cli.json("plan", "llama2-7b", "--gpus", "8", "--gpu", "H100-SXM", "--seq", "2048", "--global-batch", "16",
                        "--top", "1")
    assert best["interval"]["low_s"] == pytest.approx(best["candidates"][0]["step_time_s"] * (1 + ranges["train"].low))
    roof = run_cli.json("roofline", "llama2-7b", "--phase", "prefill", "--seq", "1024", "--impl", "torch")
    assert roof["interval"]["runs"] == ranges["roofline_torch_prefill"].runs
    fused = run_cli.json("roofline", "llama2-7b", "--phase", "prefill", "--seq", "1024")
    assert "interval" not in fused and any("no held-out set" in n for n in fused["notes"])
    served = run_cli.json("serve", "llama3-8b", "--rate", "2", "--requests", "20")
    assert served["interval_ttft_p50_s"]["median_s"] == pytest.approx(served["ttft_p50_s"] * (1 + ranges["serve_ttft"].median))


def test_a_model_with_routed_experts_takes_the_moe_runs_range(run_cli):
    ranges = intervals()
    assert 0 < ranges["train_moe"].runs < ranges["train"].runs
    step = run_cli.json("train", "gpt-oss-120b", "--gpus", "64", "--global-batch", "512", "--tp", "1", "--pp", "4",
                        "--ep", "8")
    assert step["interval"]["runs"] == ranges["train_moe"].runs
    assert step["interval"]["high_s"] == pytest.approx(step["step_time_s"] * (1 + ranges["train_moe"].high))
