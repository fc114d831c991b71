"""Render `mlsys serve --max-rate` and `--min-gpus`: the answer, then every probe (ms in tables, s in JSON)."""

from __future__ import annotations

from ..calc.serve import capacity as cap
from ..calc.serve.capacity import Capacity
from ..calc.serve.min_gpus import MinGpus
from ..calc.serve.slo import as_dict as slo_dict, term_name
from . import render
from .serve_views import result_data

PROBE_KEYS = ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "e2e_p99_s", "throughput_requests_per_s",
              "goodput_requests_per_s")
PROBE_COLUMNS = ("TTFT p50 (ms)", "TTFT p99 (ms)", "TPOT p50 (ms)", "TPOT p99 (ms)", "e2e p99 (ms)", "requests/s",
                 "goodput (req/s)")
SEARCH_NOTE = ("From the saturation rate (every request at time 0), halve or double to a bracket, then bisect to "
               f"{cap.REL_TOL:.0%}; a probe {cap.CONFIRM_STEP:.0%} below the answer confirms it. Every probe simulates "
               "the same requests (one seed: the same gaps and lengths, the gaps scaled by 1/rate). "
               "docs/serving.md, 'Capacity under an SLO'.")


def _targets(slo) -> str:
    return ", ".join(f"{term_name(m, q)} <= {s * 1e3:g} ms" for m, q, s in slo.terms)


def _cells(point: dict) -> list:
    return [None if point[k] is None else point[k] * 1e3 if not k.endswith("_per_s") else point[k] for k in PROBE_KEYS]


def capacity_output(c: Capacity) -> render.Output:
    r = c.at_max
    points = sorted((p.as_dict() for p in c.probes), key=lambda p: p["rate_requests_per_s"])
    data = {"model": r.model, "gpu": r.gpu, "scheduler": r.options.scheduler, "tp": r.options.tp,
            "max_rate_requests_per_s": c.max_rate, "next_rate_requests_per_s": c.next_rate,
            "slo": slo_dict(r.options.slo, r.metrics), "tolerance": cap.REL_TOL, "monotone": c.monotone,
            "saturation_requests_per_s": c.saturation_rate, "simulations": c.simulations,
            "requests_per_point": r.metrics["requests"], "points": points,
            "at_max_rate": result_data(r, with_series=False)}
    title = (f"{r.model} on {r.gpu} ({r.options.scheduler}, tp {r.options.tp}): at most {c.max_rate:.4g} requests/s "
             f"within {_targets(r.options.slo)}")
    rows = [[p["rate_requests_per_s"], p["stage"], "yes" if p["meets_slo"] else "no", *_cells(p)] for p in points]
    misses = cap.missed(c.metrics_at(c.next_rate), r.options.slo)
    recipe = r.workload.source.split(", ", 1)[1]  # the source without its rate
    notes: tuple[str, ...] = (f"{c.next_rate:.4g} requests/s misses: {misses}.", SEARCH_NOTE,
                              f"{r.metrics['requests']:,} requests per probe ({recipe}).")
    if not c.monotone:
        notes += ("A confirming probe missed below a rate that held: the percentiles are not monotone in the rate "
                  "here; the answer is a rate below which every probe held.",)
    return render.Output(data, (render.table(title, ["rate (req/s)", "probe", "meets SLO", *PROBE_COLUMNS], rows),),
                         notes, records="points")


def min_gpus_output(m: MinGpus, model: str, gpu: str, slo, source: str) -> render.Output:
    b = m.best
    points = [p.as_dict() for p in sorted(m.points, key=lambda p: (p.tp, p.replicas))]
    data = {"model": model, "gpu": gpu, "workload": source, "min_gpus": b.gpus,
            "layout": {"replicas": b.replicas, "tp": b.tp, "gpus": b.gpus}, "max_gpus": m.budget,
            "tp_choices": list(m.tps), "slo": slo_dict(slo, b.metrics), "simulations": len(m.points),
            "points": points}
    title = (f"{model} on {gpu}: {b.gpus} GPUs ({b.replicas} x tp {b.tp}) serve {source} within {_targets(slo)}")
    rows = [[p["replicas"], p["tp"], p["gpus"], "yes" if p["meets_slo"] else "no", *_cells(p)] for p in points]
    notes = ("Replicas of one engine, requests round robin; percentiles over all requests. Per tensor-parallel size "
             "(those that fit one node and the model), the most replicas within the budget first, then a bisection "
             "over the replica count. docs/serving.md, 'Capacity under an SLO'.",)
    return render.Output(data, (render.table(title, ["replicas", "tp", "GPUs", "meets SLO", *PROBE_COLUMNS], rows),),
                         notes, records="points")
