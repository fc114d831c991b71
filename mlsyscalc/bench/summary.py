"""Summaries of a sweep: geometric-mean speedup per (kernel, dtype), worst row, error count."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from .rows import Row


@dataclass(frozen=True)
class GroupSummary:
    kernel: str
    baseline: str
    dtype: str
    rows: int
    timed: int
    failed: int
    geomean_speedup: float | None
    min_speedup: float | None
    max_speedup: float | None
    worst_shape: str | None


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summarize(rows: list[Row]) -> list[GroupSummary]:
    groups: dict[tuple[str, str, str], list[Row]] = defaultdict(list)
    for row in rows:
        groups[(row.kernel, row.baseline, row.dtype)].append(row)
    out = []
    for (kernel, baseline, dtype), members in groups.items():
        # (speedup, row) of every timed row; untimed rows have speedup None
        timed = [(r.speedup, r) for r in members if r.speedup]
        worst = min(timed, key=lambda pair: pair[0]) if timed else None
        out.append(GroupSummary(
            kernel=kernel, baseline=baseline, dtype=dtype, rows=len(members), timed=len(timed),
            failed=sum(1 for r in members if r.error),
            geomean_speedup=geomean([speedup for speedup, _ in timed]),
            min_speedup=worst[0] if worst else None,
            max_speedup=max(speedup for speedup, _ in timed) if timed else None,
            worst_shape=worst[1].shape if worst else None,
        ))
    return out
