"""torch's host costs (calc.train.host) solved from a host probe: training steps of a tiny model in the
layout of a measured case, timed in the same process just before it (scripts/train_measure.py).

A tiny model (every width 128: calc's bench host probe model) issues the same kernels, module code and
parallel plan as the full one, but each kernel runs for microseconds, so the GPU waits on the host and the
tiny step's time is the host's issue time (assumption 1). calc.train.host prices that time as

    fb  = m x ( ops op_s + matmuls dtensor_matmul_s [tp > 1] + layers fsdp_layer_s [ZeRO-3] )
    opt = tensors dtensor_param_s                                  [tp > 1 or ZeRO-3]

with ops, matmuls, layers and tensors calc.train.host's own work counts for the tiny model in the step's
layout (`host_work` of `mlsys train`). The probe's steps come in an order where each adds one unknown: a
plain one-GPU step (or the DDP layout) for op_s, a DTensor TP step for dtensor_matmul_s, an FSDP2 step for
fsdp_layer_s. Each is solved exactly with the costs found before it:

    op_s             = fb_plain / (m ops)
    dtensor_matmul_s = (fb_tp / m - ops op_s) / matmuls
    fsdp_layer_s     = (fb_fsdp / m - ops op_s - matmuls dtensor_matmul_s [tp > 1]) / layers
    dtensor_param_s  = opt / tensors          (the last step whose parameters are DTensors)

so `mlsys train --framework torch --host-costs` with these costs prices every probe step's host path at
exactly its measured time. Assumption 2: the host's cost per op, per DTensor matmul and per FSDP2 layer of
the tiny model is the full model's (only the widths differ; the same holds for one GPU in calc.roofline.host).
A cost that comes out below zero (timing noise larger than the cost a step isolates) is kept at 0 and named
in `clamped`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from ...errors import require
from ..memory.schedule import fsdp_sharded
from .host import StageWork

UNKNOWNS = ("op_s", "dtensor_matmul_s", "fsdp_layer_s")


@dataclass(frozen=True)
class ProbeStep:
    """One timed tiny step: its layout's host work (busiest stage), micro-batches, tp, ZeRO stage, and the
    slowest rank's median forward+backward and optimizer seconds."""

    work: StageWork
    micro_batches: int
    tp: int
    zero: int
    fwd_bwd_s: float
    optimizer_s: float

    def coefficients(self) -> dict[str, float]:
        """fb's coefficient of each unknown (module docstring)."""
        m, w = self.micro_batches, self.work
        return {"op_s": m * w.ops, "dtensor_matmul_s": m * w.matmuls if self.tp > 1 else 0.0,
                "fsdp_layer_s": m * w.layers if fsdp_sharded(self.zero) else 0.0}

    @property
    def dtensor(self) -> bool:
        return self.tp > 1 or fsdp_sharded(self.zero)


@dataclass(frozen=True)
class ProbeCosts:
    costs: Mapping[str, float]  # FrameworkCosts fields, seconds (the ones the probe's steps determine)
    clamped: tuple[str, ...]  # costs that solved below zero and are kept at 0


def solve_probe(steps: Sequence[ProbeStep]) -> ProbeCosts:
    """The costs the steps determine, solved in order (module docstring)."""
    require(len(steps) > 0, "host probe: no steps")
    solved: dict[str, float] = {}
    clamped = []
    for step in steps:
        require(step.fwd_bwd_s > 0 and step.optimizer_s >= 0 and step.micro_batches >= 1,
                f"host probe: a step needs a positive time and micro-batches, got {step}")
        coef = step.coefficients()
        new = [k for k in UNKNOWNS if coef[k] > 0 and k not in solved]
        require(len(new) == 1, f"host probe: each step must add one cost to solve, this one adds {new or 'none'}")
        known = sum(coef[k] * v for k, v in solved.items())
        value = (step.fwd_bwd_s - known) / coef[new[0]]
        if value < 0:
            clamped.append(new[0])
        solved[new[0]] = max(0.0, value)
    last = [s for s in steps if s.dtensor]
    if last:
        require(last[-1].work.tensors > 0, "host probe: a DTensor step without parameter tensors")
        solved["dtensor_param_s"] = last[-1].optimizer_s / last[-1].work.tensors
    return ProbeCosts(solved, tuple(clamped))
