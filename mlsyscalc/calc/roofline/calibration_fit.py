"""Fit the roofline's efficiency ceilings and per-kernel fixed cost to measured model steps.

A model step's prediction (calc.roofline.model) is a sum over kernel rows

    step_s = sum_i count_i x (max(compute_i x e0_kind / e_kind, memory_i x e0_mem / e_mem, floor_i) + launch_i)

(plus count_i x gap_i, the stream's idle time between kernels, which is not fitted and is 0 where the
observation is a profiler's kernel time; launch_i: memory_launch_s for a memory-bound kernel, else
launch_s; floor_i: matmul_floor_s for a
plain GEMM, else 0; a GEMM's memory time x e0_skinny / e_skinny
instead of e0_mem / e_mem: GEMMs stream at their own efficiency; in
general each row's compute and memory times scale with the efficiency class that priced them,
calc.roofline.calibration's EFFICIENCY_FIELDS: memory_broadcast, matmul_unaligned, attention_small_head)

where compute_i and memory_i were computed at efficiencies e0. Compute time is inversely
proportional to the kind's efficiency (the tile/wave choice scales with it and does not change),
memory time to the memory efficiency, so a new set of efficiencies re-prices every row
without re-running the roofline. An eager step whose host path (calc.roofline.host) is longer
takes the host path instead: step_s = max(the sum above, host_path_s). The fit minimises the
squared log error of the step times (relative errors, no run dominating by size) with
Nelder-Mead in log space.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, Sequence
from dataclasses import dataclass

from ...errors import require
from .calibration import EFFICIENCY_FIELDS

# Fitted by default; the other efficiency classes keep their start values unless a caller frees them.
# attention_small_head is fitted: cuDNN's d64 attention kernels (TinyLlama, gpt2) reach a share of
# the peak of their own, and a fit that moves only `attention` left them at their start value.
# memory_launch_s, the fixed cost of a memory-bound kernel, is fitted apart from launch_s (GEMMs and
# attention): the decode profiles time small elementwise kernels at 1.4-2.7 us against 4-5 us for
# the smallest GEMMs (reports/models/README.md).
PARAMS = ("matmul", "matmul_skinny", "attention", "attention_small_head", "memory", "launch_s", "matmul_floor_s",
          "memory_launch_s")
EFFICIENCIES = EFFICIENCY_FIELDS  # the order of Observation.base
# every efficiency at most 1: a share of its ceiling, which is at most the datasheet (calc.roofline.calibration's
# Efficiency.validate and MEASURED_SHARE refuse more, so a fit above 1 would write a file no command reads)
BOUNDS = {"matmul": (0.05, 1.0), "matmul_skinny": (0.05, 1.0), "attention": (0.05, 1.0), "memory": (0.05, 1.0),
          "memory_broadcast": (0.02, 1.0), "matmul_unaligned": (0.02, 1.0), "matmul_unaligned_stream": (0.02, 1.0),
          "matmul_grouped_stream": (0.02, 1.0),
          "attention_small_head": (0.05, 1.0), "matmul_fp8": (0.05, 1.0), "attention_flash2": (0.05, 1.0),
          "memory_fused": (0.05, 1.0), "memory_fused_norm_bwd": (0.05, 1.0),
          "launch_s": (1e-7, 5e-5), "matmul_floor_s": (1e-7, 2e-5), "memory_launch_s": (1e-7, 5e-5)}


@dataclass(frozen=True)
class Term:
    """One kernel row of one step, priced at the efficiencies it was predicted with."""

    count: int
    kind: str  # "matmul", "attention" or "memory" (whose compute runs on CUDA cores: matmul-scaled)
    compute_s: float
    memory_s: float
    skinny: bool = False  # a GEMM: its memory time scales with matmul_skinny instead of memory
    compute_class: str = ""  # the efficiency that priced compute_s (default: attention or matmul by kind)
    memory_class: str = ""  # the one that priced memory_s (default: matmul_skinny if skinny, else memory)
    floor_s: float = 0.0  # a plain GEMM's shortest busy time (re-priced as matmul_floor_s when that is fitted)
    gap_s: float = 0.0  # the stream's idle time before each kernel (a step's; not fitted, 0 for profiler times)
    cap_s: float = 0.0  # the memory time at the class's per-SM streaming cap (not scaled by an efficiency)

    @property
    def classes(self) -> tuple[str, str]:
        return (self.compute_class or ("attention" if self.kind == "attention" else "matmul"),
                self.memory_class or ("matmul_skinny" if self.skinny else "memory"))


@dataclass(frozen=True)
class Observation:
    label: str
    measured_s: float
    terms: tuple[Term, ...]
    base: tuple[float, ...]  # EFFICIENCIES the terms were priced at (matmul, attention, memory, matmul_skinny)
    comm_s: float = 0.0  # collectives, not refitted
    host_path_s: float = 0.0  # the host's path through an eager step (calc.roofline.host), not refitted


def predict(obs: Observation, params: dict[str, float]) -> float:
    """The step re-priced at `params`: each term's time x (its class's efficiency at pricing /
    the new one); a class missing from `params` (or from the base) keeps its time. A memory-bound
    term pays memory_launch_s (launch_s when `params` has none)."""
    e0 = dict(zip(EFFICIENCIES, obs.base))

    def scale(cls: str) -> float:
        return e0[cls] / params[cls] if cls in e0 and cls in params else 1.0

    total = obs.comm_s
    for t in obs.terms:
        compute_class, memory_class = t.classes
        floor = params.get("matmul_floor_s", t.floor_s) if t.floor_s else 0.0
        launch = params.get("memory_launch_s", params["launch_s"]) if t.kind == "memory" else params["launch_s"]
        memory = max(t.memory_s * scale(memory_class), t.cap_s)
        total += t.count * (max(t.compute_s * scale(compute_class), memory, floor) + launch + t.gap_s)
    return max(total, obs.host_path_s)


def loss(observations: Sequence[Observation], params: dict[str, float]) -> float:
    return sum(math.log(predict(o, params) / o.measured_s) ** 2 for o in observations) / len(observations)


def _nelder_mead(f: Callable[[list[float]], float], x0: list[float], step: float = 0.3, iters: int = 600, restarts: int = 6) -> list[float]:
    """Minimiser of f near x0 (Nelder & Mead 1965, standard coefficients), restarted from the best
    point with a fresh simplex so a collapsed simplex cannot stall it."""
    best = list(x0)
    for _ in range(restarts):
        n = len(best)
        simplex = [best] + [[v + (step if i == j else 0.0) for j, v in enumerate(best)] for i in range(n)]
        values = [f(x) for x in simplex]
        for _ in range(iters):
            order = sorted(range(n + 1), key=values.__getitem__)
            simplex, values = [simplex[i] for i in order], [values[i] for i in order]
            centre = [sum(x[j] for x in simplex[:-1]) / n for j in range(n)]
            worst = simplex[-1]
            reflect = [c + (c - w) for c, w in zip(centre, worst)]
            fr = f(reflect)
            if fr < values[0]:
                expand = [c + 2 * (c - w) for c, w in zip(centre, worst)]
                fe = f(expand)
                simplex[-1], values[-1] = (expand, fe) if fe < fr else (reflect, fr)
            elif fr < values[-2]:
                simplex[-1], values[-1] = reflect, fr
            else:
                inner = [c + 0.5 * (w - c) for c, w in zip(centre, worst)]
                fi = f(inner)
                if fi < values[-1]:
                    simplex[-1], values[-1] = inner, fi
                else:  # shrink towards the best point
                    simplex = [simplex[0]] + [[b + 0.5 * (x - b) for b, x in zip(simplex[0], p)] for p in simplex[1:]]
                    values = [values[0]] + [f(p) for p in simplex[1:]]
        best = simplex[values.index(min(values))]
    return best


def fit(observations: Iterable[Observation], start: dict[str, float], fixed: tuple[str, ...] = (),
        ops: Iterable[Observation] = ()) -> dict[str, float]:
    """Parameters (PARAMS) minimising `loss` of the step observations plus, when given, `loss` of
    the per-op ones (profiler times of single ops: each group weighs the same); `fixed` ones keep
    their start value. A parameter no observation depends on (no attention rows, say) keeps its
    start value too; one `start` lacks is not fitted (memory_launch_s: then launch_s). Searched in
    log space, clamped to BOUNDS."""
    obs, per_op = list(observations), [o for o in ops if o.measured_s > 0]
    require(bool(obs), "calibrate: no measured rows to fit")
    require(all(o.measured_s > 0 for o in obs), "calibrate: measured times must be positive")
    free = [p for p in PARAMS if p in start and p not in fixed and _matters(obs + per_op, p)]

    def unpack(x: list[float]) -> dict[str, float]:
        params = dict(start)
        for name, v in zip(free, x):
            lo, hi = BOUNDS[name]
            params[name] = min(max(math.exp(v), lo), hi)
        return params

    def total(x: list[float]) -> float:
        params = unpack(x)
        return loss(obs, params) + (loss(per_op, params) if per_op else 0.0)

    best = _nelder_mead(total, [math.log(start[p]) for p in free])
    return unpack(best)


def _matters(obs: Iterable[Observation], name: str) -> bool:
    if name in ("launch_s", "memory"):
        return True
    if name == "memory_launch_s":
        return any(t.kind == "memory" and t.count for o in obs for t in o.terms)
    if name == "matmul_floor_s":
        return any(t.floor_s and t.count for o in obs for t in o.terms)
    return any(name in t.classes and t.count for o in obs for t in o.terms)
