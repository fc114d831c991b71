"""The training page of the 8-GPU run (scripts/validate/score_8gpu.py): each measured case against its committed prediction.

A row is scored only where it ran exactly what was priced (scripts/validate/eight_gpu_plan.py `differences`: layout, model,
sequence, SDPA backend). error = predicted / measured - 1; memory is the largest rank's
torch.cuda.max_memory_allocated against `memory_bytes_per_gpu`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # validate/, scripts/

import eight_gpu_plan as plan  # noqa: E402
from train_published import signed_summary  # noqa: E402

GIB = 2**30
STEP_GOAL, MEMORY_GOAL = 0.10, 0.03


def layout_name(row: dict[str, Any]) -> str:
    """TP 4 x PP 2, TP 2 x FSDP2 4, FSDP2 8, ..."""
    dims = [("TP", row["tp"]), ("PP", row["pp"]), ("FSDP2" if "fsdp" in row["case"] else "DP", row["dp"])]
    return " x ".join(f"{name} {n}" for name, n in dims if n > 1) or "1 GPU"


def score(rows: list[dict[str, Any]], predictions: dict[str, Any], repriced: dict[str, float]) -> list[dict[str, Any]]:
    """One entry a predicted case: measured and predicted numbers and errors, or why it is not scored."""
    out = []
    for p in predictions["predictions"]:
        planned = p["row"]
        entry: dict[str, Any] = {"case": planned["case"], "layout": layout_name(planned),
                                 "predicted_step_s": p["step_time_s"], "predicted_bytes": p["memory_bytes_per_gpu"],
                                 "predicted_optimizer_s": p["breakdown"].get("optimizer_s"),
                                 "repriced_step_s": repriced.get(planned["case"])}
        row = next((r for r in rows if r["case"] == planned["case"] and r["gpus"] == planned["gpus"]), None)
        if row is None:
            out.append(entry | {"not_scored": "no row"})
            continue
        entry |= {"measured_step_s": row["step_time_s"], "measured_fwd_bwd_s": row.get("fwd_bwd_s"),
                  "measured_optimizer_s": row.get("optimizer_s"), "measured_bytes": max(row["peak_bytes_per_rank"]),
                  "first_loss": row.get("first_loss")}
        differs = plan.differences(row, planned)
        if differs:
            out.append(entry | {"not_scored": "ran another layout than was priced: " + "; ".join(differs)})
            continue
        entry["step_error"] = p["step_time_s"] / row["step_time_s"] - 1
        if entry["measured_bytes"]:
            entry["memory_error"] = p["memory_bytes_per_gpu"] / entry["measured_bytes"] - 1
        out.append(entry)
    return out


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.1f}"


def _pct(value: float | None, signed: bool = True) -> str:
    return "-" if value is None else (f"{100 * value:+.1f}%" if signed else f"{100 * value:.1f}%")


def case_table(entries: list[dict[str, Any]]) -> list[list[Any]]:
    return [[e["case"], e["layout"], _ms(e.get("measured_step_s")), _ms(e["predicted_step_s"]), _pct(e.get("step_error")),
             _ms(e.get("measured_fwd_bwd_s")), _ms(e.get("measured_optimizer_s")), _ms(e["predicted_optimizer_s"]),
             f"{e['measured_bytes'] / GIB:.2f}" if e.get("measured_bytes") else "-", f"{e['predicted_bytes'] / GIB:.2f}",
             _pct(e.get("memory_error")), _ms(e["repriced_step_s"]), e.get("not_scored", "")] for e in entries]


def summary_lines(entries: list[dict[str, Any]]) -> list[str]:
    """Median and worst |error| and median signed error of step time and memory, and the goals."""
    from mlsyscalc.report.markdown import markdown_table

    scored = [e for e in entries if "step_error" in e]
    if not scored:
        return ["No case was scored.", ""]
    parts = [{"group": "step time", "error": e["step_error"]} for e in scored]
    parts += [{"group": "peak memory", "error": e["memory_error"]} for e in scored if "memory_error" in e]
    summary = signed_summary(parts)
    goals = {"step time": STEP_GOAL, "peak memory": MEMORY_GOAL}
    table = [[g, s["runs"], f"{sum(abs(p['error']) <= goals[g] for p in parts if p['group'] == g)} (within "
              f"{100 * goals[g]:.0f}%)", _pct(s["median_abs_error"], False), _pct(s["max_abs_error"], False),
              _pct(s["median_signed_error"])] for g, s in summary.items() if g in goals]
    return [*markdown_table(["quantity", "cases", "within the goal", "median |error|", "worst |error|",
                             "median signed"], table, "lrrrrr"), ""]


def train_lines(rows: list[dict[str, Any]], predictions: dict[str, Any], repriced: dict[str, float]) -> list[str]:
    from mlsyscalc.report.markdown import markdown_table

    entries = score(rows, predictions, repriced)
    columns = ["case", "layout", "step meas (ms)", "step pred (ms)", "step err", "f+b meas", "opt meas", "opt pred",
               "mem meas (GiB)", "mem pred (GiB)", "mem err", "step pred now (ms)", "not scored because"]
    return ["## Held out: each case against its committed prediction", "",
            *markdown_table(columns, case_table(entries), "llrrrrrrrrrrl"), "",
            "step pred now: the same planned row priced again by this page's commit (not the held-out number).", "",
            "## Errors over the scored cases (goals: step time within 10%, peak memory within 3%)", "",
            *summary_lines(entries)]
