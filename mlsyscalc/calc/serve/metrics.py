"""Latency percentiles, throughput, goodput and time series of a simulated serving run.

Per request: TTFT = first token - arrival; TPOT = (last token - first token) / (output - 1)
(requests with one output token have no TPOT); end-to-end = last token - arrival; queueing
delay = first scheduled - arrival. Percentiles interpolate linearly between order statistics
(numpy's default). Throughput divides by the makespan, first arrival to last token. Goodput
counts the requests that meet every given SLO (DistServe, Zhong et al. OSDI 2024, section 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .engine import Trace
    from .workload import Requests

PERCENTILES = (50, 90, 99)
SERIES_POINTS = 100  # time buckets of the KV-utilisation / preemption series


@dataclass(frozen=True)
class Slo:
    """Per-request thresholds (goodput) and percentile targets (calc.serve.slo: `ttft_p99=0.5`)."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    terms: tuple[tuple[str, int, float], ...] = ()  # (metric, percentile, limit_s): the run's percentile <= limit

    def met(self, ttft: float, tpot: float | None, e2e: float | None = None) -> bool:
        return ((self.ttft_s is None or ttft <= self.ttft_s)
                and (self.tpot_s is None or tpot is None or tpot <= self.tpot_s)
                and (self.e2e_s is None or e2e is None or e2e <= self.e2e_s))

    @property
    def given(self) -> bool:
        return bool(self.terms) or any(v is not None for v in (self.ttft_s, self.tpot_s, self.e2e_s))


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    pos = (len(v) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def latencies(requests: Requests, trace: Trace) -> dict[str, list[float]]:
    """Per request; arrival is when the request reached the engine (a closed loop's clients send late)."""
    out: dict[str, list[float]] = {"ttft": [], "tpot": [], "e2e": [], "queue": []}
    arrivals = trace.arrival_s or [a for a, _, _ in requests]
    for i, (_, _, output) in enumerate(requests):
        arrival = arrivals[i]
        out["ttft"].append(trace.first_s[i] - arrival)
        out["e2e"].append(trace.finish_s[i] - arrival)
        out["queue"].append(trace.sched_s[i] - arrival)
        if output > 1:
            out["tpot"].append((trace.finish_s[i] - trace.first_s[i]) / (output - 1))
    return out


def summary(requests: Requests, trace: Trace, total_blocks: int, slo: Slo) -> dict[str, float | int | None]:
    lat = latencies(requests, trace)
    makespan = max(trace.finish_s) - requests[0][0]
    out: dict[str, float | int | None] = {}
    for name in ("ttft", "tpot", "e2e", "queue"):
        key = "queue_delay" if name == "queue" else name
        for q in PERCENTILES:
            out[f"{key}_p{q}_s"] = percentile(lat[name], q)
        out[f"{key}_mean_s"] = sum(lat[name]) / len(lat[name]) if lat[name] else None
    good = 0
    tpots = iter(lat["tpot"])
    for i, (_, _, output) in enumerate(requests):
        good += slo.met(lat["ttft"][i], next(tpots) if output > 1 else None, lat["e2e"][i])
    out.update(_throughput(requests, trace, makespan, good))
    out.update(_kv(trace, total_blocks))
    return out


def _throughput(requests: Requests, trace: Trace, makespan: float, good: int) -> dict[str, float | int]:
    n = len(requests)
    return {
        "requests": n, "makespan_s": makespan, "iterations": len(trace.iter_end_s),
        "busy_fraction": trace.busy_s / makespan if makespan > 0 else 0.0,
        "throughput_requests_per_s": n / makespan if makespan > 0 else 0.0,
        "throughput_tokens_per_s": sum(o for _, _, o in requests) / makespan if makespan > 0 else 0.0,
        "input_tokens_per_s": sum(p for _, p, _ in requests) / makespan if makespan > 0 else 0.0,
        "goodput_requests_per_s": good / makespan if makespan > 0 else 0.0,
        "slo_attainment": good / n,
        "mean_in_system": _time_mean(trace, trace.iter_in_system),
        "mean_batch_tokens": sum(trace.iter_batch_tokens) / max(1, len(trace.iter_batch_tokens)),
    }


def _time_mean(trace: Trace, values: list[int]) -> float:
    """Time average of a per-iteration quantity over the iterations (idle gaps excluded)."""
    total = weighted = 0.0
    prev = None
    for end, v in zip(trace.iter_end_s, values):
        if prev is not None:
            weighted += v * (end - prev)
            total += end - prev
        prev = end
    return weighted / total if total else float(values[0] if values else 0)


def _kv(trace: Trace, total_blocks: int) -> dict[str, float | int]:
    used = trace.iter_used_blocks
    return {"preemptions": len(trace.preempt_s),
            "kv_utilization_mean": _time_mean(trace, used) / total_blocks if used else 0.0,
            "kv_utilization_max": max(used) / total_blocks if used else 0.0}


def series(trace: Trace, total_blocks: int, points: int = SERIES_POINTS) -> list[dict[str, float | int]]:
    """KV utilisation (mean over the bucket's iterations), preemptions and batch tokens over time."""
    if not trace.iter_end_s:
        return []
    end = trace.iter_end_s[-1]
    width = end / points
    buckets: list[list] = [[0.0, 0, 0, 0] for _ in range(points)]
    for t, used, tokens in zip(trace.iter_end_s, trace.iter_used_blocks, trace.iter_batch_tokens):
        b = buckets[min(points - 1, int(t / width))]
        b[0] += used
        b[1] += 1
        b[3] += tokens
    for t in trace.preempt_s:
        buckets[min(points - 1, int(t / width))][2] += 1
    return [{"t_s": (k + 1) * width, "kv_utilization": b[0] / b[1] / total_blocks if b[1] else 0.0,
             "preemptions": b[2], "iterations": b[1], "batch_tokens_mean": b[3] / b[1] if b[1] else 0.0}
            for k, b in enumerate(buckets)]
