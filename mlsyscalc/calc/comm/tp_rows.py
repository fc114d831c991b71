"""Tensor-parallel collectives of a model step, timed by the communication calculator.

Megatron-LM tensor parallel (Shoeybi et al. 2019, section 3): per layer, one all-reduce of the
(tokens, hidden) activations after the attention output projection and one after the MLP down
projection (one in all with parallel attention); the same two in backward. The vocabulary-parallel
embedding adds one all-reduce; inference gathers the vocabulary-parallel logits.

Times come from `calc.comm.collectives.collective_cost` (alpha-beta model, NCCL-style ring or
tree, whichever is faster) over the built-in cluster whose GPU matches (or `--cluster`). Where
that calculator or a matching cluster is missing, a labelled ring estimate is used instead:
2(p-1)/p * n / B + 2(p-1) * alpha with B = half the GPU's NVLink (or PCIe) total.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable

from ...errors import MlsysError, require
from ...specs.gpu import GPUSpec
from ...specs.model import ModelSpec

if TYPE_CHECKING:
    from ...specs.cluster import ClusterSpec
    from .collectives import CollectiveCost

# Fallback only: NCCL's per-step NVLink latency for ring/Simple (nccl src/graph/tuning.cc, hwLat).
RING_STEP_LATENCY_S = 3.4e-6
# Serving engines (vLLM's custom_all_reduce, SGLang's, TensorRT-LLM's AllReduceStrategy AUTO) reduce small TP
# messages on a one-shot custom kernel over NVLink peer memory rather than NCCL. Measured on H100 (SGLang PR
# #2904, github.com/sgl-project/sglang/pull/2904, its "custom allreduce" table, TensorRT-LLM's kernel): message
# bytes -> microseconds per call, by TP size. Between rows: linear; below the first: the first; past the last
# (1 MiB) and on architectures without a table: NCCL (the comm calculator). Timed outside CUDA graphs, so each
# row holds one launch, which a replayed graph mostly hides: an upper bound there.
CUSTOM_ALL_REDUCE_US = {"Hopper": {
    2: ((512, 3.7), (4096, 3.9), (32768, 4.5), (262144, 7.9), (524288, 12.5), (1048576, 19.9)),
    4: ((512, 4.8), (4096, 3.7), (32768, 4.8), (262144, 13.9), (524288, 20.2), (1048576, 31.1)),
    8: ((512, 5.9), (4096, 5.7), (32768, 7.8), (262144, 16.7), (524288, 22.1), (1048576, 33.8)),
}}


@dataclass(frozen=True)
class CommRow:
    name: str
    pass_name: str  # "forward" or "backward"
    collective: str  # "all-reduce" or "all-gather"
    size_bytes: float  # the message, as nccl-tests counts it
    count: int
    time_s: float  # one call
    method: str
    hidden_s: float = 0.0  # of total_s, the part overlapped with kernels (not in the step time)

    @property
    def total_s(self) -> float:
        return self.count * self.time_s

    @property
    def exposed_s(self) -> float:
        return self.total_s - self.hidden_s

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "pass": self.pass_name, "collective": self.collective,
                "size_bytes": self.size_bytes, "count": self.count, "predicted_s": self.time_s,
                "total_s": self.total_s, "hidden_s": self.hidden_s, "exposed_s": self.exposed_s,
                "method": self.method}


def _cluster_for(gpu: GPUSpec, tp: int, cluster: str | None
                 ) -> tuple[ClusterSpec | None, Callable[..., CollectiveCost] | None]:
    try:
        from ...specs.cluster import builtin_clusters, load_cluster
        from .collectives import collective_cost
    except ImportError:  # the communication calculator is not installed in this build
        return None, None
    if cluster:
        return load_cluster(cluster), collective_cost
    nodes = [spec for spec in builtin_clusters().values() if spec.gpu == gpu.name]
    for spec in nodes:
        if spec.scale_up_gpus >= tp:
            return spec, collective_cost
    most = max((spec.scale_up_gpus for spec in nodes), default=tp)
    require(tp <= most, f"--tp {tp} exceeds the {most} GPUs per node of every built-in {gpu.name} cluster "
            f"({', '.join(s.name for s in nodes)}); tensor parallel across nodes is not modelled")
    return None, collective_cost


def collective_s(collective: str, size_bytes: float, gpu: GPUSpec, tp: int,
                 cluster: str | None = None) -> tuple[float, str]:
    """(seconds, how it was computed) of one collective over tp GPUs of one node."""
    spec, cost_fn = _cluster_for(gpu, tp, cluster)
    if spec is not None and cost_fn is not None:
        require(tp <= spec.scale_up_gpus,
                f"--tp {tp} exceeds the {spec.scale_up_gpus} GPUs of a {spec.name} {spec.domain_word}")
        cost = cost_fn(collective, max(1, int(size_bytes)), tp, spec, 1, "auto")
        return cost.time_s, f"comm calculator: {cost.algo} {collective} on {spec.name}"
    link_Bps = gpu.nvlink_Bps or gpu.pcie_Bps
    if link_Bps is None:
        raise MlsysError(f"{gpu.name}: no NVLink or PCIe bandwidth in its spec for --tp")
    one_way = link_Bps / 2
    steps, factor = (2 * (tp - 1), 2 * (tp - 1) / tp) if collective == "all-reduce" else (tp - 1, (tp - 1) / tp)
    time = factor * size_bytes / one_way + steps * RING_STEP_LATENCY_S
    return time, (f"ring estimate (no cluster spec for {gpu.name}): {factor:.3g} n / {one_way / 1e9:.0f} GB/s "
                  f"+ {steps} x {RING_STEP_LATENCY_S * 1e6:.1f} us")


def custom_all_reduce_s(size_bytes: float, gpu: GPUSpec, tp: int) -> float | None:
    """Seconds of one all-reduce on the custom kernel (CUSTOM_ALL_REDUCE_US); None where it has no row."""
    rows = CUSTOM_ALL_REDUCE_US.get(gpu.architecture, {}).get(tp)
    if rows is None or size_bytes > rows[-1][0]:
        return None
    if size_bytes <= rows[0][0]:
        return rows[0][1] * 1e-6
    for (n0, t0), (n1, t1) in zip(rows, rows[1:]):
        if size_bytes <= n1:
            return (t0 + (t1 - t0) * (size_bytes - n0) / (n1 - n0)) * 1e-6
    return None  # not reached: size_bytes <= the last row's


def tp_comm_rows(spec: ModelSpec, gpu: GPUSpec, opts: Any, act_bytes: float) -> list["CommRow"]:
    """The collectives of one step under tensor parallelism (none for tp = 1); with all_reduce "custom"
    an all-reduce takes the custom kernel's time where it has a row and that is faster than NCCL's."""
    tp = opts.tp
    if tp == 1:
        return []
    size = opts.tokens * spec.hidden_size * act_bytes
    per_layer = 1 if spec.parallel_attention else 2
    ar_s, ar_how = collective_s("all-reduce", size, gpu, tp, opts.cluster)
    custom = custom_all_reduce_s(size, gpu, tp) if getattr(opts, "all_reduce", "nccl") == "custom" else None
    if custom is not None and custom < ar_s:
        ar_s, ar_how = custom, f"custom all-reduce (one-shot, measured on H100: SGLang PR #2904), tp {tp}"
    rows = [CommRow("layer all-reduce", "forward", "all-reduce", size, per_layer * spec.num_layers, ar_s, ar_how),
            CommRow("embedding all-reduce", "forward", "all-reduce", size, 1, ar_s, ar_how)]
    if opts.phase == "train":
        rows.append(CommRow("layer all-reduce", "backward", "all-reduce", size, per_layer * spec.num_layers,
                            ar_s, ar_how))
        if opts.recompute == "full":  # the recomputed forward repeats its all-reduces
            rows.append(CommRow("layer all-reduce", "recompute", "all-reduce", size, per_layer * spec.num_layers,
                                ar_s, ar_how))
    else:
        logits = opts.tokens * spec.vocab_size * act_bytes
        ag_s, ag_how = collective_s("all-gather", logits, gpu, tp, opts.cluster)
        rows.append(CommRow("logits all-gather", "forward", "all-gather", logits, 1, ag_s, ag_how))
    return rows


def dp_comm_rows(spec: ModelSpec, gpu: GPUSpec, opts: Any, forward_s: float, backward_s: float) -> list[CommRow]:
    """Data-parallel gradient (and ZeRO parameter) traffic of one training step, from
    `calc.comm.step.step_comm` (its DP/ZeRO rules, one micro-batch per step, TP ranks inner).

    With dp_overlap, traffic hides behind kernels and only what exceeds them is exposed:
    gradient all-reduce / reduce-scatter behind the backward kernels (DDP gradient buckets, Li et
    al. 2020), ZeRO-1/2's parameter all-gather behind the next step's forward (Megatron's
    overlapped parameter gather), ZeRO-3's prefetched gathers and gradient reduce-scatter
    together behind forward + backward. The hidden part is shared over the rows of a group in
    proportion to their time."""
    if opts.dp == 1:
        return []
    from .step import StepOptions, step_comm

    cluster, _ = _cluster_for(gpu, opts.tp, opts.cluster)
    if cluster is None:
        raise MlsysError(f"--dp: no built-in cluster of {gpu.name} GPUs; pass --cluster NAME or FILE")
    step = step_comm(spec, StepOptions(dp=opts.dp, tp=opts.tp, zero=opts.zero, batch=opts.batch, seq=opts.seq,
                                       dtype=opts.activation_dtype), cluster)
    rows = [CommRow(r.rule, "step", r.collective, r.message_bytes, r.calls, r.time_per_call_s,
                    f"comm_step: {r.group_size} GPUs, {r.nodes} {cluster.name} node(s)")
            for r in step.rows if r.dim == "dp"]
    if not opts.dp_overlap:
        return rows
    if opts.zero == 3:
        groups = [(rows, forward_s + backward_s)]
    else:
        groups = [([r for r in rows if r.collective != "all-gather"], backward_s),
                  ([r for r in rows if r.collective == "all-gather"], forward_s)]
    out = []
    for members, window_s in groups:
        total = sum(r.total_s for r in members)
        hidden = min(total, window_s)
        out += [replace(r, pass_name="overlapped", hidden_s=r.total_s * hidden / total) for r in members]
    return out
