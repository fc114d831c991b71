"""Search every layout of `plan_space` for the fastest training step that fits (`mlsys plan`).

Each candidate's step time is `calc.train.step_breakdown` of the same pieces `train_step` uses, but
every piece is computed once per distinct value of what it depends on and reused:

    kernel times     roofline_pass per (tp, cp, micro-batch); per-layer parts per (.., sp)
    stage times      per (parts, pp, vp, recompute), over the distinct stage shapes
    model traffic    step_comm per (tp, pp, cp, ep, sp, micro-batch) at m = 1: every TP, PP, CP
                     and EP call repeats per micro-batch, so it scales by m exactly; a + b vp
                     from two values of vp (exact: only the PP sends scale with vp), or per vp
                     where vp changes the MoE layers of the busiest stage
    DP traffic       step_comm per (tp, pp, cp, ep, zero) at m = 1 and m = 2: a + b m exactly
    optimizer        per (tp, pp, ep, zero)
    memory           calc.plan_memory (memory_train's sums and phases, memoised; either framework)
    host time        --framework torch: calc.train_host's stage work per (tp, cp, micro-batch, sp,
                     pp, vp, recompute), host_paths per candidate (m, tp, ZeRO)

so that 10^5 candidates take seconds. The top K fitting candidates are then evaluated again by
`train_step` itself, which is what the output reports. Layouts that do not fit are dropped; the
rest are ranked by step time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from ..dtypes import dtype_name
from ..errors import require
from ..specs.cluster import ClusterSpec
from ..specs.model import ModelSpec
from .calibration import Ceilings
from .comm_step import StepOptions, step_comm
from .memory_common import verdict
from .plan_memory import MemoryTable
from .plan_space import PlanOptions, execution_options, structures
from .train import (TP_INPUT_REDUCE, TrainStep, core_attention, fp8_weight_casts, optimizer_s, step_breakdown,
                    step_fp8_s, train_step)
from .train_comm import Windows, traffic
from .train_host import framework_costs, host_paths, stage_work, tensor_counts
from .train_options import TrainStepOptions
from .train_parts import StageParts, pipeline_stages, roofline_pass, slowest_stage, stage_parts

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Plan:
    model: str
    gpu: str
    cluster: str
    options: PlanOptions
    candidates: tuple[TrainStep, ...]  # the top K fitting, fastest first (train_step's own numbers)
    searched: int  # candidates timed
    feasible: int  # of those, the ones that fit in memory
    search_s: float
    why: str

    def as_dict(self) -> dict[str, Any]:
        keys = ("step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "hfu", "memory_bytes_per_gpu", "fits",
                "breakdown", "layout", "comm_total_s")
        cands = [{k: c.as_dict()[k] for k in keys} for c in self.candidates]
        o = self.options
        return {"model": self.model, "gpu": self.gpu, "cluster": self.cluster, "gpus": o.gpus, "seq": o.seq,
                "global_batch": o.global_batch, "dtype": o.dtype, "fix": dict(o.fix), "overlap": list(o.overlap),
                "attention": o.attention, "framework": o.framework, "excluded": o.excluded(),
                "candidates": cands, "searched": self.searched, "feasible": self.feasible,
                "search_s": self.search_s, "why": self.why}


class _Memo:
    """The pieces of `train_step`, each computed once per distinct key."""

    def __init__(self, spec: ModelSpec, ceilings: Ceilings, cluster: ClusterSpec, opts: PlanOptions):
        self.spec, self.ceil, self.cluster, self.opts = spec, ceilings, cluster, opts
        self.memory = MemoryTable(spec, opts.seq, opts.base().dtype, opts.capacity_factor,
                                  flash=opts.attention == "flash", framework=opts.framework, fp8_params=opts.fp8_params)
        self.costs = framework_costs(opts.framework, opts.host_costs)
        self.usable = verdict(ceilings.gpu, 0, opts.reserve).usable_bytes
        self._cache: dict[tuple, Any] = {}

    def get(self, key: tuple, make: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def parts(self, c: TrainStepOptions) -> StageParts:
        result = self.get(("roofline", c.tp, c.cp, c.micro_batch), lambda: roofline_pass(
            self.spec, self.ceil, tp=c.tp, cp=c.cp, micro_batch=c.micro_batch, seq=c.seq, dtype=c.dtype))
        return self.get(("parts", c.tp, c.cp, c.micro_batch, c.sp_active), lambda: stage_parts(
            self.spec, result, sp=c.sp_active, capacity_factor=c.capacity_factor,
            attention=core_attention(self.spec, self.ceil, c), fp8_recipe=c.fp8_recipe))

    def stage(self, c: TrainStepOptions, recompute: str) -> tuple[float, float, float]:
        stages = self.get(("stages", c.pp, c.vp), lambda: pipeline_stages(self.spec, c.pp, c.vp))
        parts = self.parts(c)
        return self.get(("stage", c.tp, c.cp, c.micro_batch, c.sp_active, c.pp, c.vp, recompute),
                        lambda: slowest_stage(parts, stages, recompute))

    def _comm(self, c: TrainStepOptions, part: str, **changes: Any) -> dict[tuple[str, str], float]:
        """Seconds per (dimension, kind) of one side of the step's traffic: "dp" or "model" (step_comm's parts)."""
        o = StepOptions(dp=c.data_parallel, tp=c.tp, pp=c.pp, ep=c.ep, cp=c.cp, sp=c.sp_active, zero=c.zero,
                        batch=c.micro_batch, seq=c.seq, grad_accum=1, interleave=c.vp, dtype=c.memory_dtype,
                        tp_input_reduce=TP_INPUT_REDUCE[c.framework])
        return traffic(step_comm(self.spec, replace(o, **changes), self.cluster, parts=(part,)).rows)

    def host(self, c: TrainStepOptions, recompute: str, zero: int) -> tuple[float, float]:
        """The host's (forward+backward, optimizer) issue seconds of the step (calc.train_host; 0 with megatron)."""
        if self.opts.framework == "megatron":
            return 0.0, 0.0
        work = self.get(("work", c.tp, c.cp, c.micro_batch, c.sp_active, c.pp, c.vp, recompute), lambda: stage_work(
            self.spec, self.parts(c), self.get(("stages", c.pp, c.vp), lambda: pipeline_stages(self.spec, c.pp, c.vp)),
            recompute, self.get(("tensors",), lambda: tensor_counts(self.spec))))
        return host_paths(work, self.costs, micro_batches=c.num_micro_batches, tp=c.tp, zero=zero)

    def model_traffic(self, c: TrainStepOptions) -> dict[tuple[str, str], float]:
        """TP, PP, CP, EP seconds of one micro-batch (times m for the step). Only the pipeline's sends
        depend on vp, 2 per micro-batch and model chunk, unless vp moves MoE layers onto the busiest
        stage (EP traffic follows them): then the traffic is a + b vp, taken from the calls at vp = 1
        and at the smallest valid vp > 1."""
        def at(vp: int) -> dict[tuple[str, str], float]:
            return self.get(("model", c.tp, c.pp, c.cp, c.ep, c.sp_active, c.micro_batch, vp),
                            lambda: self._comm(c, "model", zero=0, interleave=vp))
        if c.vp == 1:
            return at(1)
        second = next(v for v in range(2, c.vp + 1) if self.spec.num_layers % (c.pp * v) == 0)
        if c.ep > 1 and len({self._busiest_moe(c.pp, v) for v in (1, second, c.vp)}) > 1:
            return at(c.vp)  # EP traffic follows the MoE layers on the busiest stage, which vp moves
        one, two = at(1), at(second)
        return {k: one[k] + (two[k] - one[k]) * (c.vp - 1) / (second - 1) for k in one}

    def _busiest_moe(self, pp: int, vp: int) -> int:
        stages = self.get(("stages", pp, vp), lambda: pipeline_stages(self.spec, pp, vp))
        return max(st.moe for st in stages)

    def dp_traffic(self, c: TrainStepOptions, zero: int) -> dict[tuple[str, str], tuple[float, float]]:
        """DP seconds as (a, b) of a + b m, from the calls at m = 1 and m = 2."""
        def make() -> dict[tuple[str, str], tuple[float, float]]:
            one, two = (self._comm(c, "dp", zero=zero, sp=False, batch=1, interleave=1, grad_accum=m) for m in (1, 2))
            return {k: (2 * v - two[k], two[k] - v) for k, v in one.items()}
        return self.get(("dp", c.tp, c.pp, c.cp, c.ep, zero), make)

    def optimizer(self, c: TrainStepOptions, zero: int) -> float:
        def counts() -> tuple[tuple[int, int], ...]:
            st = self.memory.states(c.tp, c.ep, c.pp)  # the same stage_params as stage_param_counts
            return tuple(zip(st.dense.astype(int).tolist(), st.expert.astype(int).tolist()))
        return self.get(("opt", c.tp, c.ep, c.pp, zero), lambda: optimizer_s(
            counts(), zero, c.data_parallel * c.cp, c.ep, c.memory_dtype, self.ceil, self.opts.framework))


    def fp8(self, c: TrainStepOptions, recompute: str, zero: int) -> tuple[float, float]:
        """(FP8 scaling seconds of one micro-batch, the step's other FP8 seconds) on the slowest stage, as
        `train.step_fp8_s`; (0, 0) unless fp8."""
        if dtype_name(c.dtype) != "fp8":
            return 0.0, 0.0
        lay = replace(c, zero=zero, recompute=recompute)
        shard = c.data_parallel * c.cp if zero >= 1 and c.fp8_params else 1  # only FP8 weights cast ZeRO shards
        weights = self.get(("fp8 weights", c.tp, c.cp, c.ep, c.micro_batch, c.sp_active, shard),
                           lambda: fp8_weight_casts(self.parts(c), lay, self.ceil))
        return self.get(("fp8", c.tp, c.cp, c.ep, c.micro_batch, c.sp_active, c.pp, c.vp, recompute, shard), lambda: step_fp8_s(
            self.parts(c), self.get(("stages", c.pp, c.vp), lambda: pipeline_stages(self.spec, c.pp, c.vp)), lay,
            self.ceil, self.cluster, weights))


_COLUMNS = ("forward", "backward", "attention", "m", "pp", "vp", "zero", "optimizer", "micro_batch", "host_fb",
            "host_opt", "replicas", "fp8_mb", "fp8_step")


def _collect(memo: _Memo, layouts: list[TrainStepOptions], grid: list[tuple[int, str]],
             progress: Progress | None) -> tuple[dict[str, list], dict[tuple[str, str], list], list, list, list]:
    """Per candidate (layout x grid entry, in that order): the scalars of its step, its traffic and
    the keys of its memory pieces."""
    cols: dict[str, list] = {k: [] for k in _COLUMNS}
    traffic_cols: dict[tuple[str, str], list] = {}
    recompute: list[str] = []
    state_keys: list[tuple] = []
    act_keys: list[tuple] = []
    n, zeros, modes = len(layouts) * len(grid), sorted({z for z, _ in grid}), sorted({r for _, r in grid})
    for i, c in enumerate(layouts):
        m, shard, mem = c.num_micro_batches, c.data_parallel * c.cp, memo.memory
        model = {k: v * m for k, v in memo.model_traffic(c).items()}
        by_zero = {z: ({**model, **{k: a0 + b0 * m for k, (a0, b0) in memo.dp_traffic(c, z).items()}},
                       memo.optimizer(c, z), mem.state_key(c.tp, c.ep, c.pp, z, shard)) for z in zeros}
        by_mode = {r: (memo.stage(c, r), mem.activation_key(c.tp, c.cp, c.sp_active, r, c.pp)) for r in modes}
        for zero, rc in grid:
            seconds, optimizer, state_key = by_zero[zero]
            (f, b, a), act_key = by_mode[rc]
            for k in seconds.keys() - traffic_cols.keys():  # a kind of traffic seen first here
                traffic_cols[k] = [0.0] * len(recompute)
            for k, column in traffic_cols.items():
                column.append(seconds.get(k, 0.0))
            host, fp8 = memo.host(c, rc, zero), memo.fp8(c, rc, zero)
            for key, value in zip(_COLUMNS, (f, b, a, m, c.pp, c.vp, zero, optimizer, c.micro_batch, *host, shard, *fp8)):
                cols[key].append(value)
            recompute.append(rc)
            state_keys.append(state_key)
            act_keys.append(act_key)
        if progress is not None:
            progress((i + 1) * len(grid), n)
    return cols, traffic_cols, recompute, state_keys, act_keys


def _search(memo: _Memo, layouts: list[TrainStepOptions], grid: list[tuple[int, str]],
            progress: Progress | None) -> tuple[np.ndarray, np.ndarray]:
    """(step seconds, memory bytes per GPU) of every candidate, `step_breakdown` over arrays."""
    cols, traffic_cols, recompute, state_keys, act_keys = _collect(memo, layouts, grid, progress)
    a = {k: np.asarray(v) for k, v in cols.items()}
    seconds = {k: np.asarray(v) for k, v in traffic_cols.items()}
    windows = Windows(a["forward"], a["backward"], a["attention"], a["m"])
    breakdown, _ = step_breakdown(pp=a["pp"], vp=a["vp"], windows=windows, seconds=seconds, zero=a["zero"],
                                  recompute=np.asarray(recompute), overlap=memo.opts.overlap, optimizer=a["optimizer"],
                                  sm_share=memo.opts.base().comm_sm_share(memo.ceil.gpu.sm_count),
                                  host=(a["host_fb"], a["host_opt"]), p2p_slowdown=memo.costs.p2p_slowdown,
                                  overlap_slowdown=memo.costs.overlap_slowdown, fp8=(a["fp8_mb"], a["fp8_step"]))
    step = sum((np.broadcast_to(v, a["m"].shape) for v in breakdown.values()), np.zeros(a["m"].shape))
    memory = np.empty(len(step))
    for pp in np.unique(a["pp"]):
        idx = np.flatnonzero(a["pp"] == pp)
        memory[idx] = memo.memory.peak_bytes(int(pp), [state_keys[i] for i in idx], [act_keys[i] for i in idx],
                                             a["micro_batch"][idx], a["m"][idx], a["vp"][idx], a["zero"][idx],
                                             a["replicas"][idx])
    return step, memory


def plan(spec: ModelSpec, ceilings: Ceilings, cluster: ClusterSpec, opts: PlanOptions,
         progress: Progress | None = None) -> Plan:
    """The fastest fitting layouts (module docstring); `progress(done, total)` is called as layouts finish."""
    start = time.perf_counter()
    opts.validate()
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
    best = [train_step(spec, ceilings, cluster, c, parts=memo.parts(c)) for c in map(pick, order[:opts.top])]
    rival = next((pick(j) for j in order if best and _decisions(pick(j)) != _decisions(best[0].options)), None)
    other = train_step(spec, ceilings, cluster, rival, parts=memo.parts(rival)) if rival is not None else None
    return Plan(spec.name, ceilings.gpu.name, cluster.name, opts, tuple(best), len(step), len(fits),
                time.perf_counter() - start, why(best[0] if best else None, other))


def _decisions(c: TrainStepOptions) -> tuple:
    """The choices a reason is about: model split, ZeRO and recomputation."""
    return c.tp, c.pp, c.zero, c.recompute


def why(best: TrainStep | None, rival: TrainStep | None) -> str:
    """One line: what the best layout saves against the fastest fitting one that splits the model,
    shards states or recomputes differently, and where."""
    if best is None:
        return "no layout fits in memory: more GPUs, a smaller global batch or sequence, or --reserve"
    if rival is None:
        return f"{best.step_time_s:.4g} s per step; every other fitting layout makes the same tp/pp/ZeRO/recompute choices"
    a, b = best.options.layout(), rival.options.layout()
    diff = ", ".join(f"{k} {b[k]}->{a[k]}" for k in a if a[k] != b[k])
    deltas = {k: rival.breakdown[k] - best.breakdown[k] for k in best.breakdown}
    part = max(deltas, key=lambda k: deltas[k])
    return (f"{best.step_time_s:.4g} s per step, {rival.step_time_s - best.step_time_s:.3g} s less than the best layout "
            f"with other tp/pp/ZeRO/recompute choices ({diff}), mostly {part} ({deltas[part]:.3g} s less)")
