"""`scaling fit` on 40 runs with the bootstrap: the vectorised fit gives the per-start L-BFGS fit's answer, fast.

REFERENCE is what the previous implementation (scipy L-BFGS from each of the 200 starts, two starts
per bootstrap resample; mlsyscalc at 7b06185) returned for these runs with FitOptions(): 67 s of
wall time on a shared 2-core machine. It is the oracle here, not the code under test.
"""

from __future__ import annotations

import time

import pytest

from mlsyscalc.calc.scaling.fit import FitOptions, fit_runs
from mlsyscalc.calc.scaling.laws import Parametric

from .test_scaling_fit import isoflop_runs

pytest.importorskip("scipy")

TRUE = Parametric(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28)  # Hoffmann et al. 2022, eq. (10)
REFERENCE = {"E": 1.7573262570075956, "A": 538.67215617778, "B": 651.5951781488842, "alpha": 0.3582579488936998,
             "beta": 0.3036471180732501, "optimal_params": 1821211323.3739638}
REFERENCE_OBJECTIVE = 0.00020970357319459747
REFERENCE_INTERVALS = {"E": (1.6599466612001885, 1.825610168822887), "A": (409.21786589571917, 900.9103789560594),
                       "B": (286.947112870264, 1064.7681017760062), "alpha": (0.3408185255209627, 0.38907753720184174),
                       "beta": (0.2613517678791463, 0.3288954102845803), "a": (0.415936438151387, 0.4771644958437147),
                       "optimal_params": (1510570629.878346, 2032230955.7565205)}


def test_same_estimates_and_intervals_as_per_start_lbfgs_in_under_3_cpu_seconds():
    start = time.process_time()
    result = fit_runs(isoflop_runs(TRUE, noise=0.01, seed=7, sizes=8), FitOptions())  # 40 runs
    cpu = time.process_time() - start
    assert result.objective <= REFERENCE_OBJECTIVE * (1 + 1e-9)  # at least as good a minimum
    for name in ("E", "A", "B", "alpha", "beta"):
        assert getattr(result.fit, name) == pytest.approx(REFERENCE[name], rel=1e-5), name
    assert result.optimal_params == pytest.approx(REFERENCE["optimal_params"], rel=1e-5)
    assert result.bootstrap == 100 and result.converged >= 190
    for name, low, high in result.intervals:  # same resamples: equal up to each resample's optimiser noise
        ref_low, ref_high = REFERENCE_INTERVALS[name]
        assert low == pytest.approx(ref_low, rel=1e-3) and high == pytest.approx(ref_high, rel=1e-3), name
    assert cpu < 3.0, f"fit took {cpu:.2f} CPU seconds"
