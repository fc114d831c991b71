"""Batch sweeps of a model's roofline: the throughput/latency curve and where it turns compute-bound.

Memory-bound decode reads the weights once per step whatever the batch, so tokens/s grows almost
linearly with the batch until the step's compute time catches up with its memory time (the
model-level ridge). `compute_bound_batch` finds that batch by doubling, then bisection.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...errors import require
from ...specs.model import ModelSpec
from .calibration import Ceilings
from .model import ModelRoofline, RooflineOptions, predict_model

SEARCH_LIMIT = 1 << 16


@dataclass(frozen=True)
class Sweep:
    points: tuple[ModelRoofline, ...]
    compute_bound_batch: int | None  # smallest batch whose step is compute-bound (None: not below SEARCH_LIMIT)

    @property
    def first_compute_bound_point(self) -> int | None:
        """Index of the first swept point that is compute-bound."""
        return next((i for i, p in enumerate(self.points) if p.bound == "compute"), None)


def _at(spec: ModelSpec, ceilings: Ceilings, opts: RooflineOptions, batch: int) -> ModelRoofline:
    return predict_model(spec, ceilings, replace(opts, batch=batch, check_fit=False))


def compute_bound_batch(spec: ModelSpec, ceilings: Ceilings, opts: RooflineOptions,
                        limit: int = SEARCH_LIMIT) -> int | None:
    """Smallest batch with compute time >= memory time (summed over the step's kernels)."""
    low, high = 0, 1
    while _at(spec, ceilings, opts, high).bound != "compute":
        if high >= limit:
            return None
        low, high = high, min(2 * high, limit)
    while high - low > 1:  # invariant: low is memory-bound (or 0), high compute-bound
        mid = (low + high) // 2
        if _at(spec, ceilings, opts, mid).bound == "compute":
            high = mid
        else:
            low = mid
    return high


MAX_SWEEP_POINTS = 512  # a few seconds of predictions at most


def sweep_batch(spec: ModelSpec, ceilings: Ceilings, opts: RooflineOptions, batches: list[int]) -> Sweep:
    """One prediction per batch (memory fit reported per point, not enforced) and the crossing."""
    require(len(batches) >= 1, "--sweep batch=... needs at least one value")
    require(all(b >= 1 for b in batches), "--sweep batch values must be positive integers")
    require(len(set(batches)) <= MAX_SWEEP_POINTS, f"--sweep batch: {len(set(batches)):,} values; at most "
                                                   f"{MAX_SWEEP_POINTS} (each is a whole-model prediction)")
    opts.validate(spec)
    points = tuple(_at(spec, ceilings, opts, b) for b in sorted(set(batches)))
    return Sweep(points, compute_bound_batch(spec, ceilings, opts))
