"""The stream's idle gap before each kernel: paid by a step, never by a kernel's own time (what a
profiler measures), read from a calibration file, refused when it is not a time."""

from __future__ import annotations

import json

import pytest

from mlsyscalc.calc.roofline.calibration import KERNEL_GAP_S, load_ceilings
from mlsyscalc.calc.roofline.calibration_fit import Observation, Term, predict
from mlsyscalc.calc.roofline.model import RooflineOptions, predict_model
from mlsyscalc.calc.roofline.ops import predict_memory_op
from mlsyscalc.specs.lookup import load_model

RECORD = {"gpu": "H100-SXM", "bandwidth_Bps": {"read": 3.35e12, "write": 3.35e12}}


def test_a_kernel_time_excludes_the_gap_and_its_step_share_includes_it():
    """A 64 MiB copy on the datasheet ceilings: the busy time by hand, + 2 us fixed cost; its share of a
    step adds the 0.5 us gap, and a row of 7 such kernels totals 7 x (busy + 2 + 0.5) us."""
    from mlsyscalc.calc.roofline.ops import OpRow

    ceil = load_ceilings("H100-SXM")
    op = predict_memory_op("x", 2**26, 2**26, gpu=ceil)
    busy = 2 * 2**26 / (3.35e12 * 0.89)
    assert KERNEL_GAP_S == 0.5e-6 and ceil.gap_s == KERNEL_GAP_S
    assert op.predicted_s == pytest.approx(busy + 2e-6, rel=1e-12)
    assert op.step_s == pytest.approx(busy + 2.5e-6, rel=1e-12)
    row = OpRow(op, "norm", "layers", 7)
    assert row.busy_s == pytest.approx(7 * (busy + 2e-6), rel=1e-12)
    assert row.total_s == pytest.approx(7 * (busy + 2.5e-6), rel=1e-12)


def test_a_model_step_pays_one_gap_a_kernel():
    """gpt2 decode B1: the step with the gap minus the step without it is 0.5 us x its kernels; the
    kernels' own times (what a profiler sums) do not move."""
    spec, opts = load_model("gpt2"), RooflineOptions(phase="decode", context=1023, impl="torch")
    with_gap = predict_model(spec, load_ceilings("H100-SXM", RECORD), opts)  # the default gap
    without = predict_model(spec, load_ceilings("H100-SXM", {**RECORD, "kernel_gap_s": 0}), opts)
    assert with_gap.kernels == without.kernels > 100
    assert with_gap.gap_s == pytest.approx(0.5e-6 * with_gap.kernels, rel=1e-12) and without.gap_s == 0
    assert sum(r.busy_s for r in with_gap.rows) == pytest.approx(sum(r.busy_s for r in without.rows), rel=1e-12)
    with_ops = sum(r.busy_s for r in with_gap.rows)
    assert with_gap.ops_s == pytest.approx(with_ops + with_gap.gap_s, rel=1e-12)
    assert with_gap.totals()["gap_s"] == with_gap.gap_s


def test_more_gap_never_shortens_a_step():
    spec, opts = load_model("llama2-7b"), RooflineOptions(phase="decode", batch=8, context=2048, impl="torch")
    times = [predict_model(spec, load_ceilings("H100-SXM", {**RECORD, "kernel_gap_s": g}), opts).time_s
             for g in (0, 1e-7, 5e-7, 2e-6)]
    assert times == sorted(times) and times[0] < times[-1]


def test_the_fit_adds_a_steps_gap_and_not_a_profilers():
    """A term's gap is a constant of the step it belongs to: predict adds count x gap, and a term
    without one (a profiler's kernel time) adds nothing."""
    base = (0.74, 0.61, 0.89, 0.78, 0.32, 0.12, 0.22, 0.78, 0.49)
    params = {"matmul": 0.74, "attention": 0.61, "memory": 0.89, "matmul_skinny": 0.78, "launch_s": 2e-6}
    step = Observation("s", 1.0, (Term(10, "memory", 0.0, 1e-6, gap_s=5e-7),), base)
    kernels = Observation("k", 1.0, (Term(10, "memory", 0.0, 1e-6),), base)
    assert predict(step, params) == pytest.approx(10 * (1e-6 + 2e-6 + 5e-7), rel=1e-12)
    assert predict(kernels, params) == pytest.approx(10 * (1e-6 + 2e-6), rel=1e-12)


@pytest.mark.parametrize("value", [-1e-6, "fast", True, float("inf")])
def test_a_bad_gap_in_a_calibration_file_exits_2(run_cli, tmp_path, value):
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({**RECORD, "kernel_gap_s": value}).replace("Infinity", "1e999"))
    code, _, err = run_cli("roofline", "gpt2", "--phase", "decode", "--context", "1023", "--calibration", str(path))
    assert code == 2 and "kernel_gap_s" in err and "Traceback" not in err


def test_the_gap_is_named_in_the_output(run_cli):
    d = run_cli.json("roofline", "gpt2", "--phase", "decode", "--context", "1023", "--impl", "torch")
    assert d["ceilings"]["kernel_gap_s"] == KERNEL_GAP_S
    assert d["totals"]["gap_s"] == pytest.approx(KERNEL_GAP_S * d["totals"]["kernels"], rel=1e-12)
    code, out, _ = run_cli("roofline", "gpt2", "--phase", "decode", "--context", "1023", "--impl", "torch")
    assert code == 0 and "idle on the stream before each kernel" in " ".join(out.split())


def test_a_fitted_file_without_the_key_means_what_it_meant():
    """A file `mlsys calibrate` wrote before the key existed fitted its fixed costs to steps with no gap
    priced, so it keeps pricing none (and says so); a measured-ceilings file without it (`mlsys bench
    ceilings`: no efficiency object) gets the default; a file with the key gets its value."""
    fitted = {**RECORD, "efficiency": {"memory": 0.8}, "launch_overhead_s": 2.8e-6}
    old = load_ceilings("H100-SXM", fitted)
    assert old.gap_s == 0 and any("kernel_gap_s" in n for n in old.notes)
    assert load_ceilings("H100-SXM", RECORD).gap_s == KERNEL_GAP_S
    assert load_ceilings("H100-SXM", {**fitted, "kernel_gap_s": 4e-7}).gap_s == 4e-7


def test_gap_us_sets_the_gap_for_roofline_and_serve(run_cli):
    """--gap-us 0 prices kernels back to back: the step falls by 0.5 us x its kernels; serving under the
    same load gets no slower without the gap (a faster iteration never lengthens a latency)."""
    args = ("roofline", "gpt2", "--phase", "decode", "--context", "1023", "--impl", "torch")
    default, none = run_cli.json(*args)["totals"], run_cli.json(*args, "--gap-us", "0")["totals"]
    assert none["gap_s"] == 0 and none["kernels"] == default["kernels"]
    assert default["predicted_s"] - none["predicted_s"] == pytest.approx(0.5e-6 * default["kernels"], rel=1e-9)
    assert run_cli.json(*args, "--gap-us", "2")["totals"]["gap_s"] == pytest.approx(2e-6 * default["kernels"], rel=1e-12)
    load = ("serve", "gpt2", "--rate", "2", "--requests", "30", "--seed", "1")
    with_gap, without = run_cli.json(*load), run_cli.json(*load, "--gap-us", "0")
    assert without["tpot_p50_s"] < with_gap["tpot_p50_s"]


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "fast"])
def test_a_bad_gap_us_exits_2(run_cli, value):
    for args in (("roofline", "gpt2", "--phase", "decode", "--context", "1023"), ("serve", "gpt2", "--rate", "1")):
        code, _, err = run_cli(*args, "--gap-us", value)
        assert code == 2 and "--gap-us" in err and "Traceback" not in err
