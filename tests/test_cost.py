"""--price-per-gpu-hour on train, plan, serve and scaling budget: cost = GPUs x seconds / 3600 x price, and no price,
no cost."""

from __future__ import annotations

import pytest

TRAIN = ("train", "llama3-8b", "--gpu", "B200", "--gpus", "8", "--seq", "4096", "--global-batch", "64", "--zero", "1")
SERVE = ("serve", "llama3-8b", "--gpu", "B200", "--rate", "20", "--requests", "100")


def test_no_price_no_cost(run_cli):
    assert "cost" not in run_cli.json(*TRAIN) and "run" not in run_cli.json(*TRAIN)
    assert "cost" not in run_cli.json(*SERVE)
    plan = run_cli.json("plan", *TRAIN[1:-2], "--top", "2", "--quiet")
    assert all("cost" not in c for c in plan["candidates"])
    code, out, _ = run_cli("scaling", "budget", "--compute", "1e23", "--gpu", "H100", "--gpus", "64", "--format", "markdown")
    assert code == 0 and "cost" not in out
    assert run_cli.json("scaling", "budget", "--compute", "1e23", "--gpu", "H100", "--gpus", "64")["cost"] is None


def test_training_step_and_run_cost(run_cli):
    d = run_cli.json(*TRAIN, "--price-per-gpu-hour", "3.5", "--train-tokens", "1T")
    step, tokens = d["step_time_s"], 64 * 4096
    assert d["cost"]["cost_per_step"] == pytest.approx(8 * step / 3600 * 3.5, rel=1e-12)
    assert d["cost"]["cost_per_million_tokens"] == pytest.approx(d["cost"]["cost_per_step"] * 1e6 / tokens, rel=1e-12)
    assert d["run"]["run_steps"] == pytest.approx(1e12 / tokens, rel=1e-12)
    assert d["run"]["run_wall_s"] == pytest.approx(1e12 / tokens * step, rel=1e-12)
    assert d["run"]["cost_per_run"] == pytest.approx(d["cost"]["cost_per_step"] * 1e12 / tokens, rel=1e-12)
    assert d["cost"]["cost_per_run"] == d["run"]["cost_per_run"]
    no_price = run_cli.json(*TRAIN, "--train-tokens", "1T")  # the run's time without a price, and still no cost
    assert "cost" not in no_price and "cost_per_run" not in no_price["run"]


def test_plan_candidates_cost_in_step_order(run_cli):
    plan = run_cli.json("plan", *TRAIN[1:-2], "--top", "3", "--quiet", "--price-per-gpu-hour", "2")
    costs = [c["cost"]["cost_per_step"] for c in plan["candidates"]]
    assert costs == sorted(costs) and costs[0] == pytest.approx(8 * plan["candidates"][0]["step_time_s"] / 3600 * 2)


def test_serving_cost_per_million_tokens(run_cli):
    d = run_cli.json(*SERVE, "--price-per-gpu-hour", "4", "--tp", "2")
    per_s = 2 * 4 / 3600  # two GPUs
    assert d["cost"]["cost_per_million_output_tokens"] == pytest.approx(per_s * 1e6 / d["throughput_tokens_per_s"])
    total = d["throughput_tokens_per_s"] + d["input_tokens_per_s"]
    assert d["cost"]["cost_per_million_tokens"] == pytest.approx(per_s * 1e6 / total)


def test_scaling_budget_cost_per_million_tokens(run_cli):
    d = run_cli.json("scaling", "budget", "--compute", "1e23", "--gpu", "H100", "--gpus", "64", "--price-per-gpu-hour", "2")
    assert d["cost"] == pytest.approx(d["gpu_hours"] * 2) and d["cost_per_million_tokens"] == pytest.approx(
        d["cost"] / d["tokens"] * 1e6)


@pytest.mark.parametrize("args,flag", [((*TRAIN, "--price-per-gpu-hour", "0"), "--price-per-gpu-hour"),
                                       ((*TRAIN, "--price-per-gpu-hour", "-1"), "--price-per-gpu-hour"),
                                       ((*TRAIN, "--train-tokens", "abc"), "--train-tokens"),
                                       ((*SERVE[:-4], "--sweep", "rate=1,2", "--price-per-gpu-hour", "1"), "--sweep")])
def test_bad_prices_exit_2(run_cli, args, flag):
    code, _, err = run_cli(*args)
    assert code == 2 and flag in err
