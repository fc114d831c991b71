"""`mlsys scaling budget` and `scaling loss` tables against their JSON, with the budget's arithmetic by hand:
GPU-hours = C / (peak x MFU) / 3600, days = GPU-hours / GPUs / 24, cost = GPU-hours x price, C = 6ND."""

from __future__ import annotations

import pytest

from .test_values_views import close, quantity, run_both, table


def test_budget_by_hand(run_cli):
    data, views = run_both(run_cli, "scaling", "budget", "--compute", "1e23", "--gpu", "h100", "--gpus", "512",
                           "--mfu", "0.4", "--price-per-gpu-hour", "2.5")
    peak = 989.5e12
    hours = 1e23 / (peak * 0.4) / 3600
    assert data["peak_flops_per_s"] == peak and data["gpu_hours"] == pytest.approx(hours)
    assert data["wall_days"] == pytest.approx(hours / 512 / 24) and data["wall_s"] == pytest.approx(hours / 512 * 3600)
    assert data["cost"] == pytest.approx(2.5 * hours) and data["sustained_flops_per_s"] == pytest.approx(512 * peak * 0.4)
    assert data["cost_per_million_tokens"] == pytest.approx(data["cost"] / data["tokens"] * 1e6)
    assert data["params"] * data["tokens"] * 6 == pytest.approx(1e23, rel=1e-6)
    rows = {r["quantity"]: r for r in table(views, "^Training budget$")}
    for label, key in (("compute C", "compute_flops"), ("peak per GPU", "peak_flops_per_s"), ("MFU", "mfu"),
                       ("GPUs", "gpus"), ("sustained, all GPUs", "sustained_flops_per_s"), ("GPU-hours", "gpu_hours"),
                       ("wall clock", "wall_days"), ("cost", "cost"), ("cost per 1M training tokens", "cost_per_million_tokens"),
                       ("compute-optimal N", "params"), ("compute-optimal D", "tokens")):
        assert close(rows[label]["value"], data[key], 4), label
    assert [r["unit"] for r in rows.values()][:7] == ["FLOP", "FLOP/s", "achieved / peak", "count", "FLOP/s", "h", "days"]
    assert data["notes"][0] == "peak: H100-SXM bf16 dense datasheet peak"
    given = run_cli.json("scaling", "budget", "--gpu-hours", "1000", "--peak-tflops", "500", "--mfu", "0.5")
    assert given["compute_flops"] == pytest.approx(1000 * 3600 * 500e12 * 0.5) and given["cost"] is None
    assert given["notes"][0] == "peak: 500 TFLOP/s (given)"
    unpriced = run_both(run_cli, "scaling", "budget", "--compute", "1e23", "--gpu", "h100")[1]
    assert "cost" not in {r["quantity"] for r in table(unpriced, "^Training budget$")}


def test_days_and_cost_give_the_compute(run_cli):
    days = run_cli.json("scaling", "budget", "--days", "10", "--gpus", "100", "--peak-tflops", "1000", "--mfu", "0.5")
    assert days["gpu_hours"] == pytest.approx(10 * 24 * 100)
    assert days["compute_flops"] == pytest.approx(10 * 86400 * 100 * 1000e12 * 0.5)
    cost = run_cli.json("scaling", "budget", "--cost", "1M", "--price-per-gpu-hour", "2", "--peak-tflops", "1000")
    assert cost["gpu_hours"] == pytest.approx(5e5) and cost["cost"] == pytest.approx(1e6)
    code, _, err = run_cli("scaling", "budget", "--compute", "1e23")
    assert code == 2 and "give --gpu NAME or --peak-tflops X (dense peak per GPU)" in err


def test_loss_table_columns(run_cli):
    data, views = run_both(run_cli, "scaling", "loss", "--params", "7B", "--tokens", "2T")
    rows = {r["quantity"]: r for r in table(views, "^Loss under ")}
    parts = data["loss_breakdown"]
    assert data["compute_flops"] == pytest.approx(6 * 7e9 * 2e12) and data["tokens_per_param"] == pytest.approx(2e12 / 7e9)
    assert close(rows["loss (nats/token)"]["this run"], data["loss"], 4)
    assert close(rows["loss (nats/token)"]["compute-optimal at same C"], data["optimal_loss"], 4)
    assert close(rows["parameters N"]["this run"], 7e9, 4) and close(rows["tokens D"]["this run"], 2e12, 4)
    assert close(rows["parameters N"]["compute-optimal at same C"], data["optimal_params"], 4)
    assert close(rows["tokens D"]["compute-optimal at same C"], data["optimal_tokens"], 4)
    assert data["loss"] == pytest.approx(parts["irreducible"] + parts["params_term"] + parts["data_term"])
    assert parts["irreducible"] == 1.69   # Chinchilla's E (Hoffmann et al. 2022, eq. 10)
    for label, key in (("irreducible E (nats/token)", "irreducible"), ("A / N^alpha (nats/token)", "params_term"),
                       ("B / D^beta (nats/token)", "data_term")):
        assert close(rows[label]["this run"], parts[key], 4), label
    assert data["excess_loss"] == pytest.approx(data["loss"] - data["optimal_loss"])
    assert data["optimal_params"] * data["optimal_tokens"] * 6 == pytest.approx(data["compute_flops"], rel=1e-6)
    assert quantity(rows["tokens per parameter"]["this run"]) == pytest.approx(2e12 / 7e9, rel=1e-3)
    assert f"the compute-optimal split of the same C reaches a loss {data['excess_loss']:.4g} nats/token lower" in \
        data["notes"][1]
