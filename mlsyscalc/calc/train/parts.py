"""Kernel time of one micro-batch on one pipeline stage, from the roofline's per-op rows.

Every op time is `calc.roofline.model.predict_model`'s (phase train, recompute none) for one
micro-batch on one GPU's shard: tensor parallelism through its `tp`, context parallelism by giving
each rank seq/cp query tokens against (seq - seq/cp)/2 earlier keys, which is the causal work of one
of cp load-balanced ranks (Megatron's context parallelism pairs chunk i with chunk 2cp-1-i, so each
rank does 1/cp of the causal attention). The recomputed forward is `calc.roofline.training.recompute_rows`
of the forward rows. Three shardings are applied to the roofline's op times, each a linear scale:

- sequence parallelism (Korthikanti et al. 2022, section 4.2.2) runs the norms and residual adds
  (the roofline's `norm` group) on tokens / tp;
- the MoE capacity factor pads every expert's token slots: routed-expert matmuls x capacity factor;
- the routed experts run on their own grid (Megatron-Core's MoE parallel folding, calc.parallel.expert_grid):
  the roofline prices each GPU's E / ep experts, split over etp ranks, on the routed copies of the
  sequence-split tokens of its etp ranks (as many as it sends: balanced routing), so expert
  parallelism leaves a GPU's routed FLOPs unchanged and shrinks the weights its grouped GEMMs read.

Per layer kind (dense, MoE) and pass the time of ONE layer is kept, so a stage's time is a count of
layers of each kind; the head rows go to the first stage (embedding) and the last (final norm, lm_head).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ...specs.model import ModelSpec
from ..roofline.calibration import Ceilings
from ..roofline.model import ModelRoofline, predict_model
from ..parallel.pipeline_split import EVEN, PipelineSplit, stage_layer_ids
from ..roofline.ops import OpRow
from ..roofline.options import RooflineOptions
from ..roofline.training import recompute_rows
from ..precision.fp4 import low_precision
from ..precision.fp8 import DEFAULT_RECIPE, Gemm, layer_gemms, pass_rows

PASSES = ("forward", "backward", "recompute_selective", "recompute_full")
KINDS = ("dense", "moe")


@dataclass(frozen=True)
class StageParts:
    """Seconds of one micro-batch: per layer of each kind and pass, and the head's rows."""

    layer_s: Mapping[str, Mapping[str, float]]  # kind -> pass -> seconds of one layer
    attention_s: Mapping[str, Mapping[str, float]]  # the attention-core part of layer_s
    first_s: Mapping[str, float]  # embedding: forward, backward
    last_s: Mapping[str, float]  # final norm + lm_head: forward, backward
    # kernels the roofline prices, (all, matmuls): kind -> pass -> one layer's; "first"/"last" -> pass -> the ends'
    ops: Mapping[str, Mapping[str, tuple[float, float]]] = field(default_factory=dict)
    # fp8 (calc.precision.fp8): the scaling kernels' part of layer_s (kind -> pass -> seconds of one layer), and
    # one layer's FP8 GEMM groups (kind -> groups), whose weights are cast once a step
    fp8_s: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    fp8_gemms: Mapping[str, tuple[Gemm, ...]] = field(default_factory=dict)
    # the weight-gradient part of the backward (the linears' wgrad GEMMs; the embedding's backward is all weight
    # gradient): "dense"/"moe" -> one layer's seconds, "first"/"last" -> the ends' (zero-bubble schedules: train)
    wgrad_s: Mapping[str, float] = field(default_factory=dict)

    def layer_time(self, kind: str, recompute: str) -> tuple[float, float]:
        """(forward, backward incl. recomputation) seconds of one layer of `kind`."""
        t = self.layer_s[kind]
        extra = t[f"recompute_{recompute}"] if recompute != "none" else 0.0
        return t["forward"], t["backward"] + extra

    def attention_time(self, kind: str, recompute: str) -> float:
        t = self.attention_s[kind]
        return t["forward"] + t["backward"] + (t[f"recompute_{recompute}"] if recompute != "none" else 0.0)


def _scale(row: OpRow, tp: int, sp: bool, capacity_factor: float) -> float:
    if sp and row.group == "norm":
        return row.total_s / tp
    if row.pred.name.startswith("experts."):
        return row.total_s * capacity_factor
    return row.total_s


# The kernels a framework's step runs (calc.roofline.model's --impl): Megatron-LM's fused ones, or plain
# PyTorch's (torch's FSDP2/DDP/DTensor code: the one-GPU kernel list checked against measured training steps,
# reports/models). FP8 is Transformer Engine's, priced with the fused list whatever the framework.
FRAMEWORK_IMPL = {"megatron": "fused", "torch": "torch"}
LOSS_IMPL = {"fused": "fused", "bf16": "torch"}  # the kernel list whose loss each --loss names (fp32: both lists')


def kernel_impl(framework: str, dtype: str) -> str:
    """The roofline impl a framework's training step is priced with (FRAMEWORK_IMPL; fp8: fused)."""
    return "fused" if low_precision(dtype) else FRAMEWORK_IMPL[framework]


def roofline_pass(spec: ModelSpec, ceilings: Ceilings, *, tp: int, cp: int, micro_batch: int, seq: int,
                  dtype: str, cluster: str | None = None, impl: str = "fused", loss: str = "fp32",
                  dropout: float = 0.0, clocks: str = "sustained", ep: int = 1,
                  etp: int | None = None) -> ModelRoofline:
    """The roofline of one micro-batch on one GPU's TP/CP shard (phase train, no recomputation), with the
    kernel list `impl` (kernel_impl); `loss`, `dropout` and `clocks` as RooflineOptions takes them (the fused
    list's loss kernels; plain PyTorch's list has its own loss); the routed experts on the ep x etp grid."""
    local = seq // cp
    return predict_model(spec, ceilings, RooflineOptions(phase="train", batch=micro_batch, seq=local,
                                                         context=(seq - local) // 2, tp=tp, dtype=dtype,
                                                         cluster=cluster, recompute="none", impl=impl,
                                                         loss=loss if LOSS_IMPL.get(loss, impl) == impl else "fp32", dropout=dropout,
                                                         clocks=clocks, ep=ep, etp=etp))


def stage_parts(spec: ModelSpec, result: ModelRoofline, *, sp: bool, capacity_factor: float = 1.0,
                attention: Mapping[str, float] | None = None, fp8_recipe: str = DEFAULT_RECIPE,
                attention_scale: Mapping[str, float] | None = None) -> StageParts:
    """Per-layer and head seconds of one micro-batch from `roofline_pass` (module docstring). `attention`
    ({"forward": s, "backward": s} of one layer, `calc.train.attention_time`) replaces the roofline's flash
    attention-core rows; a recomputed forward repeats its forward. `attention_scale` ({"forward": x, "backward": y},
    calc.train.attention_time.attention_pass_scale) multiplies the roofline's attention-core rows of each pass (a
    recomputed forward takes the forward's). In fp8 the layers' FP8 scaling kernels
    (with `fp8_recipe`) join their pass and the head runs in bf16 (`calc.precision.fp8.pass_rows`)."""
    tp = result.options.tp
    passes = pass_rows(spec, result, sp=sp and tp > 1, recipe=fp8_recipe)  # result.rows unless fp8
    forward = [r for r in passes if r.pass_name == "forward"]
    rows = {"forward": forward, "backward": [r for r in passes if r.pass_name == "backward"],
            "recompute_selective": recompute_rows(forward, "selective"),
            "recompute_full": recompute_rows(forward, "full")}
    counts = {"dense": sum(not spec.layer_is_moe(i) for i in range(spec.num_layers)),
              "moe": sum(spec.layer_is_moe(i) for i in range(spec.num_layers))}
    where = {"dense": "layers", "moe": "moe layers"}
    sp = sp and tp > 1

    def total(pass_rows: list[OpRow], keep) -> float:
        return sum(_scale(r, tp, sp, capacity_factor) for r in pass_rows if keep(r))

    def count(pass_rows: list[OpRow], keep, n: int = 1) -> tuple[float, float]:
        kept = [r for r in pass_rows if keep(r)]
        return sum(r.count for r in kept) / n, sum(r.count for r in kept if r.pred.kind == "matmul") / n

    layer_s, attention_s, ops, fp8_s = {}, {}, {}, {}
    for kind in KINDS:
        n = max(counts[kind], 1)
        ops[kind] = {p: count(rows[p], lambda r: r.layers == where[kind], n) for p in PASSES}
        core = {p: total(rows[p], lambda r: r.layers == where[kind] and r.pred.kind == "attention") / n for p in PASSES}
        if attention is not None:
            core = {p: attention["backward" if p == "backward" else "forward"] for p in PASSES}
        elif attention_scale is not None:
            core = {p: t * attention_scale["backward" if p == "backward" else "forward"] for p, t in core.items()}
        rest = {p: total(rows[p], lambda r: r.layers == where[kind] and r.pred.kind != "attention") / n for p in PASSES}
        layer_s[kind] = {p: rest[p] + core[p] for p in PASSES}
        attention_s[kind] = core
        fp8_s[kind] = {p: total(rows[p], lambda r: r.layers == where[kind] and r.group == "fp8") / n for p in PASSES}
    is_first = lambda r: r.layers == "head" and r.pred.name.startswith("embedding")  # noqa: E731
    is_last = lambda r: r.layers == "head" and not r.pred.name.startswith("embedding")  # noqa: E731
    first = {p: total(rows[p], is_first) for p in ("forward", "backward")}
    last = {p: total(rows[p], is_last) for p in ("forward", "backward")}
    ops |= {"first": {p: count(rows[p], is_first) for p in ("forward", "backward")},
            "last": {p: count(rows[p], is_last) for p in ("forward", "backward")}}
    fp8 = any(r.group == "fp8" for r in forward)
    gemms = {kind: tuple(layer_gemms(forward).get(where[kind], ())) for kind in KINDS} if fp8 else {}
    wgrad = lambda r: r.pred.name.endswith(".wgrad")  # noqa: E731
    wgrad_s = {**{kind: total(rows["backward"], lambda r: r.layers == where[kind] and wgrad(r)) / max(counts[kind], 1)
                  for kind in KINDS},
               "first": first["backward"], "last": total(rows["backward"], lambda r: is_last(r) and wgrad(r))}
    return StageParts(layer_s, attention_s, first, last, ops, fp8_s, gemms, wgrad_s)


@dataclass(frozen=True)
class Stage:
    """One pipeline stage (all its model chunks): layers of each kind, and whether it holds the ends."""

    index: int
    layers: tuple[int, ...]
    dense: int
    moe: int
    first: bool
    last: bool


def pipeline_stages(spec: ModelSpec, pp: int, vp: int, split: PipelineSplit = EVEN) -> tuple[Stage, ...]:
    """Stage s holds its model chunks' layers in Megatron-LM's interleaved order (Narayanan et al. 2021, section
    2.2.2; vp = 1 is plain 1F1B): layers / (pp vp) consecutive layers a chunk evenly, or `split`'s uneven counts
    (calc.parallel.pipeline_split)."""
    stages = []
    for s, layers in enumerate(stage_layer_ids(spec.num_layers, pp, vp, split)):
        moe = sum(spec.layer_is_moe(i) for i in layers)
        stages.append(Stage(s, layers, len(layers) - moe, moe, s == 0, s == pp - 1))
    return tuple(stages)


def stage_time(parts: StageParts, stage: Stage, recompute: str) -> tuple[float, float, float]:
    """(forward, backward incl. recomputation, attention) seconds of one micro-batch on `stage`."""
    fwd = bwd = attn = 0.0
    for kind, n in (("dense", stage.dense), ("moe", stage.moe)):
        if n:
            f, b = parts.layer_time(kind, recompute)
            fwd, bwd, attn = fwd + n * f, bwd + n * b, attn + n * parts.attention_time(kind, recompute)
    for ends, held in ((parts.first_s, stage.first), (parts.last_s, stage.last)):
        if held:
            fwd, bwd = fwd + ends["forward"], bwd + ends["backward"]
    return fwd, bwd, attn


def stage_wgrad_s(parts: StageParts, stage: Stage) -> float:
    """Seconds of one micro-batch's weight-gradient kernels on `stage` (StageParts.wgrad_s): the part of its
    backward a zero-bubble schedule defers (calc.train.step.pipeline_bubble_s)."""
    w = sum(n * parts.wgrad_s.get(kind, 0.0) for kind, n in (("dense", stage.dense), ("moe", stage.moe)))
    return w + sum(parts.wgrad_s.get(end, 0.0) for end, held in (("first", stage.first), ("last", stage.last)) if held)


def stage_ops(parts: StageParts, stage: Stage, recompute: str) -> tuple[float, float]:
    """(kernels, of which matmuls) the roofline prices for one micro-batch on `stage`: forward, backward
    and the recomputed forward of its layers, and the ends it holds."""
    passes = ("forward", "backward") + ((f"recompute_{recompute}",) if recompute != "none" else ())
    ops = matmuls = 0.0
    for kind, n in (("dense", stage.dense), ("moe", stage.moe)):
        for p in passes if n else ():
            ops, matmuls = ops + n * parts.ops[kind][p][0], matmuls + n * parts.ops[kind][p][1]
    for end, held in (("first", stage.first), ("last", stage.last)):
        for p in ("forward", "backward") if held else ():
            ops, matmuls = ops + parts.ops[end][p][0], matmuls + parts.ops[end][p][1]
    return ops, matmuls


def slowest_of(parts: StageParts, stages: tuple[Stage, ...], recompute: str) -> Stage:
    """The stage with the most kernel time (forward + backward of one micro-batch), each shape of stage timed once."""
    kinds = {(st.dense, st.moe, st.first, st.last): st for st in stages}
    return max(kinds.values(), key=lambda st: sum(stage_time(parts, st, recompute)[:2]))


def slowest_stage(parts: StageParts, stages: tuple[Stage, ...], recompute: str) -> tuple[float, float, float]:
    """(forward, backward, attention) of one micro-batch on the stage with the most kernel time (slowest_of)."""
    return stage_time(parts, slowest_of(parts, stages, recompute), recompute)
