"""Serving: latency and throughput under load by discrete-event simulation, aggregated or disaggregated."""

from .._face import face

__getattr__, __dir__, __all__ = face(__name__, {
    "simulator": ("ServeOptions", "WorkloadSpec", "ServeResult", "simulate", "sweep_rates"),
    "disagg": ("DisaggResult", "simulate_disagg", "search_layouts"),
    "workload": ("Workload", "synthetic", "from_trace"),
    "iteration": ("IterationCost",),
})
