"""models_report's memory scoring: every row's peak-memory error with today's prediction
(`bench.cases.model.predicted_peak_bytes`: calc.memory, the cuBLAS workspaces and the caching
allocator's rounding), not the one stored by the commit that measured the row."""

from __future__ import annotations

from dataclasses import replace

from ..bench.cases.model import predicted_peak_bytes
from ..bench.model_calibrate import load_cases
from ..bench.rows import Row


def _capability(row: Row) -> tuple[int, int]:
    major, _, minor = str(row.env.get("capability") or "9.0").partition(".")
    return int(major), int(minor or 0)


def rescored_memory(rows: list[Row]) -> list[Row]:
    """The rows with `predicted_peak_bytes` and `memory_error` = (predicted - measured) / measured
    recomputed for the card each row ran on; rows without a measured peak are kept as they are."""
    measured = [r for r in rows if r.extra.get("peak_bytes")]
    cases = {c.row.key: c for c in load_cases(measured, set(), keep=lambda r: True)}
    out = []
    for r in rows:
        c = cases.get(r.key) if r.extra.get("peak_bytes") else None
        if c is None:
            out.append(r)
            continue
        want, peak = predicted_peak_bytes(c.spec, c.case, _capability(r)), r.extra["peak_bytes"]
        out.append(replace(r, extra={**r.extra, "predicted_peak_bytes": want, "memory_error": (want - peak) / peak}))
    return out
