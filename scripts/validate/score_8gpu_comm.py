"""The collectives page of the 8-GPU run (scripts/validate/score_8gpu.py): the committed predictions against the 8-GPU rows.

error = predicted / measured - 1 (negative: the prediction is faster than the measurement). An eager predictor is
scored on `time_s` (the median trial of calls issued back to back from Python), a graph predictor on `graph_time_s`
(the same calls replayed from a CUDA graph). The goal counts sizes >= 1 MiB.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # validate/, scripts/

import eight_gpu_plan as plan  # noqa: E402
from train_published import signed_summary  # noqa: E402

KEY = {"eager": "time_s", "graph": "graph_time_s"}
GOAL = 0.10
BUSBW_SIZES = (2**24, 2**28, 2**30)  # 16 MiB, 256 MiB, 1 GiB


def errors(rows: list[dict[str, Any]], predictions: list[dict[str, Any]], predictor: dict[str, Any],
           gpus: int = plan.GPUS) -> list[dict[str, Any]]:
    """One entry a measured row of `gpus` GPUs that the predictor priced: collective, size, error."""
    key = KEY[predictor["timing"]]
    priced = {(p["collective"], p["size_bytes"]): p["time_s"] for p in predictions
              if p["predictor"] == predictor["name"] and p["gpus"] == gpus}
    out = []
    for r in rows:
        if r["gpus"] == gpus and r.get("ok") and r.get(key) and (r["collective"], r["size_bytes"]) in priced:
            predicted = priced[(r["collective"], r["size_bytes"])]
            out.append({"group": r["collective"], "size_bytes": r["size_bytes"], "error": predicted / r[key] - 1,
                        "predicted_s": predicted, "measured_s": r[key]})
    return out


def _pct(value: float, signed: bool = False) -> str:
    return f"{100 * value:+.1f}%" if signed else f"{100 * value:.1f}%"


def summary_table(entries: list[dict[str, Any]]) -> list[list[Any]]:
    """Per collective and over all: points, within 10%, median and worst |error|, median signed error."""
    from mlsyscalc.calc.comm.collectives import COLLECTIVES

    summary = signed_summary(entries)
    order = [c for c in (*COLLECTIVES, "all") if c in summary]
    return [[c, summary[c]["runs"], summary[c]["within_10"], _pct(summary[c]["median_abs_error"]),
             _pct(summary[c]["max_abs_error"]), _pct(summary[c]["median_signed_error"], True)] for c in order]


def held_out_lines(rows: list[dict[str, Any]], predictions: dict[str, Any], label: str) -> list[str]:
    """For each predictor: its summary over the 8-GPU rows >= 1 MiB (the goal) and below."""
    from mlsyscalc.report.markdown import markdown_table

    columns = ["collective", "points", "within 10%", "median |error|", "worst |error|", "median signed"]
    lines = []
    for p in predictions["predictors"]:
        every = errors(rows, predictions["predictions"], p)
        big = [e for e in every if e["size_bytes"] >= plan.GOAL_MIN_SIZE]
        small = [e for e in every if e["size_bytes"] < plan.GOAL_MIN_SIZE]
        primary = " (primary)" if p["name"] == predictions.get("primary") else ""
        lines += [f"### `{p['name']}`{primary}: {p['what']}; {p['timing']} ({KEY[p['timing']]}), {label}", ""]
        if not big:
            lines += ["No 8-GPU row of at least 1 MiB with that time was measured.", ""]
            continue
        lines += ["Sizes >= 1 MiB (the goal):", "", *markdown_table(columns, summary_table(big), "lrrrrr"), ""]
        if small:
            s = signed_summary(small)["all"]
            lines += [f"Sizes < 1 MiB: {s['runs']} points, median |error| {_pct(s['median_abs_error'])}, median "
                      f"signed {_pct(s['median_signed_error'], True)}, worst {_pct(s['max_abs_error'])}.", ""]
    return lines


def per_size_lines(rows: list[dict[str, Any]], predictions: dict[str, Any], name: str) -> list[str]:
    """Signed error of one predictor at every 8-GPU size >= 1 MiB, collective by size."""
    from mlsyscalc.report.markdown import markdown_table
    from mlsyscalc.units import fmt_bytes

    predictor = next((p for p in predictions["predictors"] if p["name"] == name), None)
    entries = [e for e in errors(rows, predictions["predictions"], predictor) if e["size_bytes"] >= plan.GOAL_MIN_SIZE] \
        if predictor else []
    if not entries:
        return []
    sizes = sorted({e["size_bytes"] for e in entries})
    by = {(e["group"], e["size_bytes"]): e["error"] for e in entries}
    groups = list(dict.fromkeys(e["group"] for e in entries))
    table = [[g, *(_pct(by[(g, n)], True) if (g, n) in by else "-" for n in sizes)] for g in groups]
    return [f"### Signed error per size, `{name}`, 8 GPUs", "",
            *markdown_table(["collective", *map(fmt_bytes, sizes)], table, "l" + "r" * len(sizes)), ""]


def busbw_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Measured eager busbw (GB/s) of each collective at a few large sizes, by GPU count of this run."""
    from mlsyscalc.report.markdown import markdown_table
    from mlsyscalc.units import fmt_bytes

    counts = sorted({r["gpus"] for r in rows if r.get("ok")})
    by = {(r["collective"], r["gpus"], r["size_bytes"]): r.get("busbw_GBps") for r in rows if r.get("ok")}
    collectives = list(dict.fromkeys(r["collective"] for r in rows))
    cell = lambda v: "-" if v is None else f"{v:.0f}"  # noqa: E731
    table = [[c, *(cell(by.get((c, g, n))) for n in BUSBW_SIZES for g in counts)] for c in collectives]
    columns = ["collective", *(f"{fmt_bytes(n)}, {g} GPUs" for n in BUSBW_SIZES for g in counts)]
    return ["## Measured busbw (GB/s, eager, nccl-tests' definition) by GPU count", "",
            *markdown_table(columns, table, "l" + "r" * (len(columns) - 1)), ""]


def refit_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The same fits as the committed ones, made now from this run's 2- and 4-GPU rows, scored on its 8-GPU rows."""
    from predict_8gpu import comm_predictions, fitted_predictors

    entries = fitted_predictors(rows, "this run")
    if not entries:
        return ["## Fits of this run's own 2- and 4-GPU rows", "", "Not made: the run has no correct 2-GPU rows.", ""]
    refits = {"predictors": [{k: e[k] for k in ("name", "timing", "what")} for e in entries],
              "predictions": comm_predictions(entries)}
    return ["## Fits of this run's own 2- and 4-GPU rows, scored on its 8-GPU rows", "",
            "Made by this page from the rows of the same host (`predict_8gpu.fitted_predictors`, the code of the "
            "committed fits): held out by GPU count, but fitted after the run, so not committed beforehand.", "",
            *held_out_lines(rows, refits, "fitted after the run")]


def goal_line(rows: list[dict[str, Any]], predictions: dict[str, Any]) -> str:
    primary = next(p for p in predictions["predictors"] if p["name"] == predictions["primary"])
    big = [e for e in errors(rows, predictions["predictions"], primary) if e["size_bytes"] >= plan.GOAL_MIN_SIZE]
    if not big:
        return f"Goal (within 10% for sizes >= 1 MiB at 8 GPUs, `{primary['name']}`): not measured."
    within = sum(abs(e["error"]) <= GOAL for e in big)
    per = signed_summary(big)
    met = [c for c, s in per.items() if c != "all" and s["median_abs_error"] <= GOAL]
    return (f"Goal (within 10% for sizes >= 1 MiB at 8 GPUs), the primary prediction `{primary['name']}`: {within} of "
            f"{len(big)} (collective, size) points within 10%; median |error| within 10% for {len(met)} of "
            f"{len(per) - 1} collectives ({', '.join(met) or 'none'}); median |error| over all points "
            f"{_pct(statistics.median(abs(e['error']) for e in big))}.")
