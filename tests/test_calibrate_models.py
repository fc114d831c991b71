"""`mlsys calibrate`: the fast re-pricing equals a full roofline run with the written file, and
the fit recovers known ceilings from rows made with them (held-out rows included)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from mlsyscalc.calc.roofline.calibration import load_ceilings
from mlsyscalc.calc.roofline.calibration_fit import Observation, Term, fit, predict
from mlsyscalc.calc.roofline.model import predict_model
from mlsyscalc.specs.lookup import load_model

KNOWN = {"matmul": 0.6, "matmul_skinny": 0.7, "attention": 0.45, "memory": 0.8, "launch_s": 4e-6}


def test_repricing_by_hand():
    """Two rows at base efficiencies (0.5, 0.5, 1.0): a compute-bound matmul and a memory op."""
    obs = Observation("x", 1.0, (Term(2, "matmul", 1e-3, 0.5e-3), Term(3, "memory", 0.0, 2e-3)), (0.5, 0.5, 1.0))
    params = {"matmul": 1.0, "attention": 0.5, "memory": 0.5, "launch_s": 1e-6}
    # matmul: max(1e-3 x 0.5/1.0, 0.5e-3 x 1/0.5) = 1e-3, +1e-6, x2; memory: 2e-3 x 2 + 1e-6, x3
    assert predict(obs, params) == pytest.approx(2 * (1e-3 + 1e-6) + 3 * (4e-3 + 1e-6))


def _ceilings_dict(ceil, params):
    from mlsyscalc.bench.model_calibrate import record

    return record(ceil, params, ["m"])


@pytest.mark.parametrize("phase,batch,seq", [("prefill", 2, 512), ("decode", 16, 1024), ("train", 1, 1024)])
def test_fast_repricing_equals_the_roofline_with_the_written_file(phase, batch, seq):
    from mlsyscalc.bench.cases.model import ModelCase
    from mlsyscalc.bench.model_calibrate import Case, fit_options, observation
    from mlsyscalc.bench.rows import Row

    spec = load_model("llama3-8b")
    base = load_ceilings("H200")
    case = ModelCase(phase, batch, seq)
    row = Row("model." + phase, "graph", "s", "bf16", median_ms=1.0)
    obs = observation(Case(row, spec, case, False), base)
    assert predict(obs, {"matmul": base.efficiency.matmul, "attention": base.efficiency.attention,
                         "memory": base.efficiency.memory, "matmul_skinny": base.efficiency.matmul_skinny,
                         "launch_s": base.launch_s}) == pytest.approx(
        predict_model(spec, base, fit_options(case)).time_s, rel=1e-12)  # a fit prices at burst clocks
    fitted = load_ceilings("H200", _ceilings_dict(base, KNOWN))
    assert fitted.efficiency.matmul == KNOWN["matmul"] and fitted.launch_s == KNOWN["launch_s"]
    # a fitted file is used as fitted at either clocks (its efficiencies took in the measured rows' clocks)
    for options in (fit_options(case), replace(fit_options(case), clocks="sustained")):
        assert predict(obs, KNOWN) == pytest.approx(predict_model(spec, fitted, options).time_s, rel=1e-9)


def _synthetic_rows(tmp_path):
    """Rows as `mlsys bench model` writes them, with times the KNOWN ceilings predict."""
    from mlsyscalc.bench.cases.model import roofline_options, ModelCase
    from mlsyscalc.bench.rows import ResultStore, Row

    fitted = load_ceilings("H200", _ceilings_dict(load_ceilings("H200"), KNOWN))
    store = ResultStore(tmp_path / "rows.jsonl")
    cases = [("llama2-7b", "prefill", 1, 2048), ("llama2-7b", "decode", 1, 2048), ("llama2-7b", "decode", 64, 2048),
             ("gpt2", "decode", 1, 512), ("gpt2", "prefill", 8, 1024), ("llama2-7b", "decode", 32, 8192),
             ("tinyllama", "train", 4, 2048), ("qwen2.5-7b", "prefill", 4, 2048), ("qwen2.5-7b", "decode", 16, 2048),
             ("mixtral-8x7b", "decode", 16, 2048)]
    for name, phase, b, s in cases:
        ref, overrides = (("llama2-7b", ["hidden_size=2048", "num_hidden_layers=22", "intermediate_size=5632",
                                          "num_key_value_heads=4"]) if name == "tinyllama" else (name, []))
        from mlsyscalc.specs.lookup import parse_overrides

        spec = load_model(ref, parse_overrides(overrides) or None)
        layers = 4 if name == "mixtral-8x7b" else None
        from mlsyscalc.bench.cases.model import reduced_spec

        case = ModelCase(phase, b, s, True, "torch", "bf16", layers)
        t = predict_model(reduced_spec(spec, layers), fitted, roofline_options(case)).time_s
        store.append(Row(f"model.{phase}", "graph", f"B{b} S{s} {name}", "bf16", variant=name, ok=True, median_ms=t * 1e3,
                         env={"gpu": "NVIDIA H200"},
                         extra={"model": spec.name if name != "tinyllama" else "tinyllama", "model_ref": ref,
                                "overrides": overrides, "phase": phase, "batch": b, "seq": s, "mode": "graph",
                                "kernels": "torch", "layers": layers}))
    return store.path


def test_fit_recovers_known_ceilings_and_predicts_held_out_models(tmp_path):
    from click.testing import CliRunner

    from mlsyscalc.cli.main import cli

    rows = _synthetic_rows(tmp_path)
    out = tmp_path / "fit.json"
    result = CliRunner().invoke(cli, ["calibrate", str(rows), "--hold-out", "qwen2.5-7b,mixtral-8x7b",
                                      "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    for name in ("matmul", "launch_s"):
        assert data["params"][name] == pytest.approx(KNOWN[name], rel=0.02)
    # GEMMs pin matmul_skinny; the memory-bound norms/adds are small and mostly launch_s: memory loosely
    assert data["params"]["matmul_skinny"] == pytest.approx(KNOWN["matmul_skinny"], rel=0.02)
    assert data["params"]["memory"] == pytest.approx(KNOWN["memory"], rel=0.2)
    product = data["params"]["memory"] * data["params"]["matmul_skinny"]
    assert product == pytest.approx(KNOWN["memory"] * KNOWN["matmul_skinny"], rel=0.2)
    held = [r for r in data["rows"] if r["held_out"]]
    # five parameters, attention and memory only weakly pinned by these rows: Nelder-Mead stops
    # within ~1% of the rows, not at the exact optimum
    assert len(held) == 3 and all(abs(r["error"]) < 0.02 for r in held)
    assert data["summary"]["held_out"]["uncalibrated_median_abs_error"] > 0.05  # the datasheet start was off
    assert json.loads(out.read_text())["efficiency"]["matmul"] == data["params"]["matmul"]


def test_fit_needs_rows_outside_the_hold_out(tmp_path):
    from click.testing import CliRunner

    from mlsyscalc.cli.main import cli

    rows = _synthetic_rows(tmp_path)
    result = CliRunner().invoke(cli, ["calibrate", str(rows), "--hold-out",
                                      "llama2-7b,tinyllama,qwen2.5-7b,mixtral-8x7b,gpt2"])
    assert result.exit_code == 2 and "held out" in result.output


def test_bad_efficiency_in_a_file_is_a_clear_error():
    from mlsyscalc.errors import MlsysError

    with pytest.raises(MlsysError, match="efficiency.matmul"):
        load_ceilings("H200", {"gpu": "H200", "efficiency": {"matmul": -1}})
    with pytest.raises(MlsysError, match="unknown efficiency"):
        load_ceilings("H200", {"gpu": "H200", "efficiency": {"tensor": 0.5}})


def test_fit_alone_on_synthetic_terms():
    obs = [Observation(str(i), 0.0, (Term(10, "matmul", 1e-4 * i * i, 1e-5), Term(20, "memory", 0.0, 3e-5 * (4 - i))),
                       (0.74, 0.61, 0.89)) for i in range(1, 4)]
    obs = [Observation(o.label, predict(o, KNOWN), o.terms, o.base) for o in obs]
    got = fit(obs, {"matmul": 0.74, "attention": 0.61, "memory": 0.89, "launch_s": 2e-6})
    assert got["attention"] == 0.61  # no attention rows: left as it was
    for name in ("matmul", "memory", "launch_s"):
        assert got[name] == pytest.approx(KNOWN[name], rel=1e-3)


def test_linear_observation_reprices_its_roofline_rows():
    """A per-linear observation at the starting efficiencies prices exactly the roofline rows of
    that linear (and its split-K reduction): llama3-8b decode B1, q_proj over 32 layers."""
    from mlsyscalc.bench.cases.model import ModelCase, roofline_options
    from mlsyscalc.bench.model_calibrate import Case, linear_observations
    from mlsyscalc.bench.rows import Row

    spec, base = load_model("llama3-8b"), load_ceilings("H200")
    case = ModelCase("decode", 1, 2048)
    row = Row("model.decode", "graph", "s", "bf16", median_ms=1.0,
              extra={"ops": {"linears": {"q_proj": {"measured_s": 1e-3}, "missing": {"measured_s": 1e-3}}}})
    obs = linear_observations(Case(row, spec, case, False), base)
    assert [o.label.rsplit("|", 1)[-1] for o in obs] == ["q_proj"]
    roof = predict_model(spec, base, roofline_options(case))
    # a profiler times the kernels' own durations: the stream's gaps between them are not in it
    want = sum(r.busy_s for r in roof.rows if r.pred.name in ("q_proj", "q_proj.splitk_reduce"))
    assert want < sum(r.total_s for r in roof.rows if r.pred.name in ("q_proj", "q_proj.splitk_reduce"))
    start = {**{k: getattr(base.efficiency, k) for k in ("matmul", "attention", "memory", "matmul_skinny")},
             "launch_s": base.launch_s}
    assert predict(obs[0], start) == pytest.approx(want, rel=1e-12)
    assert any(r.pred.name == "q_proj.splitk_reduce" for r in roof.rows)  # 4096 x 4096 at B1 splits


def test_fit_only_rows_are_fitted_and_the_rest_scored(tmp_path):
    from click.testing import CliRunner

    from mlsyscalc.bench.rows import ResultStore
    from mlsyscalc.cli.main import cli

    rows = _synthetic_rows(tmp_path)
    fit_file = tmp_path / "fit.jsonl"
    keep = ResultStore(fit_file)
    for r in ResultStore(rows).rows():
        if r.extra["model"] == "llama2-7b":
            keep.append(r)
    result = CliRunner().invoke(cli, ["calibrate", str(rows), "--fit-only", str(fit_file), "--hold-out", "qwen2.5-7b",
                                      "--steps-only", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    fitted = {r["model"] for r in data["rows"] if r["fitted"]}
    assert fitted == {"llama2-7b"}
    assert {r["model"] for r in data["rows"] if not r["fitted"] and not r["held_out"]} >= {"gpt2", "tinyllama"}
