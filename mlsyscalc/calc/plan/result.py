"""What `mlsys plan` returns (calc.plan.search): the top K layouts with `train_step`'s numbers, the search's counts, and
one line on why the best wins."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

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
    variants: tuple[int, ...] = ()  # per candidate: the fitting layouts of its fold group, itself included (fold)

    def as_dict(self) -> dict[str, Any]:
        keys = ("step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "hfu", "memory_bytes_per_gpu", "fits",
                "breakdown", "comm_total_s")
        variants = self.variants or (1,) * len(self.candidates)
        cands = [{**{k: d[k] for k in keys}, "layout": full_layout(c.options), "variants": n}
                 for (d, c), n in zip(((c.as_dict(), c) for c in self.candidates), variants)]
        o = self.options
        return {"model": self.model, "gpu": self.gpu, "cluster": self.cluster, "gpus": o.gpus, "seq": o.seq,
                "global_batch": o.global_batch, "dtype": o.dtype, "fix": dict(o.fix), "overlap": list(o.overlap),
                "attention": o.attention, "framework": o.framework, "even_splits_only": o.even_splits_only,
                "excluded": o.excluded(), "all_variants": o.all_variants,
                "candidates": cands, "searched": self.searched, "feasible": self.feasible,
                "search_s": self.search_s, "why": self.why}


FOLD_AXES = ("tp", "pp", "dp", "cp", "ep", "micro_batch")  # a fold group: layouts that differ only in the other axes


def fold(order: np.ndarray, layouts: Sequence[TrainStepOptions], grid: int, top: int,
         every: bool = False) -> tuple[np.ndarray, tuple[int, ...]]:
    """(the top candidates of `order`, each one's variants): order ranks candidates j (layout j // grid, execution
    option j % grid) fastest first; each (tp, pp, dp, cp, ep, micro-batch) group keeps its fastest, and counts the
    fitting layouts it stands for (other vp, recompute, ZeRO, etp, sp or split). every: no folding (1 each)."""
    if every or not len(order):
        return order[:top], (1,) * len(order[:top])
    ids: dict[tuple, int] = {}
    ranked, where = np.unique(order // grid, return_inverse=True)  # the layouts that fit, once each
    group_of = np.array([ids.setdefault(tuple(_axis(layouts[int(i)], a) for a in FOLD_AXES), len(ids)) for i in ranked])
    groups = group_of[where]  # per ranked candidate, its group
    _, first, counts = np.unique(groups, return_index=True, return_counts=True)
    best = np.argsort(first, kind="stable")[:top]  # groups by their fastest member
    return order[first[best]], tuple(int(n) for n in counts[best])


def _axis(c: TrainStepOptions, axis: str) -> int:
    return c.data_parallel if axis == "dp" else getattr(c, axis)


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
