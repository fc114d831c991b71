"""Fitting L(N, D) to runs: recovers known coefficients from synthetic noisy data; refuses bad data."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from mlsyscalc.calc.scaling.fit import FitOptions, Runs, check_runs, fit_runs, parse_runs
from mlsyscalc.calc.scaling.laws import Parametric
from mlsyscalc.cli.main import cli
from mlsyscalc.errors import MlsysError

TRUE = Parametric(E=1.8, A=450.0, B=1800.0, alpha=0.34, beta=0.37)
FAST = FitOptions(starts=40, bootstrap=12, seed=0)  # small grid and bootstrap keep this file quick


def isoflop_runs(law: Parametric, noise: float, seed: int = 1, sizes: int = 7) -> Runs:
    """IsoFLOP design (Hoffmann et al. approach 2): 5 budgets x `sizes` sizes around each optimum."""
    rng = np.random.default_rng(seed)
    params, tokens, loss = [], [], []
    for c in np.logspace(18, 21, 5):
        for f in np.logspace(-1, 1, sizes):
            n = law.k * c**law.a * f
            d = c / (6 * n)
            params.append(float(n))
            tokens.append(float(d))
            loss.append(float(law.loss(n, d) * math.exp(rng.normal(0.0, noise))))
    return Runs(tuple(params), tuple(tokens), tuple(loss))


def test_recovers_exact_coefficients_without_noise():
    result = fit_runs(isoflop_runs(TRUE, noise=0.0), FitOptions(starts=40, bootstrap=0))
    for name in ("E", "A", "B", "alpha", "beta"):
        assert getattr(result.fit, name) == pytest.approx(getattr(TRUE, name), rel=1e-3), name
    assert result.rms_log_residual < 1e-6
    assert result.intervals == ()


def test_recovers_coefficients_from_noisy_runs():
    runs = isoflop_runs(TRUE, noise=0.005)
    result = fit_runs(runs, FAST, compute_flops=1e23)
    fit = result.fit
    assert fit.alpha == pytest.approx(TRUE.alpha, abs=0.03)
    assert fit.beta == pytest.approx(TRUE.beta, abs=0.03)
    assert fit.E == pytest.approx(TRUE.E, abs=0.08)
    assert fit.a == pytest.approx(TRUE.a, abs=0.02)
    # the implied optimum, extrapolated 100x past the largest run, lands near the truth
    assert result.optimal_params == pytest.approx(TRUE.k * 1e23**TRUE.a, rel=0.25)
    assert 6 * result.optimal_params * result.optimal_tokens == pytest.approx(1e23)
    assert result.rms_log_residual == pytest.approx(0.005, rel=0.5)  # residuals reflect the noise
    intervals = {name: (lo, hi) for name, lo, hi in result.intervals}
    assert set(intervals) == {"E", "A", "B", "alpha", "beta", "a", "optimal_params"}
    for name in ("alpha", "beta", "E"):
        lo, hi = intervals[name]
        assert lo < hi and lo <= getattr(fit, name) * 1.02 and hi >= getattr(fit, name) * 0.98
    assert result.bootstrap >= 10


def test_fit_is_deterministic_for_a_seed():
    runs = isoflop_runs(TRUE, noise=0.005)
    a, b = fit_runs(runs, FitOptions(starts=20, bootstrap=3, seed=7)), fit_runs(runs, FitOptions(starts=20, bootstrap=3, seed=7))
    assert a.fit == b.fit and a.intervals == b.intervals


@pytest.mark.parametrize("runs, message", [
    (Runs((1e8, 2e8, 4e8, 8e8, 1.6e9), (1e9, 3e9, 1e10, 3e10, 1e11), (3.0, 2.9, 2.8, 2.7, 2.6)), "at least 8 runs"),
    (Runs((1e8,) * 10, tuple(np.logspace(9, 11, 10)), tuple(np.linspace(3, 2.5, 10))), "distinct model sizes"),
    (Runs(tuple(np.logspace(8, 10, 10)), tuple(20 * np.logspace(8, 10, 10)), tuple(np.linspace(3, 2.5, 10))),
     "move together"),
    (Runs(tuple(np.logspace(8, 10, 10)), tuple(np.tile([1e9, 3e9, 1e10, 3e10, 1e11], 2)), (2.5,) * 10), "same loss"),
])
def test_degenerate_runs_are_refused(runs, message):
    with pytest.raises(MlsysError, match=message):
        check_runs(runs)


def test_loss_rising_with_scale_is_not_a_usable_fit():
    good = isoflop_runs(TRUE, noise=0.0)
    flipped = Runs(good.params, good.tokens, tuple(5.0 - v for v in good.loss))
    with pytest.raises(MlsysError, match="no usable fit"):
        fit_runs(flipped, FitOptions(starts=20, bootstrap=0))


def test_parse_runs_checks_columns_and_values():
    rows = parse_runs([{"params": "70M", "tokens": "1.4B", "loss": "3.1"}])
    assert rows.params == (70e6,) and rows.tokens == (1.4e9,)
    with pytest.raises(MlsysError, match="line 2: missing loss"):
        parse_runs([{"params": "1e8", "tokens": "1e9"}])
    with pytest.raises(MlsysError, match="must be positive"):
        parse_runs([{"params": "1e8", "tokens": "1e9", "loss": "-1"}])


def write_csv(path: Path, runs: Runs) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["params", "tokens", "loss"])
        writer.writerows(zip(runs.params, runs.tokens, runs.loss))
    return path


def test_cli_fit_json_and_plot(tmp_path: Path):
    runs_csv = write_csv(tmp_path / "runs.csv", isoflop_runs(TRUE, noise=0.005))
    plot = tmp_path / "fit.png"
    result = CliRunner().invoke(cli, ["scaling", "fit", str(runs_csv), "--starts", "30", "--bootstrap", "5",
                                      "--compute", "1e22", "--plot", str(plot), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["law"] == "fit" and data["n_runs"] == 35 and data["compute_flops"] == 1e22
    assert data["alpha"] == pytest.approx(TRUE.alpha, abs=0.03)
    assert 6 * data["params"] * data["tokens"] == pytest.approx(1e22)
    assert set(data["intervals"]) >= {"alpha", "beta", "E"}
    assert plot.read_bytes()[:4] == b"\x89PNG" and plot.stat().st_size > 10_000


def test_cli_fit_bad_data_exits_2(tmp_path: Path):
    few = write_csv(tmp_path / "few.csv", Runs((1e8, 2e8, 4e8), (1e9, 2e9, 4e9), (3.0, 2.9, 2.8)))
    result = CliRunner().invoke(cli, ["scaling", "fit", str(few)])
    assert result.exit_code == 2 and "at least 8 runs" in result.output
    runs_csv = write_csv(tmp_path / "runs.csv", isoflop_runs(TRUE, noise=0.0))
    for bad, message in ((["--starts", "0"], "need at least one start"),
                         (["--starts", "many"], "Invalid value for '--starts': 'many'"),
                         (["--ci", "1.5"], "Invalid value for '--ci': 1.5 is not in the range 0<x<1"),
                         (["--bootstrap", "-1"], "Invalid value for '--bootstrap': -1 is not in the range x>=0")):
        result = CliRunner().invoke(cli, ["scaling", "fit", str(runs_csv), *bad])
        assert result.exit_code == 2 and message in result.output, (bad, result.output)
    garbage = tmp_path / "garbage.csv"
    garbage.write_text("params,tokens,loss\n1e8,lots,3.0\n")
    result = CliRunner().invoke(cli, ["scaling", "fit", str(garbage)])
    assert result.exit_code == 2 and "not a number" in result.output
