"""What `mlsys plan` returns (calc.plan.search): the top K layouts with `train_step`'s numbers, the search's counts, and
one line on why the best wins."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .space import PlanOptions
from ..train.step import TrainStep
from ..train.options import TrainStepOptions


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
                "breakdown", "comm_total_s")
        cands = [{**{k: d[k] for k in keys}, "layout": full_layout(c.options)}
                 for d, c in ((c.as_dict(), c) for c in self.candidates)]
        o = self.options
        return {"model": self.model, "gpu": self.gpu, "cluster": self.cluster, "gpus": o.gpus, "seq": o.seq,
                "global_batch": o.global_batch, "dtype": o.dtype, "fix": dict(o.fix), "overlap": list(o.overlap),
                "attention": o.attention, "framework": o.framework, "even_splits_only": o.even_splits_only,
                "excluded": o.excluded(),
                "candidates": cands, "searched": self.searched, "feasible": self.feasible,
                "search_s": self.search_s, "why": self.why}


def decisions(c: TrainStepOptions) -> tuple:
    """The choices a reason is about: model split, ZeRO and recomputation."""
    return c.tp, c.pp, c.zero, c.recompute


def full_layout(c: TrainStepOptions) -> dict[str, Any]:
    """`TrainStepOptions.layout` with Megatron-LM's split options (the names of `mlsys train`'s flags), so
    that a candidate can be run again by `mlsys train`."""
    return {**c.layout(), **c.pipeline_split.as_dict()}


def why(best: TrainStep | None, rival: TrainStep | None) -> str:
    """One line: what the best layout saves against the fastest fitting one that splits the model,
    shards states or recomputes differently, and where."""
    if best is None:
        return "no layout fits in memory: more GPUs, a smaller global batch or sequence, or --reserve"
    if rival is None:
        return f"{best.step_time_s:.4g} s per step; every other fitting layout makes the same tp/pp/ZeRO/recompute choices"
    a, b = full_layout(best.options), full_layout(rival.options)
    # edp follows the others; etp too where it is tp on both sides (Megatron-Core's default, a dense model's)
    derived = {"edp"} | ({"etp"} if a.get("etp") == a["tp"] and b.get("etp") == b["tp"] else set())
    diff = ", ".join(f"{k} {b[k]}->{a[k]}" for k in a if a[k] != b[k] and k not in derived)
    deltas = {k: rival.breakdown[k] - best.breakdown[k] for k in best.breakdown}
    part = max(deltas, key=lambda k: deltas[k])
    return (f"{best.step_time_s:.4g} s per step, {rival.step_time_s - best.step_time_s:.3g} s less than the best layout "
            f"with other tp/pp/ZeRO/recompute choices ({diff}), mostly {part} ({deltas[part]:.3g} s less)")
