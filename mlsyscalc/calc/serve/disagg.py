"""Prefill/decode disaggregation (DistServe, Zhong et al., OSDI 2024; Splitwise, Patel et al. 2024).

P prefill instances of tp_prefill GPUs and D decode instances of tp_decode GPUs. Requests go round
robin to the prefill instances, which run prompts only (the first token is sampled there: TTFT);
each prompt's KV cache then moves to a decode instance -- every prefill rank sends its shard to a
decode rank at once, one point-to-point transfer of (prompt x KV bytes per token / tp_prefill)
timed by the communication calculator over the cluster's NVLink when all GPUs fit one node, else
its inter-node link -- and the decode instances (round robin, in order of arrival of the KV) run
decode steps only. TPOT runs from the first token to the last, so it includes the transfer.

`search_layouts` tries every split and TP per role within a GPU budget and ranks them by goodput
per GPU under the SLO (DistServe's objective, section 4).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from ...errors import MlsysError, require
from ...specs.cluster import ClusterSpec, builtin_clusters, load_cluster
from ...specs.model import ModelSpec
from ..roofline.calibration import Ceilings
from ..comm.collectives import collective_cost
from ..memory.inference import InferOptions, infer_memory
from .simulator import ServeOptions, ServeResult, engine_limits, iteration_cost, kv_capacity, simulate
from .iteration import IterationCost
from .engine import ITERATION_LEVEL, POLICIES, Engine, Trace
from .limits import MAX_INSTANCES, MAX_SEARCH_GPUS, check_workload
from .metrics import summary
from .workload import Requests, Workload

TP_CHOICES = (1, 2, 4, 8)


@dataclass(frozen=True)
class Layout:
    prefill: int  # instances
    decode: int
    tp_prefill: int = 1
    tp_decode: int = 1

    @property
    def gpus(self) -> int:
        return self.prefill * self.tp_prefill + self.decode * self.tp_decode

    @property
    def name(self) -> str:
        return f"{self.prefill}P(tp{self.tp_prefill}):{self.decode}D(tp{self.tp_decode})"


def parse_layout(text: str, tp: int) -> Layout:
    p, sep, d = text.partition(":")
    try:
        layout = Layout(int(p), int(d), tp, tp)
    except ValueError:
        raise MlsysError(f"--disagg expects P:D instance counts, e.g. 1:2, got {text!r}") from None
    require(bool(sep) and layout.prefill >= 1 and layout.decode >= 1, f"--disagg needs P >= 1 and D >= 1, got {text!r}")
    require(max(layout.prefill, layout.decode) <= MAX_INSTANCES,
            f"--disagg {text}: at most {MAX_INSTANCES:,} instances in each pool")
    return layout


@dataclass(frozen=True)
class DisaggResult:
    layout: Layout
    metrics: dict[str, Any]
    pools: dict[str, Any]


def _transfer(spec: ModelSpec, opts: ServeOptions, layout: Layout, cluster: ClusterSpec) -> Callable[[int], float]:
    """Seconds to move one prompt's KV from a prefill instance to a decode instance (cached per length)."""
    ro = opts.roofline
    per_token = infer_memory(spec, InferOptions(kv_dtype=ro.kv_dtype_name, tp=1)).kv_bytes_per_token
    nodes = 1 if layout.gpus <= cluster.scale_up_gpus else 2
    memo: dict[int, float] = {}

    def seconds(prompt: int) -> float:
        if prompt not in memo:
            shard = max(1, int(prompt * per_token / layout.tp_prefill))
            memo[prompt] = collective_cost("p2p", shard, 2, cluster, nodes).time_s
        return memo[prompt]
    return seconds


def _pool(requests: Requests, cost: IterationCost, ceilings: Ceilings, opts: ServeOptions, count: int, prefilled: bool,
          spec: ModelSpec) -> list[tuple[list[int], Trace]]:
    kv = kv_capacity(spec, ceilings, opts)
    out = []
    for k in range(count):
        ids = list(range(k, len(requests), count))
        trace = Engine([requests[i] for i in ids], cost, engine_limits(kv, ceilings, opts), prefilled=prefilled).run()
        out.append((ids, trace))
    return out


def simulate_disagg(spec: ModelSpec, ceilings: Ceilings, workload: Workload, opts: ServeOptions, layout: Layout,
                    cluster: ClusterSpec, costs: dict[int, IterationCost] | None = None) -> DisaggResult:
    opts.validate()
    check_workload(workload)
    require(POLICIES[opts.scheduler].iteration_level, f"--disagg needs an iteration-level scheduler ({ITERATION_LEVEL})")
    require(not workload.concurrency, "--disagg does not combine with --concurrency")
    costs = costs if costs is not None else {}
    for tp in {layout.tp_prefill, layout.tp_decode}:
        if tp not in costs:  # (setdefault would fit a new cost for every layout of a search)
            costs[tp] = iteration_cost(spec, ceilings, replace(opts, tp=tp))
    reqs = workload.requests
    n = len(reqs)
    sched, first, finish = [0.0] * n, [0.0] * n, [0.0] * n
    p_opts, d_opts = replace(opts, tp=layout.tp_prefill), replace(opts, tp=layout.tp_decode)
    prefill_busy = decode_busy = 0.0
    preempt: list[float] = []
    for ids, trace in _pool([(a, p, 1) for a, p, _ in reqs], costs[layout.tp_prefill], ceilings, p_opts,
                            layout.prefill, False, spec):
        for k, i in enumerate(ids):
            sched[i], first[i], finish[i] = trace.sched_s[k], trace.first_s[k], trace.first_s[k]
        prefill_busy += trace.busy_s
        preempt += trace.preempt_s
    move = _transfer(spec, opts, layout, cluster)
    ready = sorted((first[i] + move(p), i) for i, (_, p, o) in enumerate(reqs) if o > 1)
    decode_reqs = [(t, reqs[i][1], reqs[i][2]) for t, i in ready]
    for ids, trace in _pool(decode_reqs, costs[layout.tp_decode], ceilings, d_opts, layout.decode, True, spec):
        for k, j in enumerate(ids):
            finish[ready[j][1]] = trace.finish_s[k]
        decode_busy += trace.busy_s
        preempt += trace.preempt_s
    combined = Trace(sched, first, finish, [], [], [], [], [], 0.0)
    combined.preempt_s = preempt
    metrics: dict[str, Any] = summary(reqs, combined, 1, opts.slo)  # DisaggResult.metrics
    makespan = metrics["makespan_s"]
    pools = {"layout": layout.name, "gpus": layout.gpus, "prefill_instances": layout.prefill,
             "decode_instances": layout.decode, "tp_prefill": layout.tp_prefill, "tp_decode": layout.tp_decode,
             "prefill_busy_fraction": prefill_busy / (layout.prefill * makespan),
             "decode_busy_fraction": decode_busy / (layout.decode * makespan) if layout.decode else 0.0,
             "kv_transfer_mean_s": sum(move(p) for _, p, o in reqs if o > 1) / max(1, len(decode_reqs)),
             "goodput_per_gpu_requests_per_s": metrics["goodput_requests_per_s"] / layout.gpus}
    for key in ("busy_fraction", "mean_in_system", "mean_batch_tokens", "iterations", "kv_utilization_mean",
                "kv_utilization_max"):
        metrics.pop(key, None)
    return DisaggResult(layout, metrics, pools)


def cluster_for(ceilings: Ceilings, name: str | None) -> ClusterSpec:
    """--cluster, else the first built-in cluster of this GPU."""
    if name:
        return load_cluster(name)
    for spec in builtin_clusters().values():
        if spec.gpu == ceilings.gpu.name:
            return spec
    raise MlsysError(f"no built-in cluster of {ceilings.gpu.name} GPUs for the KV transfer; pass --cluster NAME or FILE")


@dataclass(frozen=True)
class Search:
    layouts: tuple[DisaggResult, ...]  # best goodput per GPU first
    colocated: ServeResult  # one engine of opts.tp GPUs serving everything, for reference
    max_gpus: int


def tp_fits(spec: ModelSpec, ceilings: Ceilings, opts: ServeOptions, tp: int, cluster: ClusterSpec) -> bool:
    """Whether a TP group of tp GPUs holds the model within one scale-up domain (the fit rule of --search and --min-gpus)."""
    if tp > cluster.scale_up_gpus:
        return False
    try:
        kv_capacity(spec, ceilings, replace(opts, tp=tp))
        iteration_cost(spec, ceilings, replace(opts, tp=tp))
    except MlsysError:
        return False
    return True


def search_layouts(spec: ModelSpec, ceilings: Ceilings, workload: Workload, opts: ServeOptions, cluster: ClusterSpec,
                   max_gpus: int) -> Search:
    """Every (P, D, tp_prefill, tp_decode) within max_gpus, best goodput per GPU first (ties: fewer GPUs)."""
    require(max_gpus >= 2, f"--max-gpus must be >= 2 for a prefill and a decode instance, got {max_gpus}")
    require(max_gpus <= MAX_SEARCH_GPUS, f"--max-gpus: {max_gpus:,} GPUs; --search tries every layout of at most "
                                         f"{MAX_SEARCH_GPUS}")
    tps = [tp for tp in TP_CHOICES if tp < max_gpus and tp_fits(spec, ceilings, opts, tp, cluster)]
    require(len(tps) > 0, f"{spec.name}: no tensor-parallel size in {TP_CHOICES} fits within {max_gpus} GPUs")
    costs: dict[int, IterationCost] = {}
    layouts = [Layout(p, d, tp_p, tp_d) for tp_p in tps for tp_d in tps
               for p in range(1, (max_gpus - tp_d) // tp_p + 1) for d in range(1, (max_gpus - p * tp_p) // tp_d + 1)]
    check_workload(workload, len(layouts), f"--search --max-gpus {max_gpus}", sweep=False)
    results = [simulate_disagg(spec, ceilings, workload, opts, layout, cluster, costs) for layout in layouts]
    ranked = tuple(sorted(results, key=lambda r: (-r.pools["goodput_per_gpu_requests_per_s"], r.layout.gpus,
                                                  r.metrics["ttft_p99_s"])))
    return Search(ranked, simulate(spec, ceilings, workload, opts), max_gpus)
