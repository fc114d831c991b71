"""bench/model_calibrate.py around the fit: which rows it takes, the error summary, the calibration
record it writes, the fit terms of a memory kernel, and the per-op errors against the roofline."""

from __future__ import annotations

import json
import statistics
from types import SimpleNamespace

import pytest

from mlsyscalc.bench import model_calibrate as mc
from mlsyscalc.bench.rows import Row
from mlsyscalc.calc.roofline.calibration import load_ceilings
from mlsyscalc.errors import MlsysError


def _row(**extra) -> Row:
    error = extra.pop("error", None)
    ms = extra.pop("ms", 2.0)
    kernel = extra.pop("kernel", "model.forward")
    return Row(kernel=kernel, baseline="roofline", shape="b1s128", dtype="bf16", median_ms=ms, error=error,
               extra={"model": "llama2-7b", "batch": 1, "seq": 128, **extra})


@pytest.mark.parametrize("extra,is_usable,is_eager", [
    ({"phase": "train"}, True, False),
    ({"phase": "train", "mode": "eager"}, True, False),      # a training step is fitted whatever its launch
    ({"phase": "prefill", "mode": "graph"}, True, False),
    ({"phase": "decode", "mode": "eager"}, False, True),
    ({"phase": "decode"}, False, False),                      # no mode recorded: neither
    ({"phase": "prefill", "mode": "graph", "kernels": "triton"}, False, False),
    ({"phase": "prefill", "mode": "eager", "kernels": "torch"}, False, True),
    ({"phase": "train", "error": "OOM"}, False, False),
    ({"phase": "train", "ms": None}, False, False),
    ({"phase": "train", "ms": 0.0}, False, False),
    ({"phase": "train", "kernel": "triton_matmul"}, False, False),
])
def test_which_rows_the_fit_takes(extra, is_usable, is_eager):
    row = _row(**extra)
    assert (mc.usable(row), mc.eager_inference(row)) == (is_usable, is_eager)


def test_summary_by_hand():
    table = [{"held_out": False, "fitted": True, "error": 0.1, "uncalibrated_error": -0.3},
             {"held_out": False, "fitted": True, "error": -0.2, "uncalibrated_error": 0.5},
             {"held_out": False, "fitted": False, "error": 0.9, "uncalibrated_error": 0.9},   # scored, not fitted
             {"held_out": True, "fitted": False, "error": -0.05, "uncalibrated_error": 0.4},
             {"held_out": True, "error": 0.15, "uncalibrated_error": -0.1}]
    s = mc.summary(table)
    assert s["fitted"] == {"rows": 2, "median_abs_error": pytest.approx(0.15), "max_abs_error": pytest.approx(0.2),
                           "uncalibrated_median_abs_error": pytest.approx(0.4),
                           "uncalibrated_max_abs_error": pytest.approx(0.5)}
    assert s["held_out"] == {"rows": 2, "median_abs_error": pytest.approx(0.1), "max_abs_error": pytest.approx(0.15),
                             "uncalibrated_median_abs_error": pytest.approx(0.25),
                             "uncalibrated_max_abs_error": pytest.approx(0.4)}
    old = mc.summary([{"held_out": False, "error": 0.3, "uncalibrated_error": 0.1}])   # rows without `fitted`
    assert old["fitted"]["rows"] == 1 and old["held_out"] == {"rows": 0, "median_abs_error": None, "max_abs_error": None,
                                                              "uncalibrated_median_abs_error": None,
                                                              "uncalibrated_max_abs_error": None}
    assert statistics.median([0.1, 0.2]) == pytest.approx(0.15)


def test_record_writes_the_base_and_the_fit(tmp_path):
    c = load_ceilings("h100", None)
    params = {"matmul": 0.8, "launch_s": 3e-6, "memory_launch_s": 1e-6}
    r = mc.record(c, params, ["llama2-7b"])
    assert (r["gpu"], r["sm_count"], r["source"], r["base"]) == ("H100-SXM", 132, "mlsys calibrate", "datasheet")
    assert r["peak_flops"] == {k: v for k, v in c.base_flops.items() if v} and "fp4" not in r["peak_flops"]
    assert r["peak_flops"]["bf16"] == 989.5e12
    assert r["bandwidth_Bps"] == {"read": 3.35e12, "write": 3.35e12}
    assert r["efficiency"]["matmul"] == 0.8 and r["efficiency"]["memory"] == c.efficiency.memory == 0.89
    assert (r["launch_overhead_s"], r["kernel_gap_s"], r["matmul_floor_s"]) == (3e-6, c.gap_s, c.matmul_floor_s)
    assert r["memory_launch_overhead_s"] == 1e-6 and r["fitted_on"] == ["llama2-7b"]
    assert "memory_launch_overhead_s" not in mc.record(c, {"launch_s": 3e-6, "matmul_floor_s": 1e-6}, [])
    assert mc.record(c, {"launch_s": 3e-6, "matmul_floor_s": 1e-6}, [])["matmul_floor_s"] == 1e-6
    path = tmp_path / "cal.json"
    mc.write_record(path, r)
    assert json.loads(path.read_text()) == r and path.read_text().endswith("}\n")


def _pred(kind: str, memory_class: str, **more):
    base = dict(kind=kind, memory_class=memory_class, compute_class="matmul", memory_s=1.0, compute_s=0.5,
                read_bytes=3.35e12, write_bytes=0.0, floor_s=1e-6, gap_s=5e-7, name="x")
    return SimpleNamespace(pred=SimpleNamespace(**{**base, **more}), count=3)


def test_fit_terms():
    c = load_ceilings("h100", None)
    memory = mc._term(_pred("memory", "memory"), c, step=True)
    # a memory-class kernel is priced again from its bytes: 3.35e12 B at 3.35e12 B/s over efficiency 0.89
    assert memory.memory_s == pytest.approx(1 / 0.89) and memory.count == 3 and memory.gap_s == 5e-7
    assert memory.skinny is False and (memory.kind, memory.compute_class, memory.memory_class) == ("memory", "matmul",
                                                                                                 "memory")
    assert memory.floor_s == 1e-6 and memory.compute_s == 0.5
    other = mc._term(_pred("memory", "memory_broadcast"), c)
    assert other.memory_s == 1.0 and other.gap_s == 0.0        # another class keeps its price; no gap off a step
    matmul = mc._term(_pred("matmul", "memory"), c, step=True)
    assert matmul.memory_s == 1.0 and matmul.compute_s == 0.5 and matmul.skinny is True


def test_ops_and_untimed_rows():
    assert mc._ops(_row(ops={"linears": {}})) == {"linears": {}}
    assert mc._ops(_row(ops="{'linears': {}}")) == {} and mc._ops(_row()) == {}
    case = mc.Case(_row(phase="train", ms=None), None, None, False)
    with pytest.raises(MlsysError, match="^calibrate: row 'model.forward|roofline|b1s128|bf16|' has no measured time$"):
        mc.observation(case, load_ceilings("h100", None))


def test_op_errors_on_a_measured_training_row():
    """Per forward linear: the profiler's time against the roofline's forward rows of that name (a training
    step's backward GEMMs, q_proj.dgrad and q_proj.wgrad, are not in the forward range); per kernel kind: all."""
    from pathlib import Path

    from mlsyscalc.bench.cases.model import roofline_options
    from mlsyscalc.bench.rows import ResultStore
    from mlsyscalc.calc.roofline.model import predict_model

    rows = ResultStore(Path(__file__).resolve().parents[1] / "reports" / "models" / "h100_fitset.jsonl").rows()
    ceilings = load_ceilings("h100", None)
    cases = [c for c in mc.load_cases(rows, {"llama2-7b"}) if c.case.phase == "train"][:1]
    assert cases
    (c,) = cases
    roof = predict_model(c.spec, ceilings, roofline_options(c.case))
    out = mc.op_errors(cases, ceilings)
    linears = [e for e in out if e["section"] == "linears"]
    kinds = {e["op"]: e for e in out if e["section"] == "kinds"}
    assert linears and kinds
    for e in linears:
        forward = sum(r.busy_s for r in roof.rows if r.pass_name == "forward"
                      and r.pred.name.removesuffix(".splitk_reduce") == e["op"])
        assert e["predicted_s"] == pytest.approx(forward) and forward > 0, e["op"]
        assert e["error"] == pytest.approx((e["measured_s"] - forward) / forward)
        assert e["held_out"] is (c.row.extra.get("model") == "llama2-7b") and e["phase"] == "train"
    measured = {name for name, v in c.row.extra["ops"]["linears"].items() if v.get("measured_s")}
    assert {e["op"] for e in linears} == measured >= {"q_proj", "o_proj", "down_proj"}
    for kind, e in kinds.items():
        assert e["predicted_s"] == pytest.approx(sum(r.busy_s for r in roof.rows if r.pred.kind == kind)), kind
