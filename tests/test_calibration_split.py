"""`mlsys calibrate` fits d64 attention (attention_small_head) apart from d128 attention: hand-made
observations whose times follow known efficiencies, and the fit recovers them."""

from __future__ import annotations

import pytest

from mlsyscalc.calc.roofline.calibration_fit import PARAMS, Observation, Term, fit, predict
from mlsyscalc.calc.roofline.calibration import EFFICIENCY_FIELDS

BASE = {"matmul": 0.74, "attention": 0.61, "memory": 0.89, "matmul_skinny": 0.78, "memory_broadcast": 0.32,
        "matmul_unaligned": 0.12, "matmul_unaligned_stream": 0.22, "matmul_grouped_stream": 0.78,
        "attention_small_head": 0.49, "matmul_fp8": 0.65, "attention_flash2": 0.36, "memory_fused": 0.85,
        "memory_fused_norm_bwd": 0.44}
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
    """scripts/validate/models_error_terms.py: matmul + attention + memory + gaps = (measured - predicted) /
    predicted, by construction (each term is measured minus predicted time over the predicted
    step); checked on a committed held-out row (phi-2 prefill B1 S1024, H100): its matmul, attention
    and memory kernels and the step time are the row's own."""
    from pathlib import Path

    from .conftest import load_script
    from mlsyscalc.bench.model_calibrate import load_cases
    from mlsyscalc.bench.rows import ResultStore
    from mlsyscalc.calc.roofline.calibration import load_ceilings

    terms = load_script("validate/models_error_terms").terms
    rows = [r for r in ResultStore(Path(__file__).resolve().parents[1] / "reports/models/h100_memory_remeasured.jsonl").rows()
            if r.extra.get("model") == "phi-2" and r.extra.get("phase") == "prefill"]
    (case,) = load_cases(rows[:1], {"phi-2"})
    t = terms(case, load_ceilings("H100-SXM"))
    assert t["matmul"] + t["attention"] + t["memory"] + t["gaps"] == pytest.approx(t["error"], abs=1e-12)
    kinds = case.row.extra["ops"]["kinds"]
    kernels_s = sum(kinds[k]["measured_s"] for k in ("matmul", "attention", "memory"))
    assert t["gaps"] == pytest.approx((t["measured_s"] - kernels_s) / t["predicted_s"], rel=1e-12)


# --- a memory-bound kernel's fixed cost apart from a GEMM's -------------------------------------

def _mixed_obs(label: str, gemms: int, elementwise: int, launch: float, memory_launch: float) -> Observation:
    """`gemms` GEMMs of 10 us streaming (floor below it) and `elementwise` memory-bound kernels of
    0.5 us of bytes, at the BASE efficiencies; measured with the given fixed costs."""
    terms = (Term(gemms, "matmul", 1e-6, 10e-6, skinny=True, floor_s=2.15e-6),
             Term(elementwise, "memory", 0.0, 0.5e-6))
    measured = gemms * (10e-6 + launch) + elementwise * (0.5e-6 + memory_launch)
    return Observation(label, measured, terms, tuple(BASE[k] for k in EFFICIENCY_FIELDS))


def test_predict_prices_memory_kernels_at_their_own_fixed_cost():
    obs = _mixed_obs("a", 7, 20, 3e-6, 2e-6)
    # by hand: 7 x (10 + 3.4) + 20 x (0.5 + 2.2) = 93.8 + 54 = 147.8 us
    got = predict(obs, {**START, "launch_s": 3.4e-6, "memory_launch_s": 2.2e-6})
    assert got == pytest.approx(147.8e-6, rel=1e-12)
    # without memory_launch_s every kernel pays launch_s: 7 x 13.4 + 20 x 3.9 = 171.8 us
    assert predict(obs, {**START, "launch_s": 3.4e-6}) == pytest.approx(171.8e-6, rel=1e-12)


def test_fit_recovers_the_two_fixed_costs_from_steps_and_ops():
    """Steps of different GEMM : elementwise mixes, measured with 3.4 us per GEMM and 2.2 us per
    memory-bound kernel, and per-op times of the GEMMs alone (as a profile gives them): the fit,
    freeing only the two fixed costs, must give them back."""
    steps = [_mixed_obs(f"s{i}", g, e, 3.4e-6, 2.2e-6) for i, (g, e) in enumerate(((7, 20), (7, 40), (12, 15)))]
    ops = [_mixed_obs("op", 7, 0, 3.4e-6, 2.2e-6)]
    frozen = tuple(p for p in PARAMS if p not in ("launch_s", "memory_launch_s"))
    got = fit(steps, {**START, "memory_launch_s": 2e-6}, frozen, ops=ops)
    assert got["launch_s"] == pytest.approx(3.4e-6, rel=1e-3)
    assert got["memory_launch_s"] == pytest.approx(2.2e-6, rel=1e-3)


def test_a_start_without_memory_launch_keeps_one_fixed_cost():
    steps = [_mixed_obs("a", 7, 20, 3e-6, 3e-6), _mixed_obs("b", 7, 40, 3e-6, 3e-6)]
    frozen = tuple(p for p in PARAMS if p != "launch_s")
    got = fit(steps, START, frozen)
    assert "memory_launch_s" not in got and got["launch_s"] == pytest.approx(3e-6, rel=1e-3)


def test_an_old_calibration_file_means_what_it_meant():
    """A calibration file without `memory_launch_overhead_s` prices every kernel at its
    launch_overhead_s; with the key, memory-bound kernels pay it and GEMMs keep the other. By hand
    for a 64 MiB copy-sized elementwise op on the H100 datasheet bandwidth (3.35 TB/s) at memory
    efficiency 0.8: 2 x 2^26 B / (3.35e12 x 0.8) + fixed cost."""
    from mlsyscalc.calc.roofline.calibration import load_ceilings
    from mlsyscalc.calc.roofline.ops import predict_matmul, predict_memory_op

    old = {"gpu": "H100-SXM", "efficiency": {"memory": 0.8}, "launch_overhead_s": 3e-6,
           "bandwidth_Bps": {"read": 3.35e12, "write": 3.35e12}}
    busy = 2 * 2**26 / (3.35e12 * 0.8)
    c = load_ceilings("H100-SXM", old)
    assert c.overhead_s("memory") == c.launch_s == 3e-6
    assert predict_memory_op("x", 2**26, 2**26, gpu=c).predicted_s == pytest.approx(busy + 3e-6, rel=1e-12)
    new = load_ceilings("H100-SXM", {**old, "memory_launch_overhead_s": 2.5e-6})
    assert predict_memory_op("x", 2**26, 2**26, gpu=new).predicted_s == pytest.approx(busy + 2.5e-6, rel=1e-12)
    assert predict_matmul(1, 4096, 4096, gpu=new).overhead_s == 3e-6
    assert new.as_dict("bf16")["memory_launch_overhead_s"] == 2.5e-6
    # one fixed cost given for every kernel (--launch-us) replaces both
    assert load_ceilings("H100-SXM", {**old, "memory_launch_overhead_s": 2.5e-6}, launch_s=1e-6).overhead_s("memory") == 1e-6


def test_serve_iterations_price_memory_kernels_at_their_fixed_cost():
    """The serving cost model's affine rows keep each kernel's own fixed cost: a decode iteration
    equals the roofline's step (the oracle, as in tests/test_serve_cost.py) with the
    calibration's two fixed costs, and differs from one fixed cost for every kernel by
    (2.2 - 3.4) us x the step's memory-bound kernels."""
    from mlsyscalc.calc.roofline.calibration import load_ceilings
    from mlsyscalc.calc.roofline.model import RooflineOptions, predict_model
    from mlsyscalc.calc.serve.iteration import Batch, IterationCost
    from mlsyscalc.specs.lookup import load_model

    record = {"gpu": "H100-SXM", "launch_overhead_s": 3.4e-6}
    two = load_ceilings("H100-SXM", {**record, "memory_launch_overhead_s": 2.2e-6})
    spec = load_model("llama2-7b")
    cost = IterationCost(spec, two, RooflineOptions())
    fast = {r.name: r.launch_s for r in cost.token_rows}  # each kernel's fixed cost plus the stream's gap before it
    assert fast["norm"] == 2.2e-6 + two.gap_s and fast["q_proj"] == 3.4e-6 + two.gap_s
    opts = RooflineOptions(phase="decode", batch=4, seq=1, context=512, check_fit=False, window="full")
    step = predict_model(spec, two, opts)
    assert cost.time_s(Batch.of(contexts=(512,) * 4)) == pytest.approx(step.time_s, rel=2e-3)
    one = predict_model(spec, load_ceilings("H100-SXM", record), opts)
    memory_kernels = sum(r.count for r in step.rows if r.pred.kind == "memory")
    assert step.time_s - one.time_s == pytest.approx(memory_kernels * (2.2e-6 - 3.4e-6), rel=1e-9)
