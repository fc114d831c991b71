"""Timing arithmetic of `mlsys bench comm`: how long a trial runs and what a row reports of its trials.

A trial is `iters` back-to-back calls issued after a barrier; its time per call is the slowest rank's (the
ranks are coupled: a collective ends when the last rank has joined it). A row's time is the median trial;
the best and worst trial and the spread (median / best - 1) sit beside it, so a row that is not
reproducible says so. Two ways of issuing the calls are timed:

- eager: Python issues every call, as a training step does; while the device time of a call is below the
  host's cost to issue one, the stream is host-bound and its pace is the host's (`host_issue_s`, the
  seconds the slowest rank's Python spent issuing one call, shows it);
- graph: the calls are captured once in a CUDA graph and replayed, so the host issues nothing during the
  trial and the time is the GPUs' own (device time per call, what nccl-tests' `-G` mode measures).
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Sequence

TRIAL_TARGET_S = 0.01  # each timed trial runs at least about this long (MIN_ITERS calls at least)
MIN_ITERS, MAX_ITERS, MAX_GRAPH_ITERS = 5, 4000, 1000
WARMUP, PROBE_CALLS, TRIALS = 5, 8, 10


def iters_for(per_call_s: float, target_s: float = TRIAL_TARGET_S, lo: int = MIN_ITERS, hi: int = MAX_ITERS) -> int:
    """Calls that fill one trial of `target_s` at `per_call_s` each, clamped to [lo, hi]."""
    if not per_call_s > 0:
        return hi
    return int(min(hi, max(lo, math.ceil(target_s / per_call_s))))


def slowest_per_trial(by_rank: Sequence[Sequence[float]]) -> list[float]:
    """Per trial, the largest time over the ranks (every rank times the same trials in the same order)."""
    counts = {len(t) for t in by_rank}
    if len(counts) != 1:
        raise ValueError(f"ranks timed different numbers of trials: {sorted(counts)}")
    return [max(values) for values in zip(*by_rank)]


def summarize(trials: Sequence[float], prefix: str = "") -> dict[str, Any]:
    """Row keys of one timing mode: median, best and worst trial (seconds per call) and the spread."""
    if not trials or min(trials) <= 0:
        raise ValueError(f"trial times must be positive, got {list(trials)}")
    median = statistics.median(trials)
    return {f"{prefix}time_s": median, f"{prefix}time_min_s": min(trials), f"{prefix}time_max_s": max(trials),
            f"{prefix}trial_spread": median / min(trials) - 1, f"{prefix}trial_times_s": list(trials)}
