"""`mlsys comm COLLECTIVE`, `mlsys comm step MODEL` and `mlsys comm clusters`."""

from __future__ import annotations

from typing import Callable

import click

from ..calc.comm.collectives import ALGORITHMS, COLLECTIVES, busbw_factor, collective_cost
from ..calc.comm.step import StepOptions, step_comm
from ..errors import MlsysError
from ..specs.cluster import ClusterSpec, builtin_clusters, load_cluster
from ..units import fmt_bytes, fmt_seconds, parse_bytes
from . import render
from .options import NON_NEGATIVE, POSITIVE, model_argument, positive_int, resolve_model, world_dp

_STEP = StepOptions()  # the defaults live in the calculator's options


@click.group()
def comm() -> None:
    """Communication cost: alpha-beta time of collectives and of a training step's traffic.

    Bandwidths are per GPU and per direction; busbw and algbw are nccl-tests' definitions.
    """


def cluster_options(func: Callable) -> Callable:
    """--cluster plus what-if overrides of its links."""
    for name, help_text in (
        ("--inter-latency", "Override the inter-node per-step latency (us)."),
        ("--inter-bandwidth", "Override the inter-node bandwidth per GPU per direction (GB/s)."),
        ("--latency", "Override the intra-node per-step latency (us)."),
        ("--bandwidth", "Override the intra-node bandwidth per GPU per direction (GB/s)."),
    ):
        kind = POSITIVE if name.endswith("bandwidth") else NON_NEGATIVE
        func = click.option(name, type=kind, help=help_text)(func)
    return click.option("--cluster", default="hgx-h100", show_default=True,
                        help="Built-in cluster (`mlsys comm clusters`) or a cluster JSON file.")(func)


def _cluster(name: str, bandwidth, latency, inter_bandwidth, inter_latency) -> ClusterSpec:
    return load_cluster(name).with_links(bandwidth_GBps=bandwidth, latency_us=latency,
                                         inter_bandwidth_GBps=inter_bandwidth, inter_latency_us=inter_latency)


def _collective_command(collective: str) -> click.Command:
    @click.command(name=collective)
    @click.option("--size", default="1GiB", show_default=True,
                  help="Message size as nccl-tests counts it: 1GiB, 256MB, 4096 (bytes).")
    @positive_int("--gpus", 8, "GPUs taking part.")
    @positive_int("--nodes", 1, "Nodes the GPUs are spread over (evenly).")
    @click.option("--algo", type=click.Choice(ALGORITHMS), default="ring", show_default=True,
                  help="auto: the fastest the model knows for this collective.")
    @cluster_options
    @render.output_options
    def command(size, gpus, nodes, algo, cluster, bandwidth, latency, inter_bandwidth, inter_latency, fmt, as_json):
        spec = _cluster(cluster, bandwidth, latency, inter_bandwidth, inter_latency)
        cost = collective_cost(collective, parse_bytes(size, "--size"), gpus, spec, nodes, algo)
        _emit_collective(cost, spec, fmt, as_json)

    command.help = (f"Alpha-beta time, algbw and busbw of one {collective} of --size bytes over --gpus GPUs.\n\n"
                    "Ring: 2(p-1) alpha + 2(p-1)/p n beta for all-reduce, (p-1) alpha + (p-1)/p n beta for "
                    "all-gather, reduce-scatter and all-to-all, (p-1) alpha + n beta for broadcast and reduce; "
                    "tree and hierarchical as docs/comm.md says.")
    return command


def _emit_collective(cost, spec: ClusterSpec, fmt: str, as_json: bool) -> None:
    phases = [{"name": p.name, "link": p.link, "gpus": p.gpus, "steps": p.steps, "step_latency_s": p.step_latency_s,
               "bytes_per_gpu": p.bytes_per_gpu, "latency_s": p.latency_s, "transfer_s": p.transfer_s,
               "buffer_s": p.buffer_s, "time_s": p.time_s, "protocol": p.protocol} for p in cost.phases]
    data = {"collective": cost.collective, "algo": cost.algo, "cluster": spec.name, "gpus": cost.gpus,
            "nodes": cost.nodes, "size_bytes": cost.size_bytes, "time_s": cost.time_s, "latency_s": cost.latency_s,
            "transfer_s": cost.transfer_s, "buffer_s": cost.buffer_s, "host_wait_s": cost.host_wait_s,
            "bytes_per_gpu": cost.bytes_per_gpu,
            "algbw_GBps": cost.algbw_Bps / 1e9, "busbw_GBps": cost.busbw_Bps / 1e9,
            "busbw_factor": busbw_factor(cost.collective, cost.gpus), "phases": phases}
    summary = [["time", cost.time_s, fmt_seconds(cost.time_s)],
               ["  latency (steps x alpha)", cost.latency_s, fmt_seconds(cost.latency_s)],
               ["  transfer (bytes x beta)", cost.transfer_s, fmt_seconds(cost.transfer_s)],
               ["  buffer ((1 + 1/p) message bytes / C)", cost.buffer_s, fmt_seconds(cost.buffer_s)],
               ["  host wait (call overhead - device time)", cost.host_wait_s, fmt_seconds(cost.host_wait_s)],
               ["bytes sent per GPU", cost.bytes_per_gpu, fmt_bytes(cost.bytes_per_gpu)],
               ["algbw (GB/s)", data["algbw_GBps"], f"{data['algbw_GBps']:.1f} GB/s"],
               ["busbw (GB/s)", data["busbw_GBps"], f"{data['busbw_GBps']:.1f} GB/s"]]
    rows = [[p["name"], p["link"], p["gpus"], p["steps"], p["bytes_per_gpu"], fmt_seconds(p["time_s"])] for p in phases]
    title = f"{cost.collective} of {fmt_bytes(cost.size_bytes)} over {cost.gpus} GPUs on {cost.nodes} node(s), {cost.algo}, {spec.name}"
    notes = ("Bandwidths per GPU per direction; algbw = size / time; busbw = algbw x "
             f"{data['busbw_factor']:.4g} (nccl-tests). Measured on NCCL: reports/comm/.",)
    render.emit(render.Output(data, (render.table(title, ["quantity", "value", "approx"], summary),
                                     render.table("phases", ["phase", "link", "gpus", "steps", "bytes per GPU", "time"], rows)),
                              notes), fmt, as_json)


for _name in COLLECTIVES:
    comm.add_command(_collective_command(_name))


def _split(values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(v.strip() for item in values for v in item.split(",") if v.strip())


@comm.command()
@model_argument
@click.option("--dp", type=click.IntRange(min=1), default=None,
              help=f"Data-parallel replicas [default: gpus/(tp*pp*cp), else {_STEP.dp}].")
@positive_int("--tp", _STEP.tp, "Tensor-parallel ranks (Megatron), inside a node by default.")
@positive_int("--pp", _STEP.pp, "Pipeline stages.")
@positive_int("--ep", _STEP.ep, "Expert-parallel ranks: the routed experts split over ep of each stage's "
              "tp x cp x dp ranks (MoE models).")
@click.option("--etp", type=click.IntRange(min=1), default=None,
              help="Expert tensor-parallel ranks: each routed expert split over etp ranks [default: --tp].")
@positive_int("--cp", _STEP.cp, "Context-parallel ranks (sequence split, ring attention).")
@click.option("--sp", is_flag=True, help="Megatron sequence parallelism with tp.")
@click.option("--zero", type=click.Choice(["0", "1", "2", "3", "fsdp"]), default=str(_STEP.zero), show_default=True,
              help="ZeRO stage of the data-parallel dimension (fsdp = 3).")
@positive_int("--batch", _STEP.batch, "Micro-batch: sequences per data-parallel replica.")
@positive_int("--seq", _STEP.seq, "Tokens per sequence.")
@positive_int("--grad-accum", _STEP.grad_accum, "Micro-batches per step (the pipeline's m).")
@positive_int("--interleave", _STEP.interleave, "Virtual pipeline chunks per GPU (v).")
@click.option("--dtype", default=_STEP.dtype, show_default=True, help="Activations and parameters on the wire.")
@click.option("--grad-dtype", help="Gradients on the wire (default: --dtype).")
@click.option("--overlap", multiple=True, metavar="DIMS",
              help="Dimensions whose traffic hides behind compute, e.g. --overlap dp,pp (default: none).")
@click.option("--order", default=",".join(_STEP.order), show_default=True,
              help="Rank order, inner to outer: consecutive ranks share a node.")
@click.option("--algo", type=click.Choice(ALGORITHMS), default=_STEP.algo, show_default=True)
@click.option("--gpus", type=click.IntRange(min=1), help="GPUs in the job, as `mlsys train --gpus`: dp = gpus / (tp*pp*cp); "
                                                          "with --dp it must equal dp x tp x pp x cp.")
@cluster_options
@render.output_options
def step(model, overrides, dp, tp, pp, ep, etp, cp, sp, zero, batch, seq, grad_accum, interleave, dtype, grad_dtype,
         overlap, order, algo, gpus, cluster, bandwidth, latency, inter_bandwidth, inter_latency, fmt, as_json):
    """Bytes and time per training step of each parallel dimension of MODEL.

    DP gradient all-reduce (or ZeRO-1/2/3, FSDP), Megatron TP (+SP), pipeline p2p and bubble,
    expert all-to-all (and the experts' own TP over --etp), context-parallel K/V exchange; each row prints the
    rule it uses.
    """
    spec = resolve_model(model, overrides)
    dp = _STEP.dp if gpus is None and dp is None else world_dp(gpus, dp, tp, pp, cp)
    opts = StepOptions(dp=dp, tp=tp, pp=pp, ep=ep, etp=etp, cp=cp, sp=sp, zero=3 if zero == "fsdp" else int(zero),
                       batch=batch, seq=seq, grad_accum=grad_accum, interleave=interleave, dtype=dtype,
                       grad_dtype=grad_dtype, overlap=_split(overlap), algo=algo, order=_split((order,)))
    if gpus is not None and gpus != opts.gpus:
        raise MlsysError(f"--gpus {gpus} does not match dp x tp x pp x cp = {dp} x {tp} x {pp} x {cp} = {opts.gpus}")
    r = step_comm(spec, opts, _cluster(cluster, bandwidth, latency, inter_bandwidth, inter_latency))
    _emit_step(r, opts, fmt, as_json)


def _emit_step(r, o: StepOptions, fmt: str, as_json: bool) -> None:
    rows = [{"dim": x.dim, "collective": x.collective, "rule": x.rule, "group_size": x.group_size, "nodes": x.nodes,
             "message_bytes": x.message_bytes, "calls": x.calls, "bytes_per_gpu": x.bytes_per_gpu,
             "time_per_call_s": x.time_per_call_s, "time_s": x.time_s, "overlapped": x.overlapped} for x in r.rows]
    layout = {**{k: getattr(o, k) for k in ("dp", "tp", "pp", "ep", "cp", "sp", "zero", "interleave", "algo")},
              "etp": o.experts.expert_tp, "edp": o.experts.edp}
    data = {"model": r.model, "cluster": r.cluster, "gpus": o.gpus, "nodes": r.nodes, "layout": layout,
            "order": list(o.order), "overlap": list(o.overlap), "batch": o.batch, "seq": o.seq,
            "grad_accum": o.grad_accum, "global_batch": o.batch * o.grad_accum * o.dp,
            "tokens_per_step": o.batch * o.grad_accum * o.dp * o.seq, "params_per_gpu": r.params_per_gpu,
            "rows": rows, "by_dim": r.by_dim, "total_bytes_per_gpu": r.total_bytes_per_gpu,
            "total_time_s": r.total_time_s, "exposed_time_s": r.exposed_time_s,
            "bubble_fraction": r.bubble_fraction, "bubble_ratio": r.bubble_ratio}
    table = [[x["dim"], x["collective"], x["group_size"], x["nodes"], fmt_bytes(x["message_bytes"]), x["calls"],
              fmt_bytes(x["bytes_per_gpu"]), fmt_seconds(x["time_s"]), "yes" if x["overlapped"] else "", x["rule"]]
             for x in rows]
    totals = [["bytes sent per GPU", r.total_bytes_per_gpu, fmt_bytes(r.total_bytes_per_gpu)],
              ["communication time", r.total_time_s, fmt_seconds(r.total_time_s)],
              ["exposed (not overlapped)", r.exposed_time_s, fmt_seconds(r.exposed_time_s)],
              ["pipeline bubble, share of step", r.bubble_fraction, f"{100 * r.bubble_fraction:.1f}%"]]
    title = (f"{r.model} on {o.gpus} GPUs ({r.nodes} node(s) of {r.cluster}): dp {o.dp} tp {o.tp} pp {o.pp} "
             f"ep {o.ep} etp {o.experts.expert_tp} cp {o.cp}{' sp' if o.sp else ''}, ZeRO-{o.zero}, micro-batch {o.batch} x {o.seq}, m={o.grad_accum}")
    notes = ("Per GPU per step; layers split evenly over stages (embedding and head traffic not counted).",
             "Overlap is an assumption you choose (--overlap): overlapped rows count in the total, not in 'exposed'.",
             "Bubble fraction (p-1)/(v m + p-1) of the step; the bubble ratio (p-1)/(v m) is in the JSON.")
    render.emit(render.Output(data, (
        render.table(title, ["dim", "collective", "group", "nodes", "message", "calls", "bytes/GPU", "time",
                             "overlapped", "rule"], table),
        render.table("totals", ["quantity", "value", "approx"], totals)), notes), fmt, as_json)


@comm.command()
@render.output_options
def clusters(fmt, as_json):
    """Built-in cluster specs: GPUs per node and per NVLink domain, links (per GPU, per direction) and latencies."""
    specs = builtin_clusters().values()
    data = {"clusters": [s.to_dict() for s in specs]}
    rows = [[s.name, s.gpu, s.gpus_per_node, s.scale_up_gpus, s.intra.bandwidth_Bps / 1e9, s.intra.latency_s * 1e6,
             None if s.inter is None else s.inter.bandwidth_Bps / 1e9,
             None if s.inter is None else s.inter.latency_s * 1e6, "yes" if s.measured else ""] for s in specs]
    render.emit(render.Output(data, (render.table("clusters", ["name", "gpu", "gpus/node", "domain", "intra GB/s", "intra us",
                                                                "inter GB/s", "inter us", "measured"], rows),),
                              ("GB/s per GPU per direction; us per algorithm step. domain: GPUs one intra link joins (an NVLink domain; "
                               "the node unless nvlink_domain_gpus says more).",)), fmt, as_json)
