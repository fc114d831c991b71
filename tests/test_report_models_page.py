"""The whole-model page (mlsyscalc/report/models_report.py, models_report_host.py) on fit results and rows
written by hand: each goal line's count and median, the calibrated and eager lines and their thresholds, the
host-probe lines, the per-op summary, every rows-table cell, the latest row per case, and the errors figure."""

from __future__ import annotations

import statistics

import pytest

from mlsyscalc.bench.rows import Row
from mlsyscalc.report import models_report, models_report_host


def _fit(*rows):
    """fit["rows"] from (key, phase, uncalibrated error, calibrated error, held out[, mode, measured_s])."""
    out = []
    for key, phase, unc, err, held, *rest in rows:
        mode = rest[0] if rest else "eager"
        measured = rest[1] if len(rest) > 1 else 0.01
        out.append({"key": key, "phase": phase, "uncalibrated_error": unc, "error": err, "held_out": held,
                    "mode": mode, "measured_s": measured, "uncalibrated_s": measured / (1 + unc)})
    return {"rows": out}


def _table_rows(lines):
    return [line for line in lines[2:] if line.startswith("| ")]


def test_formats():
    assert models_report._pct(0.1234) == "+12.3%" and models_report._pct(-0.05) == "-5.0%"
    assert models_report._pct(None) is None and models_report._ms(None) is None
    assert models_report._ms(0.0123456) == "12.3" and models_report._ms(2.5) == "2.5e+03"
    assert models_report._share([0.15, -0.15, 0.1501, 0.0], 0.15) == "3/4"  # the limit itself counts


def test_uncalibrated_lines_per_phase_with_graph_training_apart():
    fit = _fit(("a", "train", 0.10, 0, False), ("b", "train", -0.30, 0, False), ("c", "train", 0.02, 0, False, "graph"),
               ("d", "decode", 0.05, 0, True), ("e", "decode", -0.20, 0, True), ("f", "decode", 0.14, 0, True))
    assert models_report.uncalibrated_lines(fit, " X") == [
        ["uncalibrated decode within +-15% X", "2/3", "+14.0%"],
        ["uncalibrated train within +-15% X", "1/2", "+20.0%"],  # median of |0.10|, |-0.30|
        ["uncalibrated train (CUDA graph) within +-15% X", "1/1", "+2.0%"]]


def test_calibrated_lines_held_out_share_mean_and_per_op_median():
    fit = _fit(("a", "train", 0, 0.02, True), ("b", "train", 0, -0.08, True), ("c", "train", 0, 0.5, False))
    ops = [{"section": "linears", "held_out": True, "error": e} for e in (0.05, -0.12, 0.09)]
    ops += [{"section": "linears", "held_out": False, "error": 0.9}, {"section": "kinds", "held_out": True, "error": 0.9}]
    lines = models_report.calibrated_lines(fit, ops, " L")
    assert lines[0] == ["calibrated L, held-out models, within +-5%", "1/2", "+5.0%"]
    assert lines[1][0].startswith("calibrated L, held-out models, mean |error| 5.0% at most 5%")
    assert lines[1][1:] == ["met", None]  # mean 5.0% is at most 5%
    assert lines[2] == ["per-op (forward linears, held-out) median within 10% after calibration L", "met", "+9.0%"]
    fit = _fit(("a", "train", 0, 0.02, True), ("b", "train", 0, -0.0801, True))
    ops = [{"section": "linears", "held_out": True, "error": e} for e in (0.11, -0.12)]
    lines = models_report.calibrated_lines(fit, ops)
    assert lines[1][1] == "not met" and lines[2][1:] == ["not met", "+11.5%"]
    lines = models_report.calibrated_lines({"rows": []}, [])
    assert lines == [["calibrated, held-out models, within +-5%", "0/0", None],
                     ["per-op (forward linears, held-out) median within 10% after calibration", "not met", None]]


def _row(key, ms, **extra):
    return Row("model.decode", "eager", "B1", "bf16", variant=key, median_ms=ms, extra=extra)


def test_eager_line_scores_todays_predictions_of_eager_rows():
    rows = [_row("a", 11.0), _row("b", 8.0), _row("c", 30.0)]
    eager = {rows[0].key: 0.010, rows[1].key: 0.010}  # c is not eager: left out
    assert models_report.eager_line(rows, eager) == [[
        "uncalibrated eager prefill/decode within +-15% (--impl torch, host path; not fitted)", "1/2", "+15.0%"]]
    assert models_report.eager_line(rows, {}) == []


def test_memory_line_closes_the_goals_table():
    rows = [_row("a", 1.0, memory_error=0.01), _row("b", 1.0, memory_error=-0.04), _row("c", 1.0)]
    table = models_report._memory_line([["x", "1/1", "+1.0%"]], rows)
    assert table[0] == "| goal | rows meeting it | median \\|error\\| |"
    assert table[1] == "| :--- | ---: | ---: |"
    assert table[2:] == ["| x | 1/1 | +1.0% |", "| peak memory within 3% of max_memory_allocated | 1/2 | +2.5% |"]
    assert models_report._memory_line([], [rows[2]])[2] == "| peak memory within 3% of max_memory_allocated | 0/0 |  |"


def test_probe_lines_price_probed_rows_with_their_own_host_costs():
    rows = [_row("t1", 12.0), _row("t2", 10.0), _row("e1", 9.0), _row("e2", 20.0)]
    t1, t2, e1, e2 = (r.key for r in rows)
    fit = _fit((t1, "train", 0.2, 0, False, "eager", 0.012), (t2, "train", 0.0, 0, False, "eager", 0.010),
               ("g", "train", 0.0, 0, False, "graph", 0.010))
    eager = {e1: 0.010, e2: 0.010}
    probed = {t1: 0.0125, e1: 0.009}
    lines = models_report_host.probe_lines(fit, rows, eager, probed)
    # train: t1 at its probe (12 / 12.5 - 1 = -4%), t2 at its uncalibrated 10 ms (0%); eager: e1 0%, e2 +100%
    assert lines == [
        ["uncalibrated train within +-15% (--impl torch, host probe of the same call: 1 rows; the others default host)",
         "2/2", "+2.0%"],
        ["uncalibrated eager prefill/decode within +-15% (--impl torch, host probe of the same call: 1 rows; the "
         "others default host)", "1/2", "+50.0%"]]
    only = models_report_host.probe_lines(fit, rows, eager, probed, {e1, e2})
    assert [line[1] for line in only] == ["1/2"] and "eager" in only[0][0]
    assert models_report_host.probe_lines(fit, rows, eager, probed, {t2}) == []
    assert models_report_host.probe_lines(fit, rows, eager, {}) == []
    assert models_report_host.probe_error(rows[0], probed) == "-4.0%"
    assert models_report_host.probe_error(rows[1], probed) is None


def test_op_summary_median_per_op_before_and_after():
    before = [{"section": "linears", "op": "q_proj", "error": e} for e in (0.2, -0.4, 0.1)]
    before += [{"section": "kinds", "op": "matmul", "error": 0.3}]
    after = [{"section": "linears", "op": "q_proj", "error": e} for e in (0.02, -0.05, 0.01)]
    after += [{"section": "kinds", "op": "matmul", "error": -0.1}, {"section": "linears", "op": "o_proj", "error": 0.07}]
    table = models_report.op_summary(after, before)
    assert table[0] == "| op | rows | median abs error (datasheet) | median abs error (calibrated) |"
    assert table[2:] == ["| kind: matmul | 1 | +30.0% | +10.0% |", "| o_proj | 0 |  | +7.0% |",
                         "| q_proj | 3 | +20.0% | +2.0% |"]


def test_rows_table_cells_from_the_fit_eager_and_stored_predictions():
    gib = 2**30
    fitted = Row("model.train", "eager", "B2 S512", "bf16", variant="f", median_ms=12.0,
                 extra={"model": "m", "phase": "train", "kernels": "torch", "peak_bytes": 3 * gib,
                        "memory_error": 0.021, "full_depth_estimated_s": None, "full_estimated_s": 0.5})
    eager = Row("model.decode", "eager", "B1", "bf16", variant="e", median_ms=9.0,
                extra={"model": "m", "phase": "decode", "kernels": "torch"})
    triton = Row("model.decode", "graph", "B1", "bf16", variant="t", median_ms=2.0, predicted_ms=2.5,
                 prediction_error=-0.2, extra={"model": "m", "phase": "decode", "kernels": "triton"}, error="y" * 100)
    fit = {"rows": [{"key": fitted.key, "uncalibrated_s": 0.010, "uncalibrated_error": 0.2, "error": -0.03,
                     "held_out": True}]}
    lines = models_report.rows_table([triton, fitted, eager], fit, {eager.key: 0.010}, {eager.key: 0.0075})
    assert lines[0].startswith("| model | phase | shape | mode | kernels | weights | measured ms | predicted ms | error |")
    body = [line for line in lines[2:] if line.startswith("| m ")]
    assert body == [
        "| m | decode | B1 | eager | torch | bf16 | 9 | 10 | -10.0% | +20.0% |  |  |  |  |  |",
        f"| m | decode | B1 | graph | triton | bf16 | 2 | 2.5 | -20.0% |  |  |  |  |  | {'y' * 90} |",
        "| m | train | B2 S512 | eager | torch | bf16 | 12 | 10 | +20.0% |  | held out -3.0% | 3.00 | +2.1% | 500 |  |"]


def test_latest_row_per_case_wins():
    a1 = Row("model.decode", "eager", "B1", "bf16", variant="a", median_ms=1.0, measured_at="2026-11-01")
    a2 = Row("model.decode", "eager", "B1", "bf16", variant="a", median_ms=2.0, measured_at="2026-11-03")
    a3 = Row("model.decode", "eager", "B1", "bf16", variant="a", median_ms=3.0, measured_at="2026-11-02")
    b = Row("model.decode", "eager", "B1", "bf16", variant="b", median_ms=4.0)
    latest = models_report.latest_rows([a1, a2, a3, b])
    assert sorted(r.median_ms for r in latest) == [2.0, 4.0]
    same = Row("model.decode", "eager", "B1", "bf16", variant="a", median_ms=5.0, measured_at="2026-11-03")
    assert [r.median_ms for r in models_report.latest_rows([a2, same])] == [5.0]  # a tie: the later file's


def test_a_parameter_not_fitted_apart_is_the_launch_cost():
    assert models_report._param({"launch_s": 4e-6}, "memory_launch_s") == 4e-6
    assert models_report._param({"launch_s": 4e-6, "memory_launch_s": 2e-6}, "memory_launch_s") == 2e-6
    assert models_report._param({"launch_s": 4e-6, "matmul": 0.8}, "matmul") == 0.8
    assert models_report.GOALS == (("uncalibrated whole step within +-15%", 0.15),
                                   ("calibrated, held-out models, within +-5%", 0.05))


def test_errors_figure_scatters_each_phase_before_and_after(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import matplotlib.figure
    import matplotlib.pyplot as plt
    kept = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, path, dpi=None: kept.append((fig, path, dpi)))
    monkeypatch.setattr(plt, "close", lambda fig: None)
    fit = _fit(("a", "prefill", 0.10, 0.01, False, "eager", 0.020), ("b", "prefill", -0.2, -0.04, True, "eager", 0.030),
               ("c", "decode", 0.05, 0.02, False, "eager", 0.005), ("d", "train", 0.3, 0.06, True, "eager", 0.5))
    models_report.plot(fit, tmp_path / "errors.png")
    (fig, path, dpi), = kept
    try:
        assert dpi == 110 and tuple(fig.get_size_inches()) == pytest.approx((12, 4.2))
        before, after = fig.axes
        offsets = [c.get_offsets().tolist() for c in before.collections]
        # (prefill, decode, train) x (fitted, held out): (measured ms, error %)
        assert offsets == [[[20.0, 10.0]], [[30.0, -20.0]], [[5.0, 5.0]], [], [], [[500.0, 30.0]]]
        assert [c.get_offsets().tolist() for c in after.collections] == [
            [[20.0, 1.0]], [[30.0, -4.0]], [[5.0, 2.0]], [], [], [[500.0, 6.0]]]
        assert [c.get_label() for c in before.collections] == [
            "prefill", "prefill (held out)", "decode", "decode (held out)", "train", "train (held out)"]
        (band,) = before.patches
        assert (band.get_y(), band.get_height()) == (-15, 30)
        (band,) = after.patches
        assert (band.get_y(), band.get_height()) == (-5, 10)
        assert before.get_xscale() == "log" and before.get_xlabel() == "measured step (ms)"
        assert before.get_ylabel() == "(measured - predicted) / predicted (%)"
        assert (before.get_title(), after.get_title()) == ("datasheet x default efficiency",
                                                           "calibrated (open marks: held out)")
        assert before.get_legend() is not None and after.get_legend() is None
    finally:
        plt.close(fig)
    assert statistics.median([1, 2]) == 1.5


def test_the_page_assembles_its_command_card_goals_and_fit_table(tmp_path, monkeypatch):
    """models_report.write with the fits, cases and figure replaced by fixed results: the command that makes the
    page, the card line, the fit's rows (defaults of the H200 datasheet ceilings beside each fit, us scaled), the
    memory-bound fixed cost falling back to the launch cost, calibration.json, and the returned README path."""
    import json

    rows = [Row("model.decode", "eager", "B1", "bf16", variant="a", median_ms=10.0,
                env={"gpu": "NVIDIA H200", "sm_count": 132, "torch": "2.11", "triton": "3.6", "cuda": "13.0",
                     "git_commit": "c2"}, extra={"model": "m", "phase": "decode"}),
            Row("model.train", "eager", "B1", "bf16", variant="b", median_ms=20.0, env={"git_commit": "c1"},
                extra={"model": "m", "phase": "train"})]
    stores = {"rows.jsonl": rows[:1], "fresh.jsonl": rows[1:]}
    monkeypatch.setattr(models_report, "ResultStore", lambda path: type("S", (), {"rows": lambda self: stores[path.name]})())
    from mlsyscalc.calc.roofline.calibration import CLASSES

    params = {**{key: 0.25 for key in CLASSES}, "matmul": 0.8123, "matmul_skinny": 0.7, "attention": 0.6,
              "attention_small_head": 0.5, "memory": 0.9, "launch_s": 3.5e-6, "matmul_floor_s": 1.25e-6}
    steps = {**params, "matmul": 0.79, "memory_launch_s": 1.5e-6}

    def calibrate(rows, base, hold_out, keys, impl="torch", per_op=True):
        fitted = params if per_op else steps
        return {"rows": [{"key": r.key, "phase": r.extra["phase"], "uncalibrated_error": 0.1, "error": 0.02,
                          "held_out": r.variant == "b", "measured_s": r.median_ms * 1e-3,
                          "uncalibrated_s": r.median_ms * 1e-3 / 1.1} for r in rows],
                "record": {"gpu": "H200", "fitted_on": ["m1", "m2"], "notes": impl}, "params": fitted}

    monkeypatch.setattr(models_report, "calibrate", calibrate)
    for name, value in (("load_cases", []), ("eager_predictions", {}), ("probe_predictions", {}), ("op_errors", [])):
        monkeypatch.setattr(models_report, name, lambda *a, _v=value, **k: _v)
    monkeypatch.setattr(models_report, "plot", lambda fit, path: None)
    monkeypatch.setattr(models_report, "rescored_memory", lambda rows: rows)
    out = tmp_path / "out"
    page = models_report.write([tmp_path / "rows.jsonl"], out, {"m2", "m1"}, "H200", None, [tmp_path / "fresh.jsonl"])
    assert page == out / "README.md"
    assert json.loads((out / "calibration.json").read_text()) == {"gpu": "H200", "fitted_on": ["m1", "m2"], "notes": "torch"}
    text = page.read_text()
    lines = text.splitlines()
    assert lines[2] == (f"Generated by `python -m mlsyscalc.report.models_report {tmp_path / 'rows.jsonl'} --fresh "
                        f"{tmp_path / 'fresh.jsonl'} {out} --hold-out m1,m2 --gpu H200` from rows written by `mlsys "
                        "bench model ...` (scripts/device_models*.sh). Do not edit by hand; the analysis lives in "
                        "notes.md, included below.")
    assert lines[4].startswith("Card: NVIDIA H200 (132 SMs), torch 2.11, triton 3.6, CUDA 13.0; rows measured at "
                               "commits c1, c2.")
    assert "on the H200 datasheet x default efficiencies" in lines[4]
    assert f"## Goals on the rows of {tmp_path / 'fresh.jsonl'} only" in lines
    assert "Fitted on m1, m2; held out: m1, m2." in lines
    for row in ("| matmul efficiency | 0.74 | 0.812 | 0.790 |", "| memory efficiency | 0.89 | 0.900 | 0.900 |",
                "| fixed cost per GEMM / attention kernel (us) | 2.0 | 3.500 | 3.500 |",
                "| GEMM floor, fixed cost apart (us) | 2.15 | 1.250 | 1.250 |",
                "| fixed cost per memory-bound kernel (us; steps only: the GEMM one) | 2.0 | 3.500 | 1.500 |",
                "| GEMM stream (matmul_skinny) | 0.78 | 0.700 | 0.700 |",
                "| memory_broadcast (not fitted) | 0.32 | 0.250 | 0.250 |", "| attention_small_head | 0.49 | 0.500 | 0.500 |"):
        assert any(line.startswith(row) for line in lines), row
    assert text.index("## Goals") < text.index("## The fit") < text.index("## Per op") < text.index("## Every row")
    assert lines[-1] == "![errors](errors.png)"


def test_goals_table_order_with_eager_probe_fused_and_both_fits():
    rows = [_row("t1", 12.0), _row("e1", 9.0, memory_error=0.01)]
    t1, e1 = (r.key for r in rows)
    fit = _fit((t1, "train", 0.2, 0.03, True, "eager", 0.012))
    fused = _fit((t1, "train", 0.1, 0.0, True, "eager", 0.012))
    steps = (_fit((t1, "train", 0.2, 0.06, True, "eager", 0.012)), [])
    table = models_report.goals(fit, [], rows, fused, steps, {e1: 0.010}, {e1: 0.009})
    names = [line.split(" | ")[0][2:] for line in table[2:]]
    assert names == [
        "uncalibrated train within +-15% (--impl torch)",
        "uncalibrated eager prefill/decode within +-15% (--impl torch, host path; not fitted)",
        "uncalibrated train within +-15% (--impl torch, host probe of the same call: 0 rows; the others default host)",
        "uncalibrated eager prefill/decode within +-15% (--impl torch, host probe of the same call: 1 rows; the others "
        "default host)",
        "uncalibrated train within +-15% (--impl fused)",
        "calibrated (steps + per-op fit), held-out models, within +-5%",
        "calibrated (steps + per-op fit), held-out models, mean \\|error\\| 3.0% at most 5% (the anchors are means: "
        "LLMCompass 4.1%, Calculon 3.65%)",
        "per-op (forward linears, held-out) median within 10% after calibration (steps + per-op fit)",
        "calibrated (steps-only fit), held-out models, within +-5%",
        "calibrated (steps-only fit), held-out models, mean \\|error\\| 6.0% at most 5% (the anchors are means: "
        "LLMCompass 4.1%, Calculon 3.65%)",
        "per-op (forward linears, held-out) median within 10% after calibration (steps-only fit)",
        "peak memory within 3% of max_memory_allocated"]
    assert table[3].endswith("| 1/1 | +10.0% |")  # e1 at the default host path: |9 ms / 10 ms - 1|
    assert table[5].endswith("| 1/1 | +0.0% |")  # e1 at its probe: 9 ms against 9 ms
