"""`mlsys calibrate` fits d64 attention (attention_small_head) apart from d128 attention: hand-made
observations whose times follow known efficiencies, and the fit recovers them."""

from __future__ import annotations

import pytest

from mlsyscalc.calc.calibration_fit import PARAMS, Observation, Term, fit, predict
from mlsyscalc.calc.calibration import EFFICIENCY_FIELDS

BASE = {"matmul": 0.74, "attention": 0.61, "memory": 0.89, "matmul_skinny": 0.78, "memory_broadcast": 0.32,
        "matmul_unaligned": 0.12, "matmul_unaligned_stream": 0.22, "attention_small_head": 0.49}
START = {**BASE, "launch_s": 2e-6, "matmul_floor_s": 2.15e-6}


def _obs(label: str, cls: str, compute_s: float, measured_s: float) -> Observation:
    term = Term(1, "attention", compute_s, 0.0, compute_class=cls)
    return Observation(label, measured_s, (term,), tuple(BASE[k] for k in EFFICIENCY_FIELDS))


def test_small_head_attention_is_a_fitted_parameter():
    assert "attention_small_head" in PARAMS and "attention" in PARAMS


def test_fit_recovers_d64_and_d128_attention_apart():
    """d128 kernels priced 1 and 3 ms at 0.61 that ran at 0.305 (twice as long) plus 3 us fixed
    cost: 2.003 and 6.003 ms; d64 ones priced 1 and 2 ms at 0.49 that ran at 0.392 (x 1.25):
    1.253 and 2.503 ms. By hand the fit must give attention 0.305, attention_small_head 0.392,
    launch 3 us (four equations, three unknowns, consistent)."""
    obs = [_obs("a", "attention", 1e-3, 2.003e-3), _obs("b", "attention", 3e-3, 6.003e-3),
           _obs("c", "attention_small_head", 1e-3, 1.253e-3), _obs("d", "attention_small_head", 2e-3, 2.503e-3)]
    got = fit(obs, START)
    assert got["attention"] == pytest.approx(0.305, rel=1e-3)
    assert got["attention_small_head"] == pytest.approx(0.392, rel=1e-3)
    assert got["launch_s"] == pytest.approx(3e-6, rel=2e-2)
    # re-priced by hand: 2 ms x 0.49 / 0.392 + 3 us = 2.503 ms
    assert predict(obs[3], got) == pytest.approx(2.503e-3, rel=1e-3)


def test_without_d64_rows_the_class_keeps_its_start():
    obs = [_obs("a", "attention", 1e-3, 2.003e-3), _obs("b", "attention", 3e-3, 6.003e-3)]
    assert fit(obs, START)["attention_small_head"] == 0.49


def test_error_terms_add_up_to_the_step_error():
    """scripts/models_error_terms.py: matmul + attention + memory + gaps = (measured - predicted) /
    predicted, by construction (each term is measured minus predicted time over the predicted
    step); checked on a committed held-out row (phi-2 prefill B1 S1024, H100): its matmul, attention
    and memory kernels and the step time are the row's own."""
    from pathlib import Path

    from .conftest import load_script
    from mlsyscalc.bench.model_calibrate import load_cases
    from mlsyscalc.bench.rows import ResultStore
    from mlsyscalc.calc.calibration import load_ceilings

    terms = load_script("models_error_terms").terms
    rows = [r for r in ResultStore(Path(__file__).resolve().parents[1] / "reports/models/h100_check4.jsonl").rows()
            if r.extra.get("model") == "phi-2" and r.extra.get("phase") == "prefill"]
    (case,) = load_cases(rows[:1], {"phi-2"})
    t = terms(case, load_ceilings("H100-SXM"))
    assert t["matmul"] + t["attention"] + t["memory"] + t["gaps"] == pytest.approx(t["error"], abs=1e-12)
    kinds = case.row.extra["ops"]["kinds"]
    kernels_s = sum(kinds[k]["measured_s"] for k in ("matmul", "attention", "memory"))
    assert t["gaps"] == pytest.approx((t["measured_s"] - kernels_s) / t["predicted_s"], rel=1e-12)
