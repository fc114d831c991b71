"""The fewest GPUs that serve a request rate within an SLO (`mlsys serve --rate R --min-gpus`).

A layout is `replicas` copies of one engine of `tp` GPUs, tp from serve_disagg.TP_CHOICES within the
cluster's scale-up domain and fitting the model (the rule `--search` uses); the workload's requests
go round robin to the replicas, as `--search` sends them to its pools, and the percentiles are taken
over all requests together. One replica is exactly `mlsys serve --rate R --tp tp`.

Per tp, fewest GPUs first: the most replicas the budget leaves (fewer GPUs than the best layout found
so far) is simulated first; if even that misses, this tp cannot do better. Otherwise a bisection over
the replica count finds the fewest that holds (more replicas, less load each: the percentiles fall).
The probes of one call are capped as `--max-rate`'s (serve_capacity.MAX_SIMULATIONS, and the output
tokens of serve_limits.MAX_OUTPUT_TOKENS).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from ...errors import MlsysError, require
from ...specs.model import ModelSpec
from ..roofline.calibration import Ceilings
from .simulator import ServeOptions, ServeResult, iteration_cost, simulate
from .capacity import MAX_SIMULATIONS, POINT_KEYS, missed
from .iteration import IterationCost
from .disagg import TP_CHOICES, tp_fits, cluster_for
from .limits import MAX_OUTPUT_TOKENS
from .metrics import PERCENTILES, percentile
from .slo import meets
from .workload import Workload

DEFAULT_BUDGET_GPUS = 64  # --max-gpus with --min-gpus: eight 8-GPU nodes
MAX_BUDGET_GPUS = 1024  # the bisection over replicas takes log2 of it


@dataclass(frozen=True)
class LayoutPoint:
    replicas: int
    tp: int
    metrics: dict[str, Any]  # over all requests: percentiles, throughput, goodput
    met: bool

    @property
    def gpus(self) -> int:
        return self.replicas * self.tp

    def as_dict(self) -> dict[str, Any]:
        return {"replicas": self.replicas, "tp": self.tp, "gpus": self.gpus, "meets_slo": self.met,
                **{k: self.metrics[k] for k in POINT_KEYS}}


@dataclass(frozen=True)
class MinGpus:
    best: LayoutPoint
    points: tuple[LayoutPoint, ...]  # in the order simulated
    budget: int
    tps: tuple[int, ...]  # the tensor-parallel sizes that fit


def combined(workload: Workload, replicas: int, run: Callable[[Workload], ServeResult]) -> dict[str, Any]:
    """Metrics of `replicas` engines, request i to engine i mod replicas; run(Workload) -> ServeResult."""
    parts = [Workload(workload.requests[k::replicas], workload.source, workload.shared_prefix)
             for k in range(replicas)]
    results = [run(w) for w in parts]
    out: dict[str, Any] = {}
    for name in ("ttft", "tpot", "e2e"):
        values = [v for r in results for v in r.latencies[name]]
        out.update({f"{name}_p{q}_s": percentile(values, q) for q in PERCENTILES})
    start = workload.requests[0][0]
    end = max(w.requests[0][0] + r.metrics["makespan_s"] for w, r in zip(parts, results))
    good = sum(round(r.metrics["slo_attainment"] * len(w.requests)) for w, r in zip(parts, results))
    span = end - start
    out["throughput_requests_per_s"] = len(workload.requests) / span if span > 0 else 0.0
    out["goodput_requests_per_s"] = good / span if span > 0 else 0.0
    return out


class _Layouts:
    def __init__(self, spec: ModelSpec, ceilings: Ceilings, workload: Workload, opts: ServeOptions,
                 draft: ModelSpec | None):
        self.spec, self.ceilings, self.workload, self.opts, self.draft = spec, ceilings, workload, opts, draft
        self.costs: dict[int, IterationCost] = {}
        self.points: dict[tuple[int, int], LayoutPoint] = {}
        self.tokens = sum(o for _, _, o in workload.requests)

    def __call__(self, replicas: int, tp: int) -> LayoutPoint:
        if (replicas, tp) not in self.points:
            n = len(self.points) + 1
            require(n <= MAX_SIMULATIONS, f"--min-gpus: no answer within {MAX_SIMULATIONS} simulations")
            require(n * self.tokens <= MAX_OUTPUT_TOKENS,
                    f"--min-gpus: {n} simulations of {self.tokens:,} output tokens each pass the cap of "
                    f"{MAX_OUTPUT_TOKENS:,} (fewer --requests or a shorter --output-len)")
            opts = replace(self.opts, tp=tp)
            cost = self.costs.setdefault(tp, iteration_cost(self.spec, self.ceilings, opts))
            metrics = combined(self.workload, replicas,
                               lambda w: simulate(self.spec, self.ceilings, w, opts, cost, self.draft))
            self.points[(replicas, tp)] = LayoutPoint(replicas, tp, metrics, meets(metrics, opts.slo))
        return self.points[(replicas, tp)]


def _fewest(probe: _Layouts, tp: int, most: int) -> int | None:
    """The fewest replicas of tp GPUs, at most `most`, that hold (None if `most` misses)."""
    if most < 1 or not probe(most, tp).met:
        return None
    missing, holding = 0, most
    while holding - missing > 1:
        mid = (missing + holding) // 2
        if probe(mid, tp).met:
            holding = mid
        else:
            missing = mid
    return holding


def min_gpus(spec: ModelSpec, ceilings: Ceilings, workload: Workload, opts: ServeOptions, budget: int,
             draft: ModelSpec | None = None) -> MinGpus:
    require(bool(opts.slo.terms), "--min-gpus needs percentile targets, e.g. --slo ttft_p99=0.5,tpot_p99=0.05 "
                                  "(ttft=S alone is a per-request threshold for goodput)")
    require(1 <= budget <= MAX_BUDGET_GPUS, f"--max-gpus: {budget:,} GPUs; --min-gpus searches at most "
                                            f"{MAX_BUDGET_GPUS:,}")
    require(not workload.concurrency, "--min-gpus splits an open-loop rate: it does not combine with --concurrency")
    opts.validate()
    cluster = cluster_for(ceilings, opts.cluster)
    tps = tuple(tp for tp in TP_CHOICES if tp <= budget and tp_fits(spec, ceilings, opts, tp, cluster))
    require(len(tps) > 0, f"{spec.name}: no tensor-parallel size in {TP_CHOICES} fits within {budget} GPUs")
    probe = _Layouts(spec, ceilings, workload, opts, draft)
    best: LayoutPoint | None = None
    for tp in tps:
        limit = budget if best is None else best.gpus - 1
        replicas = _fewest(probe, tp, min(limit // tp, len(workload.requests)))
        if replicas is not None:
            best = probe(replicas, tp)
    if best is None:
        largest = max(probe.points.values(), key=lambda p: p.gpus)
        raise MlsysError(f"no layout of at most {budget} GPUs serves {workload.source} within the SLO; the largest "
                         f"tried, {largest.replicas} x tp{largest.tp}: {missed(largest.metrics, opts.slo)} "
                         "(a larger --max-gpus, or looser targets)")
    return MinGpus(best, tuple(probe.points.values()), budget, tps)
