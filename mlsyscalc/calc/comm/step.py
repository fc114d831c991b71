"""Communication of one training step, per parallel dimension, priced with the alpha-beta model.

Rules (bytes are nccl-tests message sizes; m = micro-batches per step, L = layers per stage (the most
of any stage when they split unevenly),
act = b * (s / cp) * hidden * bytes per element):

- DP, plain (ZeRO-0/DDP): one all-reduce of the gradients per step (Li et al. 2020, PyTorch DDP).
  ZeRO-1: reduce-scatter of gradients + all-gather of updated parameters, once per step; ZeRO-2:
  the reduce-scatter every micro-batch; ZeRO-3/FSDP: parameter all-gather in forward and again in
  backward plus the gradient reduce-scatter, every micro-batch (Rajbhandari et al. 2020, sec. 7:
  2 Psi for ZeRO-1/2, 3 Psi for ZeRO-3). Dense gradients reduce over dp * cp ranks; routed-expert
  gradients over the expert data-parallel group, edp = tp * cp * dp / (etp * ep) ranks (calc.parallel.expert_grid).
- TP (Megatron, Shoeybi et al. 2019, sec. 3): 2 all-reduces of act per layer forward and 2 backward
  (1 and 1 where attention and MLP run in parallel);
  with sequence parallelism each becomes an all-gather + reduce-scatter pair (Korthikanti et al.
  2022, sec. 4.2.2), the same bytes. With sequence parallelism (or tp 1) an MoE layer's MLP pair is its
  shared experts' only (Megatron-Core's MoE layer takes the sequence-split tokens; its routed experts
  gather them over their own etp group, below).
- PP: a middle stage sends act / tp forward and the same gradient backward per micro-batch and
  model chunk (Megatron scatter-gather across TP ranks); bubble fraction of the step
  (p - 1) / (v m + p - 1), i.e. bubble/compute (p - 1) / (v m) (Narayanan et al. 2021, sec. 2.2).
- EP: per MoE layer, all-to-all dispatch and combine of the routed tokens (b * s / cp / tp with SP *
  top-k * hidden) forward and both again backward over the ep group, for the MoE layers of the busiest
  stage (Lepikhin et al. 2020; Rajbhandari et al. 2022); with etp > 1 the dispatched tokens are then
  all-gathered over the etp group and the expert outputs reduce-scattered back (etp x the routed bytes),
  forward and again backward (Megatron-Core's MoEAlltoAllTokenDispatcher, megatron/core/transformer/moe/
  token_dispatcher.py at d98e8a6). Both are the MoE dispatcher's traffic, priced under "ep".
- CP (ring attention / Megatron context parallel): per layer an all-gather of K and V forward,
  and an all-gather of K, V plus a reduce-scatter of dK, dV backward (Liu et al. 2023).

Placement: ranks are numbered with `order` inner to outer (default tp, cp, dp, pp, as Megatron
does); consecutive ranks share a node, so TP stays inside a node and DP spans nodes. The routed experts'
grid numbers each pipeline stage's ranks etp, ep, edp inner to outer (Megatron-Core's expert order; pp
last). A "node" here is the cluster's scale-up domain (`ClusterSpec.scale_up_gpus`): the GPUs one intra
link joins, 72 on a GB200 NVL72 rack, so TP and the EP groups stay on NVLink up to that size.
Traffic of the dimensions in `overlap` is assumed hidden behind compute: it is counted in
`total_time_s` but not in `exposed_time_s`.
"""

from __future__ import annotations

import math
from functools import lru_cache
from dataclasses import dataclass, field

from ...errors import divide, require
from ...specs.cluster import ClusterSpec, load_cluster
from ...specs.model import ModelSpec
from ...validate import check_gpus
from .collectives import TREE_COLLECTIVES, CollectiveCost, collective_cost
from ..parallel.expert_grid import ExpertGrid
from ..parallel.layout import Layout
from ...dtypes import bytes_per_element, dtype_name
from ..counts.layers import layer_linears, mlp_linears
from ..counts.params import count_params
from ..parallel.tensor_parallel import tp_kind

DIMENSIONS = ("tp", "cp", "dp", "pp")  # the rank-order axes; the experts' etp, ep, edp fold into a stage's ranks


@dataclass(frozen=True)
class StepOptions:
    dp: int = 1
    tp: int = 1
    pp: int = 1
    ep: int = 1
    cp: int = 1
    etp: int | None = None  # routed experts' tensor-parallel size (None: tp; calc.parallel.expert_grid)
    sp: bool = False  # Megatron sequence parallelism (with tp)
    zero: int = 0  # 0 plain DP, 1, 2, 3 (= FSDP full shard)
    batch: int = 1  # micro-batch: sequences per DP replica per micro-batch
    seq: int = 2048
    grad_accum: int = 1  # micro-batches per step (the pipeline's m)
    interleave: int = 1  # virtual pipeline stages per GPU (v)
    dtype: str = "bf16"  # activations and parameters on the wire
    grad_dtype: str | None = None  # gradients on the wire (default: dtype)
    overlap: tuple[str, ...] = ()  # dimensions whose traffic hides behind compute
    algo: str = "ring"
    order: tuple[str, ...] = DIMENSIONS
    # TP without SP, backward: "shared" (Megatron-LM: a block's column-parallel linears share one input, fused QKV
    # and gate/up, so one all-reduce of its gradient) or "each" (plain torch DTensor TP: every column-parallel
    # linear's input gradient is all-reduced on its own: q, k, v, gate and up, 5 a llama layer)
    tp_input_reduce: str = "shared"
    # ZeRO-2/3 as PyTorch's FSDP2 runs them (calc.memory.schedule.fsdp_sharded): ZeRO-2 (reshard_after_forward=False)
    # reshards at each backward's end and gathers the parameters again every micro-batch (per_micro_batch)
    fsdp: bool = False
    # the decoder layers of each pipeline stage when they split unevenly (calc.parallel.pipeline_split); () splits evenly
    stages: tuple[tuple[int, ...], ...] = ()

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def grid(self) -> Layout:
        """The parallel layout (calc.parallel.layout), whose rules comm shares with train, plan and memory."""
        return Layout(tp=self.tp, pp=self.pp, dp=self.dp, cp=self.cp, ep=self.ep, etp=self.etp, vp=self.interleave,
                      sp=self.sp, micro_batch=self.batch, zero=self.zero)

    @property
    def experts(self) -> ExpertGrid:
        return self.grid.experts


@dataclass(frozen=True)
class CommRow:
    dim: str  # dp, tp, pp, ep, cp
    collective: str
    rule: str
    group_size: int
    nodes: int  # nodes the group spans
    message_bytes: int  # per call, nccl-tests size
    calls: int  # per step
    sent_bytes_per_call: float  # bytes one GPU sends per call
    time_per_call_s: float
    overlapped: bool

    @property
    def bytes_per_gpu(self) -> float:
        return self.calls * self.sent_bytes_per_call

    @property
    def time_s(self) -> float:
        return self.calls * self.time_per_call_s


@dataclass(frozen=True)
class StepComm:
    model: str
    cluster: str
    options: StepOptions
    nodes: int
    params_per_gpu: float  # before ZeRO sharding
    rows: tuple[CommRow, ...]
    bubble_fraction: float  # share of the step the pipeline idles
    bubble_ratio: float  # bubble time / compute time
    by_dim: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def total_bytes_per_gpu(self) -> float:
        return sum(r.bytes_per_gpu for r in self.rows)

    @property
    def total_time_s(self) -> float:
        return sum(r.time_s for r in self.rows)

    @property
    def exposed_time_s(self) -> float:
        return sum(r.time_s for r in self.rows if not r.overlapped)


def placement(size: int, stride: int, gpus_per_node: int, what: str = "group") -> tuple[int, int]:
    """(nodes, GPUs per node) of a group of `size` ranks `stride` apart, nodes holding consecutive ranks.
    A group spanning nodes has the same number of members on each (the collective model splits its
    traffic evenly over nodes): a data-parallel group of 60 consecutive ranks on 8-GPU nodes does not."""
    if size == 1:
        return 1, 1
    if stride >= gpus_per_node:
        require(stride % gpus_per_node == 0, f"a group with stride {stride} straddles {gpus_per_node}-GPU nodes")
        return size, 1
    require(gpus_per_node % stride == 0, f"a group with stride {stride} straddles {gpus_per_node}-GPU nodes")
    per_node = min(size, gpus_per_node // stride)
    require(size % per_node == 0, f"rule whole groups per node: the {what} of {size} ranks (stride {stride}) "
                                  f"puts an uneven share on each {gpus_per_node}-GPU node")
    return size // per_node, per_node


@lru_cache(maxsize=32)  # pure in the frozen spec; plan prices thousands of layouts of one model
def _expert_params(spec: ModelSpec) -> int:
    return sum(lin.params for i in range(spec.num_layers) if spec.layer_is_moe(i)
               for lin in mlp_linears(spec, i) if lin.copies > 1)


def _validate(spec: ModelSpec, o: StepOptions, cluster: ClusterSpec) -> None:
    for name in ("batch", "seq", "grad_accum", "interleave"):
        require(getattr(o, name) >= 1, f"{name} must be at least 1, got {getattr(o, name)}")
    o.grid.validate_sizes()  # the layout's sizes, ZeRO stage and vp rules (calc.parallel.layout)
    require(o.tp_input_reduce in ("shared", "each"), f"tp_input_reduce must be shared or each, got {o.tp_input_reduce!r}")
    check_gpus(o.gpus, "dp x tp x pp x cp GPUs")
    require(sorted(o.order) == sorted(DIMENSIONS), f"order must list {', '.join(DIMENSIONS)} once each")
    require(abs(o.order.index("cp") - o.order.index("dp")) == 1, "order: cp and dp must be neighbours")
    require(set(o.overlap) <= {"dp", "tp", "pp", "ep", "cp"}, f"overlap: unknown dimension in {o.overlap}")
    divide(spec.num_heads, o.tp, "tp: attention heads")
    if spec.num_kv_heads >= o.tp:
        divide(spec.num_kv_heads, o.tp, "tp: key/value heads")
    if o.stages:
        require(len(o.stages) == o.pp and sorted(i for st in o.stages for i in st) == list(range(spec.num_layers)),
                f"stages: {o.pp} stages must hold each of the {spec.num_layers} layers once")
    else:
        divide(spec.num_layers, o.pp * o.interleave, "pp x interleave: layers")
    o.grid.validate(spec, o.seq)  # sequence and experts' rules: one Layout
    require(spec.moe is None or o.pp == 1 or o.order[-1] == "pp",
            "order: with routed experts pp must come last (Megatron-Core builds the expert grid etp x ep x edp "
            "inside each pipeline stage's ranks)")
    if o.gpus > cluster.scale_up_gpus:
        divide(o.gpus, cluster.scale_up_gpus, f"GPUs over {cluster.name} {cluster.domain_word}s")


class _Pricer:
    """Prices calls of one collective on one parallel group of the layout."""

    def __init__(self, o: StepOptions, cluster: ClusterSpec):
        self.o, self.cluster = o, cluster
        self.node_size = min(cluster.scale_up_gpus, o.gpus)  # GPUs on one intra link: a node or an NVLink domain
        sizes = {"tp": o.tp, "cp": o.cp, "dp": o.dp, "pp": o.pp}
        self.stride = {d: math.prod(sizes[x] for x in o.order[:o.order.index(d)]) for d in o.order}
        self.experts = o.experts.groups()  # etp, ep, edp: (size, stride) inside a stage
        self.rows: list[CommRow] = []

    def group(self, dim: str, size: int, stride: int | None = None) -> tuple[int, int, int]:
        stride = self.stride[dim] if stride is None else stride
        nodes, _ = placement(size, stride, self.node_size)
        return size, nodes, stride

    def expert(self, name: str) -> tuple[int, int, int]:
        """An expert group (etp, ep or edp: calc.parallel.expert_grid) placed by Megatron-Core's expert rank order."""
        size, stride = self.experts[name]
        return self.group(name, size, stride)

    def add(self, dim: str, collective: str, rule: str, group: tuple[int, int, int], message: float,
            calls: int) -> None:
        size, nodes, _ = group
        if size < 2 or calls == 0 or message <= 0:
            return
        gpus = 2 if collective == "p2p" else size
        # tree applies to all-reduce, broadcast, reduce; NCCL runs the others as rings
        algo = "ring" if self.o.algo == "tree" and collective not in TREE_COLLECTIVES else self.o.algo
        cost = _cost(collective, max(1, int(message)), gpus, _Identity(self.cluster), nodes, algo)
        label = "ep" if dim == "ep" else dim
        self.rows.append(CommRow(label, collective, rule, gpus, nodes, int(message), calls,
                                 cost.bytes_per_gpu, cost.time_s, label in self.o.overlap))


# The kinds of DP traffic (calc.comm.exposed.traffic) issued every micro-batch, per ZeRO stage; the others
# once per step: ZeRO-2 reduce-scatters gradients every micro-batch, ZeRO-3 also all-gathers parameters
# (forward and backward); ZeRO-0's all-reduce and ZeRO-1's pair run once. `mlsys plan` prices DP traffic
# from one call at one micro-batch with this table.
PER_MICRO_BATCH: dict[int, tuple[str, ...]] = {0: (), 1: (), 2: ("grad",), 3: ("grad", "param")}


def per_micro_batch(zero: int, fsdp: bool = False) -> tuple[str, ...]:
    """The DP traffic kinds issued every micro-batch: PER_MICRO_BATCH, and with FSDP2 (`StepOptions.fsdp`) ZeRO-2's
    parameter all-gather too."""
    return ("grad", "param") if fsdp and zero == 2 else PER_MICRO_BATCH[zero]


def _dp_rows(pr: _Pricer, o: StepOptions, dense_params: float, expert_params: float) -> None:
    grad_bytes = bytes_per_element(o.grad_dtype or o.dtype)
    param_bytes = bytes_per_element(o.dtype)
    calls = {kind: o.grad_accum if kind in per_micro_batch(o.zero, o.fsdp) else 1 for kind in ("grad", "param")}
    dp_cp = pr.group("dp", o.dp * o.cp, pr.stride[o.order[min(o.order.index("dp"), o.order.index("cp"))]])
    groups = [("", dense_params, dp_cp)]
    if expert_params:  # over the expert data-parallel group (calc.parallel.expert_grid)
        groups.append((" (routed experts)", expert_params, pr.expert("edp")))
    for tag, params, group in groups:
        g, p = params * grad_bytes, params * param_bytes
        if o.zero == 0:
            pr.add("dp", "all-reduce", f"gradient all-reduce once per step{tag}", group, g, calls["grad"])
        elif o.zero in (1, 2):
            every = calls["grad"]
            pr.add("dp", "reduce-scatter", f"ZeRO-{o.zero} gradient reduce-scatter, {every}x per step{tag}", group, g, every)
            what = ("FSDP2 parameter all-gather, forward of each micro-batch" if o.fsdp and o.zero == 2
                    else f"ZeRO-{o.zero} all-gather of updated parameters")
            pr.add("dp", "all-gather", f"{what}{tag}", group, p, calls["param"])
        else:
            pr.add("dp", "all-gather", f"ZeRO-3/FSDP parameter all-gather, forward and backward of each micro-batch{tag}",
                   group, p, 2 * calls["param"])
            pr.add("dp", "reduce-scatter", f"ZeRO-3/FSDP gradient reduce-scatter per micro-batch{tag}", group, g,
                   calls["grad"])


class _Identity:
    """A cluster compared by identity, so a cache can key on it (a ClusterSpec holds dicts: unhashable)."""

    __slots__ = ("cluster",)

    def __init__(self, cluster: ClusterSpec):
        self.cluster = cluster

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Identity) and other.cluster is self.cluster

    def __hash__(self) -> int:
        return id(self.cluster)


@lru_cache(maxsize=65536)  # a layout search prices the same calls for many layouts (the entry keeps its cluster)
def _cost(collective: str, message: int, gpus: int, cluster: _Identity, nodes: int, algo: str) -> CollectiveCost:
    return collective_cost(collective, message, gpus, cluster.cluster, nodes, algo)


def _model_rows(pr: _Pricer, spec: ModelSpec, o: StepOptions) -> None:
    elem = bytes_per_element(o.dtype)
    m, v = o.grad_accum, o.interleave
    folded = o.sp or o.tp == 1  # the MoE layers take sequence-split tokens (Megatron-Core's MoE layer)
    layers, pairs, moe_layers = busiest_calls(spec, o.stages or _even_stages(spec, o.pp, v), folded)
    tokens = o.batch * o.seq // o.cp  # tokens of one micro-batch on one GPU's sequence shard
    act = tokens * spec.hidden_size * elem
    tp = pr.group("tp", o.tp)
    k = 1 if spec.parallel_attention else 2  # attention and MLP share one all-reduce in parallel blocks
    if o.sp:
        each = (f"{k} per layer" if spec.moe is None else  # an MoE layer: attention and shared experts only
                f"{pairs} on the busiest stage, {tp_pairs(spec, 1, 1, True)} an MoE layer")
        pr.add("tp", "all-gather", f"SP: all-gathers forward ({each}), as many backward", tp, act, 2 * pairs * m)
        pr.add("tp", "reduce-scatter", f"SP: reduce-scatters forward ({each}), as many backward", tp, act,
               2 * pairs * m)
    elif o.tp_input_reduce == "each":
        back = round(_column_linears(spec) * layers / spec.num_layers if o.stages else  # the stage's share,
                     _column_linears(spec) / o.pp)  # as `layers` is
        pr.add("tp", "all-reduce", f"torch DTensor: {k} all-reduces per layer forward, one backward per "
               f"column-parallel linear ({back} a stage)", tp, act, (k * layers + back) * m)
    else:
        pr.add("tp", "all-reduce", f"Megatron: {k} all-reduces per layer forward, {k} backward", tp, act,
               2 * k * layers * m)
    if o.pp > 1:  # stages run in lockstep: one boundary between nodes paces every stage
        pipeline_nodes = pr.group("pp", o.pp)[1]
        pr.add("pp", "p2p", f"activations forward + gradients backward per micro-batch and chunk (v={v}), /tp",
               (2, min(pipeline_nodes, 2), pr.stride["pp"]), act / o.tp, 2 * m * v)
    if spec.moe is not None and moe_layers:
        routed = tokens // (o.tp if o.sp else 1) * spec.moe.experts_per_token * spec.hidden_size * elem
        pr.add("ep", "all-to-all", "dispatch + combine per MoE layer forward, both again backward (ep group)",
               pr.expert("ep"), routed, 4 * moe_layers * m)
        if folded:  # the etp ranks' dispatched tokens gathered, the experts' outputs reduce-scattered back
            etp = pr.expert("etp")
            pr.add("ep", "all-gather", f"expert TP: dispatched tokens of the {etp[0]} etp ranks per MoE layer "
                   "forward, output gradients backward", etp, etp[0] * routed, 2 * moe_layers * m)
            pr.add("ep", "reduce-scatter", "expert TP: expert outputs per MoE layer forward, input gradients "
                   "backward", etp, etp[0] * routed, 2 * moe_layers * m)
    if o.cp > 1:
        kv_heads = spec.num_kv_heads // o.tp if spec.num_kv_heads >= o.tp else 1
        kv = o.batch * o.seq * kv_heads * (spec.head_dim + spec.v_head_dim) * elem
        cp = pr.group("cp", o.cp)
        pr.add("cp", "all-gather", "K,V all-gather per layer forward and again backward", cp, kv, 2 * layers * m)
        pr.add("cp", "reduce-scatter", "dK,dV reduce-scatter per layer backward", cp, kv, layers * m)


def tp_pairs(spec: ModelSpec, layers: int, moe: int, folded: bool) -> int:
    """TP collectives of one pass (forward or backward) over `layers` decoder layers of which `moe` are MoE
    layers: an all-reduce (or, with SP, an all-gather + reduce-scatter pair) for the attention and one for the
    MLP (one for both in parallel blocks); `folded` (SP or tp 1): an MoE layer's MLP one for its shared experts
    only, its routed experts gathering over their etp group instead (calc.parallel.expert_grid)."""
    k = 1 if spec.parallel_attention else 2
    if not folded or spec.moe is None:
        return k * layers
    per_moe = 1 if spec.parallel_attention else 1 + bool(spec.moe.num_shared_experts)
    return k * (layers - moe) + per_moe * moe


def busiest_calls(spec: ModelSpec, stages: tuple[tuple[int, ...], ...], folded: bool) -> tuple[int, int, int]:
    """(layers, TP collectives of one pass (`tp_pairs`), MoE layers) of the busiest stage, each the most of any
    stage: CP calls follow the layers, TP calls the pairs, EP calls the MoE layers."""
    counts = [(len(st), sum(map(spec.layer_is_moe, st))) for st in stages]
    return (max(n for n, _ in counts), max(tp_pairs(spec, n, e, folded) for n, e in counts),
            max(e for _, e in counts))


@lru_cache(maxsize=32)
def _column_linears(spec: ModelSpec) -> int:
    """Column-parallel linears of every layer (routed experts apart): each has its own input gradient to all-reduce
    under plain torch DTensor TP."""
    return sum(1 for i in range(spec.num_layers) for lin in layer_linears(spec, i)
               if lin.copies == 1 and tp_kind(lin) == "column")


@lru_cache(maxsize=256)
def _even_stages(spec: ModelSpec, pp: int, v: int) -> tuple[tuple[int, ...], ...]:
    """Layers of each stage of an even split: stage s holds chunks s, s + pp, ... of layers / (pp v) layers."""
    chunk = spec.num_layers // (pp * v)
    return tuple(tuple(i for c in range(s, pp * v, pp) for i in range(c * chunk, (c + 1) * chunk)) for s in range(pp))


def step_comm(spec: ModelSpec, options: StepOptions, cluster: ClusterSpec | str = "hgx-h100",
              parts: tuple[str, ...] = ("dp", "model")) -> StepComm:
    """Bytes and alpha-beta time of every parallel dimension's traffic in one training step. `parts`:
    "dp" (the data-parallel gradient and parameter traffic) and/or "model" (TP, PP, EP and CP traffic);
    a search that needs one of them prices only it."""
    o = options
    cluster = load_cluster(cluster).for_job(o.gpus)  # the GPUs the job takes in each NVLink domain
    for dtype in (o.dtype, o.grad_dtype or o.dtype):
        dtype_name(dtype)  # an unknown dtype is an MlsysError here, before any arithmetic
    _validate(spec, o, cluster)
    experts = _expert_params(spec)
    dense = count_params(spec).total - experts
    model_split = o.tp * o.pp
    expert_split = o.experts.expert_tp * o.ep * o.pp  # E / ep experts a GPU, each split over etp ranks
    pr = _Pricer(o, cluster)
    if "dp" in parts:
        _dp_rows(pr, o, dense / model_split, experts / expert_split)
    if "model" in parts:
        _model_rows(pr, spec, o)
    by_dim: dict[str, dict[str, float]] = {}
    for r in pr.rows:
        entry = by_dim.setdefault(r.dim, {"bytes_per_gpu": 0.0, "time_s": 0.0})
        entry["bytes_per_gpu"] += r.bytes_per_gpu
        entry["time_s"] += r.time_s
    bubble_steps = (o.pp - 1) / o.interleave
    return StepComm(
        model=spec.name, cluster=cluster.name, options=o, nodes=max(1, o.gpus // cluster.scale_up_gpus),
        params_per_gpu=dense / model_split + experts / expert_split, rows=tuple(pr.rows),
        bubble_fraction=bubble_steps / (o.grad_accum + bubble_steps), bubble_ratio=bubble_steps / o.grad_accum,
        by_dim=by_dim,
    )
