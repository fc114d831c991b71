"""One optimizer step of a full parallel layout: step time, MFU, HFU, memory per GPU and whether it fits.

The step (Narayanan et al. 2021, PTD-P, section 2.2; Korthikanti et al. 2022):

    compute   = m x (f + b) of the slowest pipeline stage, per micro-batch (calc.train.parts:
                the roofline's op times, b includes the recomputed forward), priced with the framework's
                kernels: Megatron-LM's fused list (megatron, and fp8 under either framework) or plain
                PyTorch's (torch: `--impl torch`); the host's work is counted in the fused list either way
    contention = (comm_sms / sm_count + overlap_slowdown) x overlapped (hidden) comm seconds: the
                compute lost to the SMs NCCL holds while it runs beside the kernels (calc.comm.exposed)
                and, with --framework torch, the rest of the slowdown measured beside torch DDP's
                all-reduce; with --framework torch and vp > 1 also the interleaved schedule's p2p
                slowdown (calc.train.host)
    bubble    = (p - 1) / v x (f + b)   i.e. bubble / compute = (p - 1) / (v m)  (1F1B; interleaved
                with v model chunks per GPU, Narayanan et al. 2021, section 2.2.2)
    optimizer = AdamW over this GPU's parameters (after ZeRO sharding): memory-bound, the roofline's
    comm     = per dimension, the exposed part of `calc.comm.step` traffic (calc.comm.exposed)
    host     = the part of the host's issue time beyond the GPU's (calc.train.host; 0 with --framework
               megatron, the default)
    step_time = compute + contention + bubble + optimizer + sum of exposed comm + host

m = global batch / (dp x micro-batch) micro-batches, p = pp, v = vp. Stages may hold unequal layers
(Megatron-LM's uneven split, calc.parallel.pipeline_split): f and b are then the slowest stage's, so the bubble is
(p - 1) / v times the slowest stage's f + b, an upper bound of the schedule's fill and drain. Memory per GPU is
`calc.memory.training.train_memory` of the same layout; the interleaved schedule keeps
(1 + (p - 1) / (p v)) times the 1F1B activations on the first stage (Korthikanti et al. 2022, section 4.2.3;
`calc.memory.schedule` counts every stage's chunk-forwards in flight). Model FLOPs are `calc.counts.flops` (2 FLOPs per multiply-add, matmuls only, causal
attention halved, backward = 2 x forward): MFU = model FLOPs / (step time x GPUs x datasheet peak);
HFU also counts the recomputed forward (full: every layer's forward; selective: the attention core).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

from ...dtypes import bytes_per_element, dtype_name
from ...specs.cluster import ClusterSpec, builtin_clusters, load_cluster
from ...specs.gpu import load_gpu
from ...specs.model import ModelSpec
from ...errors import MlsysError, require
from ..roofline.calibration import Ceilings
from ..comm.collectives import collective_cost
from ..comm.step import StepOptions, step_comm
from ..counts.flops import FlopOptions, count_flops
from ..parallel.shards import stage_params, verdict
from ..memory.training import TrainMemory, TrainOptions, train_memory
from ..parallel.pipeline_split import EVEN, PipelineSplit, stage_layer_ids
from ..roofline.options import RooflineOptions
from ..roofline.training import adamw_op, clip_ops, torch_mixed_state_bytes
from ..comm.exposed import DIMS, Windows, contention_s, dim_times, traffic
from .host import FRAMEWORK_SOURCES, StageWork, exposed_host_s, framework_costs, host_paths, interleaved_contention_s, stage_work
from .attention_time import attention_ceilings, attention_pass_scale, unfused_attention_s
from .options import TrainStepOptions
from ..precision.fp8 import stage_fp8_s, weight_cast_s
from .parts import (Stage, StageParts, kernel_impl, pipeline_stages, roofline_pass, slowest_of, stage_parts,
                          stage_time, stage_wgrad_s)

FLOP_CONVENTION = ("model FLOPs: calc.counts.flops (2 per multiply-add, matmuls only, causal attention halved, "
                   "backward = 2 x forward); hfu adds the recomputed forward")


@dataclass(frozen=True)
class PipelineStage:
    """One pipeline stage as the step prices it: the slowest paces the steady state and the bubble."""

    stage: int
    layers: int  # decoder layers, all its model chunks
    embedding: bool  # holds the embedding (the first stage)
    head: bool  # holds the final norm, lm_head and loss (the last stage)
    forward_s: float  # kernel seconds of one micro-batch
    backward_s: float  # kernel seconds of one micro-batch, with the recomputed forward


@dataclass(frozen=True)
class TrainStep:
    model: str
    gpu: str
    cluster: str
    options: TrainStepOptions
    breakdown: Mapping[str, float]  # compute_s, contention_s, bubble_s, optimizer_s, host_s, <dim>_comm_s: sums to step_time_s
    comm_total_s: Mapping[str, float]  # per dimension, before overlap
    model_flops: float  # whole step, all GPUs
    recompute_flops: float  # the recomputed forward, all GPUs
    peak_flops: float  # datasheet FLOP/s of one GPU in the compute dtype
    memory: TrainMemory
    usable_bytes: int  # GPU memory less the reserve
    host_path_s: Mapping[str, float]  # the host's issue time: forward_backward, optimizer (calc.train.host)
    host_work: StageWork  # what the host issues on the busiest stage
    pipeline: tuple[PipelineStage, ...] = ()  # every stage's layers and seconds per micro-batch
    domain_gpus: int = 0  # GPUs the job takes in each NVLink domain (ClusterSpec.for_job; the node on 8-GPU boxes)

    @property
    def step_time_s(self) -> float:
        return sum(self.breakdown.values())

    @property
    def tokens_per_s(self) -> float:
        return self.options.global_batch * self.options.seq / self.step_time_s

    @property
    def tflops_per_gpu(self) -> float:
        """Model FLOP/s per GPU (FLOP/s, not TFLOP/s: base units in JSON)."""
        return self.model_flops / (self.step_time_s * self.options.gpus)

    @property
    def mfu(self) -> float:
        return self.tflops_per_gpu / self.peak_flops

    @property
    def hfu(self) -> float:
        return (self.model_flops + self.recompute_flops) / (self.step_time_s * self.options.gpus * self.peak_flops)

    @property
    def memory_bytes_per_gpu(self) -> int:
        return self.memory.total

    @property
    def fits(self) -> bool:
        return self.memory_bytes_per_gpu <= self.usable_bytes

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.model, "gpu": self.gpu, "cluster": self.cluster, "gpus": self.options.gpus,
                "seq": self.options.seq, "global_batch": self.options.global_batch,
                "step_time_s": self.step_time_s, "tokens_per_s": self.tokens_per_s,
                "tflops_per_gpu": self.tflops_per_gpu, "mfu": self.mfu, "hfu": self.hfu,
                "memory_bytes_per_gpu": self.memory_bytes_per_gpu, "usable_bytes": self.usable_bytes,
                "fits": self.fits, "breakdown": dict(self.breakdown),
                "comm_total_s": dict(self.comm_total_s), "model_flops": self.model_flops,
                "recompute_flops": self.recompute_flops, "peak_flops": self.peak_flops,
                "layout": self.options.layout(), "overlap": list(self.options.overlap),
                "comm_sms": self.options.comm_sms, "framework": self.options.framework,
                "kernels": kernel_impl(self.options.framework, self.options.dtype),
                "host_path_s": dict(self.host_path_s), "host_work": asdict(self.host_work),
                "framework_source": FRAMEWORK_SOURCES[self.options.framework] + (
                    f"; overridden by {self.options.host_source}" if self.host_calibrated else ""),
                "host_costs": asdict(framework_costs(self.options.framework, self.options.host_costs)),
                "attention": self.options.attention, "memory": self.memory_parts(), "pipeline": self.pipeline_parts(),
                "fp8_recipe": self.options.fp8_recipe, "fp8_params": self.options.fp8_params,
                "scaling_recipe": self.options.scaling_recipe, "grad_reduce": self.options.grad_reduce_dtype(),
                "nvlink_domain_gpus": self.domain_gpus,
                "flop_convention": FLOP_CONVENTION}

    def pipeline_parts(self) -> dict[str, Any]:
        """The split (Megatron-LM's options), each stage's layers and seconds, and the slowest stage."""
        slowest = max(self.pipeline, key=lambda st: st.forward_s + st.backward_s, default=None)
        return {"split": self.options.pipeline_split.as_dict(), "slowest_stage": slowest.stage if slowest else None,
                "stages": [asdict(st) for st in self.pipeline]}

    @property
    def host_calibrated(self) -> bool:
        return self.options.framework == "torch" and bool(self.options.host_costs)

    def memory_parts(self) -> dict[str, Any]:
        """memory_bytes_per_gpu by part at the peak stage and phase (docs/memory.md): `breakdown` sums to it."""
        peak = self.memory.peak_stage
        return {"schedule": self.options.schedule, "framework": self.options.framework, "peak_stage": peak.stage,
                "peak_phase": peak.phase, "micro_batches_in_flight": peak.micro_batches_in_flight,
                "breakdown": {f"{k}_bytes": v for k, v in peak.breakdown.items()},
                "detail": {f"{k}_bytes": v for k, v in peak.detail.items()},
                "bytes_per_element": dict(self.memory.bytes_per_element)}


def resolve_cluster(gpu: str | None, cluster: str | ClusterSpec | None, gpus: int) -> ClusterSpec:
    """The cluster named, else the built-in cluster of `gpu`'s GPUs (the largest node; one with an
    inter-node link when `gpus` spans nodes)."""
    if cluster is not None:
        return load_cluster(cluster)
    if gpu is None:
        raise MlsysError("give --gpu NAME or --cluster NAME|FILE")
    name = load_gpu(gpu).name
    nodes = sorted((c for c in builtin_clusters().values() if c.gpu == name and not c.measured),
                   key=lambda c: (c.inter is not None or gpus <= c.scale_up_gpus, c.scale_up_gpus))
    require(bool(nodes), f"no built-in cluster of {name} GPUs; pass --cluster NAME or FILE")
    return nodes[-1]


def model_flops(spec: ModelSpec, opts: TrainStepOptions) -> tuple[float, float]:
    """(model FLOPs of the step, FLOPs of the recomputed forward), all GPUs, calc.counts.flops convention."""
    flops = count_flops(spec, FlopOptions(batch=opts.global_batch, seq=opts.seq, causal=True))
    extra = {"none": 0, "selective": flops.breakdown["attention_core"],
             "full": flops.forward - flops.breakdown["lm_head"]}[opts.recompute]
    return float(flops.train_step), float(extra)


def stage_param_counts(spec: ModelSpec, tp: int, ep: int, pp: int,
                       split: PipelineSplit = EVEN, etp: int | None = None) -> tuple[tuple[int, int], ...]:
    """(dense, routed-expert) parameters per GPU of each pipeline stage, stages as calc.memory.training
    splits the layers (pp contiguous blocks of each stage's count, even or `split`'s; interleaving moves
    layers between stages, not their count per stage, for a model whose layers are alike); the routed
    experts E / ep a GPU, each split over etp ranks (None: tp)."""
    return tuple((p.dense, p.expert) for p in (
        stage_params(spec, layers, s == 0, s == pp - 1, tp, ep, pp, etp=etp)
        for s, layers in enumerate(stage_layer_ids(spec.num_layers, pp, 1, split))))


# TP's backward all-reduces (calc.comm.step): Megatron's fused column-parallel linears share one; plain torch's
# DTensor TP reduces each linear's input gradient (measured: 226 all-reduces a step of a 32-layer llama at tp 2,
# 7 a layer and 2 at the ends; reports/train/README.md)
TP_INPUT_REDUCE = {"megatron": "shared", "torch": "each"}


def optimizer_s(counts: tuple[tuple[int, int], ...], zero: int, shard: int, expert_shard: int, dtype: str,
                ceilings: Ceilings, framework: str = "megatron", clip: bool = False) -> float:
    """AdamW on the stage with the most parameters per GPU; ZeRO >= 1 shards dense parameters over
    shard = dp x cp ranks and routed experts over the expert data-parallel group, expert_shard = edp =
    tp x cp x dp / (etp x ep) ranks (as calc.memory.training shards them).
    Megatron's fused mixed-precision optimizer, or (framework "torch") plain torch's cast, step and copy.
    `clip`: the gradient norm and clipping before it, over the same parameters' gradients (fp32 main gradients
    under Megatron and FSDP2's ZeRO-3, the model dtype's otherwise)."""
    most = max(1, round(max(d / shard + e / expert_shard if zero >= 1 else d + e for d, e in counts)))
    state = torch_mixed_state_bytes(dtype, zero) if framework == "torch" else None
    seconds = adamw_op(most, dtype, ceilings, state=state).step_s
    if clip:
        grad_bytes = 4.0 if framework == "megatron" or zero == 3 else bytes_per_element(dtype)
        seconds += sum(op.step_s for op in clip_ops(most, grad_bytes, ceilings))
    return seconds


def step_breakdown(*, pp: Any, vp: Any, windows: Windows, seconds: Mapping[tuple[str, str], Any], zero: Any,
                   recompute: Any, overlap: tuple[str, ...], optimizer: Any,
                   sm_share: float = 0.0, host: tuple[Any, Any] = (0.0, 0.0),
                   p2p_slowdown: float = 0.0, overlap_slowdown: float = 0.0,
                   fp8: tuple[Any, Any] = (0.0, 0.0), fsdp: bool = False,
                   bubble: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(breakdown whose parts sum to the step time, total comm seconds per dimension); elementwise
    over numpy arrays of layouts too (plan). sm_share: comm_sms / sm_count (calc.comm.exposed); host:
    the host's (forward+backward, optimizer) issue seconds, p2p_slowdown the interleaved schedule's
    lost compute share and overlap_slowdown the share of the overlapped span lost beyond the SMs
    (calc.train.host). fp8: (FP8 scaling seconds of one micro-batch, inside the windows' forward and backward;
    the step's other FP8 seconds: amax all-reduces and weight casts), shown together as fp8_scaling_s
    (calc.precision.fp8). fsdp: ZeRO-2/3 as PyTorch's FSDP2 (StepOptions.fsdp). bubble: the schedule's
    (pipeline_bubble_s; default 1F1B's, interleaved with vp)."""
    total, exposed = dim_times(seconds, zero=zero, recompute=recompute, overlap=overlap, windows=windows, fsdp=fsdp)
    if bubble is None:
        bubble = (pp - 1) / vp * (windows.forward_s + windows.backward_s)
    lost = contention_s(total, exposed, overlap, sm_share + overlap_slowdown) + interleaved_contention_s(
        p2p_slowdown, vp, windows.compute_s, bubble)
    scaling = windows.micro_batches * fp8[0]
    gpu = {"compute_s": windows.compute_s - scaling, "fp8_scaling_s": scaling + fp8[1], "contention_s": lost,
           "bubble_s": bubble}
    comm = {f"{d}_comm_s": exposed[d] for d in DIMS}
    gpu_fb = sum(gpu.values()) + sum(comm.values())
    breakdown = {**gpu, "optimizer_s": optimizer, "host_s": exposed_host_s(host, gpu_fb, optimizer), **comm}
    return breakdown, total


def pipeline_bubble_s(schedule: str, pp: int, vp: int, f: float, b: float, w: float) -> float:
    """Fill and drain of the pipeline, from one micro-batch's forward f, backward b (recomputation included) and its
    weight-gradient part w on the slowest stage (DeepSeek-AI 2024, DeepSeek-V3 report, Table 2): 1F1B and GPipe
    (pp - 1) / vp (f + b) (Narayanan et al. 2021, interleaved with vp); zb1p (pp - 1)(f + b - 2w) (Qi et al. 2023,
    ZB-H1); dualpipe (pp/2 - 1)(F&B + b - 3w), a forward and a backward chunk run together taken as F&B = f + b
    (DualPipe overlaps their communication, not their kernels)."""
    if schedule == "zb1p":
        return max(0.0, (pp - 1) * (f + b - 2 * w))
    if schedule == "dualpipe":
        return max(0.0, (pp / 2 - 1) * (f + 2 * b - 3 * w))
    return (pp - 1) / vp * (f + b)


def _floats(values: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in values.items()}


def core_attention(spec: ModelSpec, ceilings: Ceilings, opts: TrainStepOptions) -> dict[str, float] | None:
    """One layer's unfused attention-core seconds per pass with --attention unfused, else None (the
    roofline's flash kernel stays)."""
    if opts.attention != "unfused":
        return None
    return unfused_attention_s(spec, ceilings, tp=opts.tp, micro_batch=opts.micro_batch, seq=opts.seq,
                               dtype=opts.memory_dtype)


def step_fp8_s(parts: StageParts, stages: tuple[Stage, ...], opts: TrainStepOptions, ceilings: Ceilings,
               cluster: ClusterSpec, weights: Mapping[str, float] | None = None) -> tuple[float, float]:
    """(FP8 scaling kernels of one micro-batch, inside its forward and backward; the step's other FP8 seconds:
    m x the amax all-reduces of a micro-batch, over the TP group, plus the weight casts) on the slowest stage,
    the one `slowest_of` picks; (0, 0) unless fp8 (calc.precision.fp8). `weights`: `fp8_weight_casts` of the
    layout, when the caller holds them (plan)."""
    slowest = slowest_of(parts, stages, opts.recompute)
    reduce_s = collective_cost("all-reduce", 4, opts.tp, cluster).time_s if opts.tp > 1 else 0.0  # one fp32 amax
    kernels, reduces, casts = stage_fp8_s(
        parts, slowest.dense, slowest.moe, opts.recompute, recipe=opts.scaling_recipe, tp=opts.tp, sp=opts.sp_active,
        amax_reduce_s=reduce_s, weights=fp8_weight_casts(parts, opts, ceilings) if weights is None else weights)
    return kernels, opts.num_micro_batches * reduces + casts


def fp8_weight_casts(parts: StageParts, opts: TrainStepOptions, ceilings: Ceilings) -> dict[str, float]:
    """One layer's FP8 weight-cast seconds per layer kind (calc.precision.fp8.weight_cast_s): the ZeRO shard
    matters only with FP8 parameters (the optimizer casts its fp32 master shard)."""
    sharded = opts.zero >= 1 and opts.fp8_params
    return weight_cast_s(parts.fp8_gemms, ceilings, recipe=opts.scaling_recipe, fp8_params=opts.fp8_params,
                         shard=opts.data_parallel * opts.cp if sharded else 1,
                         expert_shard=opts.experts.edp if sharded else 1)


def step_memory(spec: ModelSpec, opts: TrainStepOptions) -> TrainMemory:
    """`calc.memory.training` of the layout (with the schedule, interleaving and framework it names)."""
    mem = train_memory(spec, TrainOptions(
        batch=opts.micro_batch, seq=opts.seq, grad_accum=opts.num_micro_batches,
        dtype=dtype_name(opts.dtype), fp8_params=opts.fp8_params, dp=opts.data_parallel, tp=opts.tp, pp=opts.pp,
        sp=opts.sp_active, ep=opts.ep, etp=opts.etp, cp=opts.cp, zero=opts.zero,
        recompute=opts.recompute, capacity_factor=opts.capacity_factor, flash=opts.attention != "unfused",
        schedule=opts.schedule, framework=opts.framework, loss=opts.loss, vp=opts.vp, vocab_parallel=opts.vocab_parallel,
        pipeline_split=opts.pipeline_split))
    return mem


def step_ceilings(ceilings: Ceilings, opts: TrainStepOptions) -> Ceilings:
    """The ceilings a step is priced at, with its attention kernel's efficiency (calc.train.attention_time); its kernels'
    clocks are set by the micro-batch's own kernel mix (roofline_pass, calc.roofline.steady), and the memory-bound rest of
    the step (the optimizer, FP8 casts) does not move with the clock."""
    return attention_ceilings(ceilings, opts.attention)


def train_parts(spec: ModelSpec, ceilings: Ceilings, opts: TrainStepOptions, impl: str) -> StageParts:
    """One micro-batch's per-layer and head seconds on one GPU's shard, priced with the kernel list `impl`."""
    result = roofline_pass(spec, ceilings, tp=opts.tp, cp=opts.cp, micro_batch=opts.micro_batch, seq=opts.seq,
                           dtype=opts.dtype, impl=impl, loss=opts.loss, dropout=opts.dropout,
                           clocks=opts.clocks, ep=opts.ep, etp=opts.etp)
    return stage_parts(spec, result, sp=opts.sp_active, capacity_factor=opts.capacity_factor,
                       attention=core_attention(spec, result.ceilings, opts), fp8_recipe=opts.scaling_recipe,
                       attention_scale=attention_pass_scale(opts.attention))


def train_step(spec: ModelSpec, ceilings: Ceilings, cluster: ClusterSpec | str, opts: TrainStepOptions,
               parts: StageParts | None = None, host_parts: StageParts | None = None) -> TrainStep:
    """Step time, rates, memory and fit of one layout (module docstring); `parts` (priced with the framework's
    kernels, `kernel_impl`) and `host_parts` (the fused list, the unit the host costs count kernels in) may be
    passed in when the caller already holds them (plan)."""
    cluster = load_cluster(cluster).for_job(opts.gpus)  # the GPUs it takes in each NVLink domain
    opts.validate(spec, cluster)
    RooflineOptions(phase="train", seq=opts.seq, dtype=opts.dtype).validate(spec)  # positions, dtype
    ceilings = step_ceilings(ceilings, opts)
    impl = kernel_impl(opts.framework, opts.dtype)
    if parts is None:
        parts = train_parts(spec, ceilings, opts, impl)
    if host_parts is None:
        host_parts = parts if impl == "fused" else train_parts(spec, ceilings, opts, "fused")
    stages = pipeline_stages(spec, opts.pp, opts.vp, opts.pipeline_split)
    slow = slowest_of(parts, stages, opts.recompute)
    f, b, a = stage_time(parts, slow, opts.recompute)
    bubble = pipeline_bubble_s(opts.schedule, opts.pp, opts.vp, f, b, stage_wgrad_s(parts, slow))
    fp8 = step_fp8_s(parts, stages, opts, ceilings, cluster)
    work = stage_work(spec, host_parts, stages, opts.recompute)
    costs = framework_costs(opts.framework, opts.host_costs)
    host = host_paths(work, costs,
                      micro_batches=opts.num_micro_batches, tp=opts.tp, zero=opts.zero)
    comm = step_comm(spec, StepOptions(
        dp=opts.data_parallel, tp=opts.tp, pp=opts.pp, ep=opts.ep, cp=opts.cp, etp=opts.etp, sp=opts.sp_active,
        zero=opts.zero,
        batch=opts.micro_batch, seq=opts.seq, grad_accum=opts.num_micro_batches, interleave=opts.vp,
        dtype=opts.memory_dtype, grad_dtype=opts.grad_reduce_dtype(), tp_input_reduce=TP_INPUT_REDUCE[opts.framework], fsdp=opts.framework == "torch",
        stages=() if opts.pipeline_split.even else tuple(st.layers for st in stages)), cluster)
    counts = stage_param_counts(spec, opts.tp, opts.ep, opts.pp, opts.pipeline_split, opts.etp)
    breakdown, total = step_breakdown(
        pp=opts.pp, vp=opts.vp, windows=Windows(f, b, a, opts.num_micro_batches), seconds=traffic(comm.rows),
        zero=opts.zero, recompute=opts.recompute, overlap=opts.overlap,
        optimizer=optimizer_s(counts, opts.zero, opts.data_parallel * opts.cp, opts.experts.edp, opts.memory_dtype, ceilings,
                              opts.framework, opts.clip_grad),
        sm_share=opts.comm_sm_share(ceilings.gpu.sm_count), host=host, p2p_slowdown=costs.p2p_slowdown,
        overlap_slowdown=costs.overlap_slowdown, fp8=fp8, fsdp=opts.framework == "torch", bubble=bubble)
    mem = step_memory(spec, opts)
    usable = verdict(ceilings.gpu, 0, opts.reserve).usable_bytes
    flops, recompute = model_flops(spec, opts)
    peak = ceilings.datasheet_flops(RooflineOptions(dtype=opts.dtype).compute_dtype)
    return TrainStep(spec.name, ceilings.gpu.name, cluster.name, opts, _floats(breakdown), _floats(total), flops,
                     recompute, peak, mem, usable,
                     {"forward_backward": float(host[0]), "optimizer": float(host[1])}, work,
                     pipeline_report(parts, stages, opts.recompute), min(cluster.scale_up_gpus, opts.gpus))


def pipeline_report(parts: StageParts, stages: tuple[Stage, ...], recompute: str) -> tuple[PipelineStage, ...]:
    """Each stage's decoder layers, the ends it holds and its kernel seconds per micro-batch (calc.train.parts)."""
    return tuple(PipelineStage(st.index, len(st.layers), st.first, st.last, *stage_time(parts, st, recompute)[:2])
                 for st in stages)
