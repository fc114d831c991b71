"""A training layout that fits: `plan`'s best for the options of a `train_step` (`mlsys train`, docs/train.md).

`mlsys train` prices the layout it is given. When that layout does not fit in memory it asks this module
for the layout `mlsys plan` would pick for the same job (GPUs, sequence, batch, dtype, framework and the
other step options): with no layout flags the step is priced on that layout instead; with explicit ones it
is named in a warning. The search runs only when the layout does not fit, so a fitting layout costs nothing.
"""

from __future__ import annotations

from dataclasses import replace

from ...specs.cluster import ClusterSpec
from ...specs.model import ModelSpec
from ..roofline.calibration import Ceilings
from .search import plan
from .space import PlanOptions
from ..train.step import TrainStep, train_step
from ..train.options import TrainStepOptions

# TrainStepOptions fields that make up a layout: what plan searches and `mlsys train`'s layout flags set
LAYOUT_FIELDS = ("tp", "pp", "dp", "cp", "ep", "etp", "vp", "sp", "micro_batch", "zero", "recompute", "pipeline_split")


def plan_options(opts: TrainStepOptions) -> PlanOptions:
    """The search `mlsys plan` runs for the job of opts (its step options, one candidate; sp off stays off)."""
    return PlanOptions.for_job(opts, top=1, fix=(() if opts.sp else (("sp", False),)))


def best_fitting(spec: ModelSpec, ceilings: Ceilings, cluster: ClusterSpec, opts: TrainStepOptions) -> TrainStep | None:
    """The step on the fastest layout `plan` finds that fits, with opts' non-layout options (schedule,
    vocab_parallel...) kept; None when no layout of the job fits (or the kept options make it not fit)."""
    found = plan(spec, ceilings, cluster, plan_options(opts))
    if not found.candidates:
        return None
    chosen = found.candidates[0].options
    step = train_step(spec, ceilings, cluster, replace(opts, **{f: getattr(chosen, f) for f in LAYOUT_FIELDS}))
    return step if step.fits else None
