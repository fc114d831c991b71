"""Does a calibration transfer? A spec fitted on one GPU count, checked on the others (reports/comm/transfer.md).

The protocol model (`bench.comm_fit`) keeps, per collective, a per-call base latency, a per-step
latency and a bandwidth per protocol; the ring's step count and bytes per GPU carry it from the GPU
count it was fitted on to any other of the same links. This page holds the proof: per collective and
GPU count, |predicted - measured| / measured over sizes >= a threshold, for the fitted spec and for a
datasheet spec, with the rows the fit saw (in-sample) kept apart from those it did not (held out).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from ..calc.comm.collectives import COLLECTIVES, collective_cost
from ..specs.cluster import ClusterSpec
from ..units import fmt_bytes
from .markdown import markdown_table


def transfer_errors(rows: list[dict[str, Any]], cluster: ClusterSpec | str,
                    min_size: int) -> dict[tuple[str, int], dict[str, float]]:
    """(collective, gpus) -> median, max |error| and row count over correct single-node rows >= min_size."""
    groups: dict[tuple[str, int], list[float]] = {}
    for r in rows:
        if r.get("ok") and r.get("time_s") and r.get("nodes", 1) == 1 and r["size_bytes"] >= min_size:
            predicted = collective_cost(r["collective"], r["size_bytes"], r["gpus"], cluster).time_s
            groups.setdefault((r["collective"], r["gpus"]), []).append(abs(predicted / r["time_s"] - 1))
    return {key: {"median_abs_error": statistics.median(errs), "max_abs_error": max(errs), "rows": len(errs)}
            for key, errs in groups.items()}


def _cell(errors: dict[tuple[str, int], dict[str, float]], key: tuple[str, int]) -> str:
    e = errors.get(key)
    return "-" if e is None else f"{100 * e['median_abs_error']:.1f}% / {100 * e['max_abs_error']:.1f}%"


def transfer_lines(rows: list[dict[str, Any]], fitted: ClusterSpec, fit_gpus: int, datasheet: ClusterSpec | str,
                   min_size: int) -> list[str]:
    """The markdown of the transfer page: one row per collective and GPU count."""
    ours, sheet = transfer_errors(rows, fitted, min_size), transfer_errors(rows, datasheet, min_size)
    keys = sorted(ours, key=lambda k: (COLLECTIVES.index(k[0]), k[1]))
    table = [[c, g, "in-sample" if g == fit_gpus else "held out (other GPU count)", ours[(c, g)]["rows"],
              _cell(ours, (c, g)), _cell(sheet, (c, g))] for c, g in keys]
    name = datasheet if isinstance(datasheet, str) else datasheet.name
    env: dict[str, Any] = next((r.get("env", {}) for r in rows if r.get("env")), {})
    return [
        "# Collectives: a calibration on one GPU count, checked on the others", "",
        f"Spec `{fitted.name}` fitted (protocol model, `mlsyscalc/bench/comm_fit.py`) on the {fit_gpus}-GPU rows only; "
        f"every other GPU count is predicted through the ring's step count and bytes per GPU "
        f"(docs/comm.md). Rows: {env.get('gpu', '?')}, NCCL {env.get('nccl', '?')}, torch {env.get('torch', '?')}, "
        f"commit {str(env.get('git_commit', '?'))[:7]}, NVLS off.", "",
        f"|predicted - measured| / measured, median / max, over sizes >= {fmt_bytes(min_size)}:", "",
        *markdown_table(["collective", "GPUs", "rows the fit", "rows", f"fitted on {fit_gpus} GPUs", f"datasheet `{name}`"],
                        table, "lrlrrr"),
        "",
    ]


def write_transfer(rows: list[dict[str, Any]], fitted: ClusterSpec, fit_gpus: int, datasheet: ClusterSpec | str,
                   min_size: int, out_dir: Path, command: str) -> Path:
    """Write `transfer.md` in out_dir; returns its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "transfer.md"
    lines = transfer_lines(rows, fitted, fit_gpus, datasheet, min_size)
    path.write_text("\n".join(lines + [f"Regenerate: `{command}`", ""]))
    return path
