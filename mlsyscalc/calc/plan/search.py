"""Search every layout of `plan_space` for the fastest training step that fits (`mlsys plan`).

Each candidate's step time is `calc.train.step.step_breakdown` of the same pieces `train_step` uses, but
every piece is computed once per distinct value of what it depends on and reused:

    kernel times     roofline_pass per (tp, cp, micro-batch), its routed experts re-priced per (ep, etp)
                     (roofline_model.with_experts: one clock serves every expert grid); per-layer parts
                     per (.., sp, ep, etp)
    stage times      per (parts, recompute, the distinct stage shapes of (pp, vp, split): layers
                     of each kind and the ends each holds)
    model traffic    step_comm per (tp, pp, cp, ep, sp, micro-batch, what the split changes of
                     it: the busiest stage's layers and MoE layers) at m = 1 and vp = 1: every
                     TP, PP, CP and EP call repeats per micro-batch, so it scales by m exactly,
                     and only the PP sends scale with vp (per vp where vp changes the MoE
                     layers of the busiest stage)
    DP traffic       step_comm per (tp, pp, cp, ep, zero) at m = 1: a + b m, each kind of it
                     once per step or once per micro-batch (comm_step.per_micro_batch)
    optimizer        per (tp, pp, split, ep, zero)
    memory           calc.plan.memory (memory_train's sums and phases, memoised; either framework)
    host time        --framework torch: calc.train.host's stage work per (parts, recompute, the
                     distinct stage signatures of (pp, vp, split)), host_paths of one micro-batch
                     per ZeRO stage (forward + backward issue scales by m exactly)

`split` is the pipeline split (calc.parallel.pipeline_split: even, or one of Megatron-LM's uneven ones that
plan_space searches). Each layout is mapped to its row in three tables of distinct sub-layouts
((tp, pp, split, cp, ep) x ZeRO; the structure; (tp, cp, micro-batch, sp, pp, vp, split) x
recompute), and the step is `step_breakdown`
over numpy arrays of shape (layouts, ZeRO stages, recompute modes) gathered from those rows: no
Python work per candidate, only per distinct piece, so that 10^5 candidates take seconds.
The top K fitting candidates are then evaluated again by `train_step` itself, which is what the
output reports. Layouts that do not fit are dropped; the rest are ranked by step time.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Callable

import numpy as np

from ...errors import require
from ...specs.cluster import ClusterSpec
from ...specs.model import ModelSpec
from ..roofline.calibration import Ceilings
from ..comm.step import StepOptions, busiest_calls, per_micro_batch, step_comm
from ..parallel.shards import verdict
from ..parallel.pipeline_split import EVEN, PipelineSplit
from .memory import MemoryTable
from .result import Plan, decisions, fold, why
from .space import PlanOptions, execution_options, structures
from ..roofline.model import ModelRoofline, with_experts
from ..train.step import (TP_INPUT_REDUCE, core_attention, fp8_weight_casts, optimizer_s, step_breakdown,
                    step_ceilings, step_fp8_s, train_step)
from ..precision.fp4 import low_precision
from ..comm.exposed import Windows, traffic
from ..train.host import framework_costs, host_paths, stage_work, tensor_counts
from ..train.options import TrainStepOptions
from ..train.attention_time import attention_pass_scale
from ..train.parts import Stage, StageParts, kernel_impl, pipeline_stages, roofline_pass, slowest_stage, stage_parts

Progress = Callable[[int, int], None]


class _Memo:
    """The pieces of `train_step`, each computed once per distinct key."""

    def __init__(self, spec: ModelSpec, ceilings: Ceilings, cluster: ClusterSpec, opts: PlanOptions):
        self.spec, self.cluster, self.opts = spec, cluster, opts
        self.ceil = step_ceilings(ceilings, opts.base())
        self.memory = MemoryTable(spec, opts.seq, opts.base().dtype, opts.capacity_factor,
                                  flash=opts.attention != "unfused", framework=opts.framework, fp8_params=opts.fp8_params)
        self.costs = framework_costs(opts.framework, opts.host_costs)
        self.usable = verdict(ceilings.gpu, 0, opts.reserve).usable_bytes
        self.wire = opts.base().memory_dtype  # activations and parameters on the wire
        self._cache: dict[tuple, Any] = {}

    def get(self, key: tuple, make: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def parts(self, c: TrainStepOptions, impl: str | None = None) -> StageParts:
        """Per-layer seconds priced with `impl` (default: the framework's kernels, kernel_impl)."""
        impl = impl or kernel_impl(c.framework, c.dtype)
        experts = _experts(self.spec, c)

        def make(at: tuple[int, int | None]) -> ModelRoofline:
            return roofline_pass(self.spec, self.ceil, tp=c.tp, cp=c.cp, micro_batch=c.micro_batch, seq=c.seq,
                                 dtype=c.dtype, impl=impl, loss=c.loss, dropout=c.dropout, clocks=c.clocks,
                                 ep=at[0], etp=at[1])
        if impl == "fused" and self.spec.moe is not None:  # one pass of (tp, cp, micro-batch), its experts re-priced
            first = self.get(("roofline", c.tp, c.cp, c.micro_batch, impl), lambda: make((c.ep, c.etp)))
            result = self.get(("roofline", c.tp, c.cp, c.micro_batch, impl, experts),
                              lambda: with_experts(self.spec, first, c.ep, c.etp))
        else:
            result = self.get(("roofline", c.tp, c.cp, c.micro_batch, impl, experts), lambda: make((c.ep, c.etp)))
        return self.get(("parts", c.tp, c.cp, c.micro_batch, c.sp_active, impl, experts), lambda: stage_parts(
            self.spec, result, sp=c.sp_active, capacity_factor=c.capacity_factor,
            attention=core_attention(self.spec, result.ceilings, c), fp8_recipe=c.scaling_recipe,
            attention_scale=attention_pass_scale(c.attention)))

    def stages(self, pp: int, vp: int, split: PipelineSplit) -> tuple[Stage, ...]:
        return self.get(("stages", pp, vp, split), lambda: pipeline_stages(self.spec, pp, vp, split))

    def stage(self, c: TrainStepOptions, recompute: str) -> tuple[float, float, float]:
        """`slowest_stage`, once per distinct list of stage shapes (layers of each kind, which ends it holds):
        the stages of most (pp, vp) with the same pp have the same shapes."""
        stages = self.stages(c.pp, c.vp, c.pipeline_split)
        shapes = self.get(("shapes", c.pp, c.vp, c.pipeline_split), lambda: tuple(dict.fromkeys(
            (st.dense, st.moe, st.first, st.last) for st in stages)))
        parts = self.parts(c)
        return self.get(("stage", c.tp, c.cp, c.micro_batch, c.sp_active, _experts(self.spec, c), shapes, recompute),
                        lambda: slowest_stage(parts, stages, recompute))

    def _comm(self, c: TrainStepOptions, part: str, *, zero: int, sp: bool, batch: int, interleave: int,
              grad_accum: int, stages: tuple[tuple[int, ...], ...] = ()) -> dict[tuple[str, str], float]:
        """Seconds per (dimension, kind) of one side of the step's traffic: "dp" or "model" (step_comm's parts)."""
        o = StepOptions(dp=c.data_parallel, tp=c.tp, pp=c.pp, ep=c.ep, cp=c.cp, etp=c.etp, sp=sp, zero=zero, batch=batch,
                        seq=c.seq, grad_accum=grad_accum, interleave=interleave, dtype=self.wire,
                        grad_dtype=c.grad_reduce_dtype(zero), tp_input_reduce=TP_INPUT_REDUCE[c.framework], fsdp=c.framework == "torch", stages=stages)
        return traffic(step_comm(self.spec, o, self.cluster, parts=(part,)).rows)

    def host(self, c: TrainStepOptions, recompute: str, zero: int,
             micro_batches: int | None = None) -> tuple[float, float]:
        """The host's (forward+backward, optimizer) issue seconds of the step (calc.train.host; 0 with megatron)
        with `micro_batches` (default: the layout's)."""
        if self.opts.framework == "megatron":
            return 0.0, 0.0
        counts = self.get(("tensors",), lambda: tensor_counts(self.spec))
        shapes, stages = self.get(("host stages", c.pp, c.vp, c.pipeline_split), lambda: _host_stages(
            self.stages(c.pp, c.vp, c.pipeline_split), counts[0]))
        work = self.get(("work", c.tp, c.cp, c.micro_batch, c.sp_active, shapes, recompute),
                        lambda: stage_work(self.spec, self.parts(c, "fused"), stages, recompute, counts))
        m = c.num_micro_batches if micro_batches is None else micro_batches
        return host_paths(work, self.costs, micro_batches=m, tp=c.tp, zero=zero)

    def shard_pieces(self, c: TrainStepOptions, zero: int) -> tuple[dict[tuple[str, str], tuple[float, float]],
                                                                     float, int]:
        """What depends on (tp, pp, split, cp, ep, etp) and ZeRO: DP seconds (a, b) of a + b m, optimizer seconds
        and the row of the model states in the memory table."""
        return (self.dp_traffic(c, zero), self.optimizer(c, zero),
                self.memory.state_key(c.tp, c.ep, c.pp, zero, c.data_parallel * c.cp, c.pipeline_split, c.expert_tp,
                                      c.experts.edp))

    def stage_pieces(self, c: TrainStepOptions, recompute: str,
                     zeros: list[int]) -> tuple[tuple[float, float, float], int, list[tuple[float, float]]]:
        """What depends on (tp, cp, micro-batch, sp, pp, vp, split) and the recompute mode: the slowest stage's
        (forward, backward, attention) seconds, the row of its activations in the memory table and the
        host's seconds of ONE micro-batch per ZeRO stage (forward+backward scales with m)."""
        return (self.stage(c, recompute), self.memory.activation_key(c.tp, c.cp, c.sp_active, recompute, c.pp,
                                                                     c.pipeline_split, c.expert_tp),
                [self.host(c, recompute, z, micro_batches=1) for z in zeros])

    def model_traffic(self, c: TrainStepOptions) -> dict[tuple[str, str], float]:
        """TP, PP, CP, EP seconds of one micro-batch (times m for the step), from the call at vp = 1: only
        the pipeline's sends depend on vp, 2 per micro-batch and model chunk (calc.comm.step), so PP's
        seconds scale by vp; unless vp moves MoE layers onto the busiest stage (EP traffic follows
        them, and TP's, an MoE layer issuing fewer TP collectives than a dense one): then from the call at
        this vp. An uneven split (megatron) scales the first call of its
        (tp, pp, cp, ep, sp, micro-batch) by `_scaled`; with torch it gets its own calls, per distinct
        busiest stage (its per-linear TP reduces are rounded per stage)."""
        split = c.pipeline_split
        if not split.even and self.opts.framework == "megatron":
            return self._scaled(c)

        folded = c.sp_active or c.tp == 1

        def at(vp: int) -> dict[tuple[str, str], float]:
            shape = () if split.even else self._busiest(c.pp, vp, split, folded)
            return self.get(("model", c.tp, c.pp, c.cp, c.ep, c.expert_tp, c.sp_active, c.micro_batch, vp, shape),
                            lambda: self._model_call(c, vp))
        if c.vp == 1:
            return at(1)
        if self.spec.moe is not None and self._busiest(c.pp, 1, split, folded) != self._busiest(c.pp, c.vp, split,
                                                                                                 folded):
            return at(c.vp)  # EP and TP traffic follow the MoE layers on the busiest stage, which vp moves
        return {k: v * c.vp if k[0] == "pp" else v for k, v in at(1).items()}

    def _model_call(self, c: TrainStepOptions, vp: int) -> dict[tuple[str, str], float]:
        split = c.pipeline_split
        stages = () if split.even else tuple(st.layers for st in self.stages(c.pp, vp, split))
        return self._comm(c, "model", zero=0, sp=c.sp_active, batch=c.micro_batch, interleave=vp, grad_accum=1,
                          stages=stages)

    def _scaled(self, c: TrainStepOptions) -> dict[tuple[str, str], float]:
        """Megatron's model traffic of an uneven split from a reference call at vp = 1 of the same (tp, pp, cp,
        ep, sp, micro-batch): the even split's where pp divides the layers, else the first split's. calc.comm.step issues TP and CP calls per layer of
        the busiest stage, EP calls per MoE layer of it and PP sends per model chunk, each of the same
        size whatever the split, so each dimension's seconds scale by that count (a reference without
        MoE layers on its busiest stage cannot scale EP: then a call of its own)."""
        folded = c.sp_active or c.tp == 1

        def reference() -> tuple[tuple[int, int, int], dict[tuple[str, str], float]]:
            if self.spec.num_layers % c.pp == 0:  # the even split's call, which the even layouts use too
                return self._busiest(c.pp, 1, EVEN, folded), self.get(
                    ("model", c.tp, c.pp, c.cp, c.ep, c.expert_tp, c.sp_active, c.micro_batch, 1, ()),
                    lambda: self._model_call(replace(c, pipeline_split=EVEN), 1))
            return self._busiest(c.pp, 1, c.pipeline_split, folded), self._model_call(c, 1)
        (layers0, pairs0, moe0), seconds = self.get(
            ("model ref", c.tp, c.pp, c.cp, c.ep, c.expert_tp, c.sp_active, c.micro_batch), reference)
        layers, pairs, moe = self._busiest(c.pp, c.vp, c.pipeline_split, folded)
        if moe and not moe0 and self.spec.moe is not None:
            return self.get(("model", c.tp, c.pp, c.cp, c.ep, c.expert_tp, c.sp_active, c.micro_batch, c.vp,
                             (layers, pairs, moe)), lambda: self._model_call(c, c.vp))
        factor = {"tp": pairs / pairs0, "cp": layers / layers0, "ep": moe / moe0 if moe0 else 0.0, "pp": c.vp}
        return {k: v * factor[k[0]] for k, v in seconds.items()}

    def _busiest(self, pp: int, vp: int, split: PipelineSplit, folded: bool) -> tuple[int, int, int]:
        """(layers, TP collectives of one pass, MoE layers) of the busiest stage, as calc.comm.step counts them
        (`folded`: SP or tp 1, comm_step.tp_pairs)."""
        return self.get(("busiest", pp, vp, split, folded), lambda: busiest_calls(
            self.spec, tuple(st.layers for st in self.stages(pp, vp, split)), folded))

    def dp_traffic(self, c: TrainStepOptions, zero: int) -> dict[tuple[str, str], tuple[float, float]]:
        """DP seconds as (a, b) of a + b m, from the call at m = 1: each kind of DP traffic is issued
        once per step or once per micro-batch, as per_micro_batch says for the ZeRO stage. The pipeline
        split does not enter it (the stages are passed only to be checked)."""
        def make() -> dict[tuple[str, str], tuple[float, float]]:
            split = c.pipeline_split
            stages = () if split.even else tuple(st.layers for st in self.stages(c.pp, 1, split))
            one = self._comm(c, "dp", zero=zero, sp=c.sp_active, batch=1, interleave=1, grad_accum=1,
                            stages=stages)
            every = per_micro_batch(zero, c.framework == "torch")
            return {k: (0.0, v) if k[1] in every else (v, 0.0) for k, v in one.items()}
        return self.get(("dp", c.tp, c.pp, c.cp, c.ep, c.expert_tp, zero), make)

    def optimizer(self, c: TrainStepOptions, zero: int) -> float:
        def counts() -> tuple[tuple[int, int], ...]:
            st = self.memory.states(c.tp, c.ep, c.pp, c.pipeline_split, c.expert_tp)  # stage_param_counts' sums
            return tuple(zip(st.dense.astype(int).tolist(), st.expert.astype(int).tolist()))
        return self.get(("opt", c.tp, c.ep, c.expert_tp, c.pp, c.pipeline_split, zero, c.experts.edp),
                        lambda: optimizer_s(counts(), zero, c.data_parallel * c.cp, c.experts.edp, c.memory_dtype,
                                            self.ceil, self.opts.framework, self.opts.clip_grad))

    def fp8(self, c: TrainStepOptions, recompute: str, zero: int) -> tuple[float, float]:
        """(FP8 scaling seconds of one micro-batch, the step's other FP8 seconds) on the slowest stage, as
        `train.step_fp8_s`; (0, 0) unless fp8, mxfp8 or nvfp4."""
        if not low_precision(c.dtype):
            return 0.0, 0.0
        lay = replace(c, zero=zero, recompute=recompute)
        sharded = zero >= 1 and c.fp8_params  # only FP8 weights cast ZeRO shards
        shard = (c.data_parallel * c.cp, c.experts.edp) if sharded else (1, 1)
        experts = _experts(self.spec, c)
        weights = self.get(("fp8 weights", c.tp, c.cp, experts, c.micro_batch, c.sp_active, shard),
                           lambda: fp8_weight_casts(self.parts(c), lay, self.ceil))
        return self.get(("fp8", c.tp, c.cp, experts, c.micro_batch, c.sp_active, c.pp, c.vp, c.pipeline_split,
                         recompute, shard), lambda: step_fp8_s(
            self.parts(c), self.stages(c.pp, c.vp, c.pipeline_split), lay, self.ceil, self.cluster, weights))

    def fp8_pieces(self, c: TrainStepOptions, zeros: list[int], modes: list[str]) -> list | None:
        """`fp8` per ZeRO stage and recompute mode (depends on the structure, the mode and ZeRO's shard);
        None unless fp8, mxfp8 or nvfp4."""
        if not low_precision(c.dtype):
            return None
        return [[self.fp8(c, r, z) for r in modes] for z in zeros]


def _experts(spec: ModelSpec, c: TrainStepOptions) -> tuple[int, int]:
    """(ep, etp) where the routed experts' kernels depend on them (an MoE model), else (1, 1): the key of the
    roofline pass and of what is built on it."""
    return (c.ep, c.expert_tp) if spec.moe is not None else (1, 1)


def _host_stages(stages: tuple[Stage, ...], layer_tensors: tuple[int, ...]) -> tuple[tuple, tuple[Stage, ...]]:
    """The stages that differ in what `stage_work` reads of them (layers of each kind, the ends they hold,
    their layers' parameter tensors as a multiset), one of each in order, and those signatures: the
    interleaved stages of most (pp, vp) with the same pp are alike."""
    seen: dict[tuple, Stage] = {}
    for st in stages:
        seen.setdefault((st.dense, st.moe, st.first, st.last, tuple(sorted(layer_tensors[i] for i in st.layers))), st)
    return tuple(seen), tuple(seen.values())


class _Rows:
    """A table of distinct keys in the order first seen, each with the value computed once for it."""

    def __init__(self) -> None:
        self.index: dict[tuple, int] = {}
        self.values: list[Any] = []

    def row(self, key: tuple, make: Callable[[], Any]) -> int:
        i = self.index.get(key)
        if i is None:
            i = self.index[key] = len(self.values)
            self.values.append(make())
        return i


def _collect(memo: _Memo, layouts: list[TrainStepOptions], zeros: list[int], modes: list[str],
             progress: Progress | None) -> tuple[np.ndarray, _Rows, _Rows, _Rows, _Rows]:
    """Per layout: m, pp, vp, micro-batch, dp x cp, and its row in each table of distinct sub-layouts:
    (tp, pp, split, cp, ep) for DP traffic, optimizer and model states per ZeRO stage; the structure for
    TP, PP, CP and EP traffic; (tp, cp, micro-batch, sp, pp, vp, split) for kernel times, activations and
    host work per recompute mode; (pp, split) for the memory table's stages."""
    shards, models, stages, pipes = _Rows(), _Rows(), _Rows(), _Rows()
    rows: list[tuple[int, ...]] = []
    n, per = len(layouts) * len(zeros) * len(modes), len(zeros) * len(modes)
    for i, c in enumerate(layouts):
        sp, shard, split = c.sp_active, c.data_parallel * c.cp, c.pipeline_split
        experts = (c.ep, c.expert_tp)
        rows.append((c.num_micro_batches, c.pp, c.vp, c.micro_batch, shard,
                     shards.row((c.tp, c.pp, split, c.cp, experts), lambda: [memo.shard_pieces(c, z) for z in zeros]),
                     models.row((c.tp, c.pp, c.cp, experts, sp, c.micro_batch, c.vp, split),
                                lambda: (memo.model_traffic(c), memo.fp8_pieces(c, zeros, modes))),
                     stages.row((c.tp, c.cp, c.micro_batch, sp, c.pp, c.vp, split, _experts(memo.spec, c)),
                                lambda: [memo.stage_pieces(c, r, zeros) for r in modes]),
                     pipes.row((c.pp, split), lambda: (c.pp, split))))
        if progress is not None:
            progress((i + 1) * per, n)
    return np.array(rows, dtype=np.int64).reshape(-1, 9), shards, models, stages, pipes


def _traffic(shards: _Rows, models: _Rows, s_row: np.ndarray, m_row: np.ndarray,
             m: np.ndarray) -> dict[tuple[str, str], np.ndarray]:
    """Seconds per (dimension, kind) of every candidate, in shapes that broadcast to (layouts, ZeRO stages,
    recompute modes): DP's a + b m per ZeRO stage, TP/PP/CP/EP's one micro-batch times m."""
    out = {}
    for k in sorted({k for row in shards.values for d, _, _ in row for k in d}):
        a, b = (np.array([[d.get(k, (0.0, 0.0))[i] for d, _, _ in row] for row in shards.values])[s_row] for i in (0, 1))
        out[k] = (a + b * m[:, None])[:, :, None]
    for k in sorted({k for d, _ in models.values for k in d}):
        out[k] = (np.array([d.get(k, 0.0) for d, _ in models.values])[m_row] * m)[:, None, None]
    return out


def _fp8(models: _Rows, m_row: np.ndarray) -> tuple[Any, Any]:
    """(FP8 scaling seconds of one micro-batch, the step's other FP8 seconds) of every candidate, shaped
    (layouts, ZeRO stages, recompute modes); (0, 0) without fp8."""
    if all(f is None for _, f in models.values):
        return 0.0, 0.0
    both = np.array([f for _, f in models.values])[m_row]  # (layouts, zeros, modes, 2)
    return both[..., 0], both[..., 1]


def _search(memo: _Memo, layouts: list[TrainStepOptions], grid: list[tuple[int, str]],
            progress: Progress | None) -> tuple[np.ndarray, np.ndarray]:
    """(step seconds, memory bytes per GPU) of every candidate (layout x grid entry, in that order):
    `step_breakdown` over arrays of shape (layouts, ZeRO stages, recompute modes), each piece taken
    from the row of its sub-layout."""
    zeros, modes = list(dict.fromkeys(z for z, _ in grid)), list(dict.fromkeys(r for _, r in grid))
    require(grid == [(z, r) for z in zeros for r in modes], "the execution grid is ZeRO x recompute")
    cols, shards, models, stages, pipes = _collect(memo, layouts, zeros, modes, progress)
    m, pp, vp, mb, replicas, s_row, m_row, t_row, p_row = cols.T
    lay = lambda x: x[:, None, None]  # noqa: E731  per layout
    shape = (len(layouts), len(zeros), len(modes))
    # shard rows: per ZeRO stage ({(dim, kind): (a, b)}, optimizer seconds, state key); stage rows: per
    # recompute mode ((f, b, a), activation key, per ZeRO stage (host per micro-batch, host optimizer))
    optimizer = np.array([[o for _, o, _ in row] for row in shards.values])[s_row][:, :, None]
    fba = np.array([[t for t, _, _ in row] for row in stages.values])[t_row]  # (layouts, modes, 3)
    host = np.array([[h for _, _, h in row] for row in stages.values])[t_row]  # (layouts, modes, zeros, 2)
    windows = Windows(fba[:, None, :, 0], fba[:, None, :, 1], fba[:, None, :, 2], lay(m))
    breakdown, _ = step_breakdown(
        pp=lay(pp), vp=lay(vp), windows=windows, seconds=_traffic(shards, models, s_row, m_row, m),
        zero=np.array(zeros)[None, :, None], recompute=np.array(modes)[None, None, :], overlap=memo.opts.overlap,
        optimizer=optimizer, sm_share=memo.opts.base().comm_sm_share(memo.ceil.gpu.sm_count),
        host=(lay(m) * host[..., 0].transpose(0, 2, 1), host[..., 1].transpose(0, 2, 1)),
        p2p_slowdown=memo.costs.p2p_slowdown, overlap_slowdown=memo.costs.overlap_slowdown, fp8=_fp8(models, m_row),
        fsdp=memo.opts.framework == "torch")
    step = sum((np.broadcast_to(v, shape) for v in breakdown.values()), np.zeros(shape)).reshape(-1)
    flat = lambda x: np.broadcast_to(x, shape).reshape(-1)  # noqa: E731
    every = {"state_keys": flat(np.array([[s for _, _, s in row] for row in shards.values])[s_row][:, :, None]),
             "activation_keys": flat(np.array([[a for _, a, _ in row] for row in stages.values])[t_row][:, None, :]),
             "micro_batch": flat(lay(mb)), "micro_batches": flat(lay(m)), "vp": flat(lay(vp)),
             "zero": flat(np.array(zeros)[None, :, None]), "replicas": flat(lay(replicas))}
    memory, pipe_of = np.empty(len(step)), flat(lay(p_row))
    for p in np.unique(p_row):
        idx = np.flatnonzero(pipe_of == p)
        stage_count, split = pipes.values[int(p)]
        memory[idx] = memo.memory.peak_bytes(stage_count, split=split, **{k: v[idx] for k, v in every.items()})
    return step, memory


def plan(spec: ModelSpec, ceilings: Ceilings, cluster: ClusterSpec, opts: PlanOptions,
         progress: Progress | None = None) -> Plan:
    """The fastest fitting layouts (module docstring); `progress(done, total)` is called as layouts finish."""
    start = time.perf_counter()
    opts.validate()
    cluster = cluster.for_job(opts.gpus)  # the GPUs the job takes in each NVLink domain (ClusterSpec.for_job)
    memo = _Memo(spec, ceilings, cluster, opts)
    layouts = list(structures(spec, cluster, opts))
    grid = execution_options(opts)
    require(bool(layouts) and bool(grid), f"no layout of {opts.gpus} GPUs obeys the rules with --fix "
                                          f"{', '.join(f'{k}={v}' for k, v in opts.fix) or '(none)'}")
    step, memory = _search(memo, layouts, grid, progress)
    fits = np.flatnonzero(memory <= memo.usable)
    order = fits[np.argsort(step[fits], kind="stable")]
    pick = lambda j: replace(layouts[j // len(grid)], zero=grid[j % len(grid)][0],  # noqa: E731
                             recompute=grid[j % len(grid)][1])
    shown, variants = fold(order, layouts, len(grid), opts.top, opts.all_variants)
    best = [train_step(spec, ceilings, cluster, c, parts=memo.parts(c), host_parts=memo.parts(c, "fused"))
            for c in map(pick, shown)]
    rival = next((pick(j) for j in order if best and decisions(pick(j)) != decisions(best[0].options)), None)
    other = (train_step(spec, ceilings, cluster, rival, parts=memo.parts(rival), host_parts=memo.parts(rival, "fused"))
             if rival is not None else None)
    return Plan(spec.name, ceilings.gpu.name, cluster.name, opts, tuple(best), len(step), len(fits),
                time.perf_counter() - start, why(best[0] if best else None, other), variants)
