"""The held-out range beside a printed time (mlsyscalc.specs.intervals): JSON `interval` objects and a note."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import render
from ..specs.intervals import interval

if TYPE_CHECKING:
    from ..specs.model import ModelSpec


def with_interval(output: render.Output, key: str, seconds: float, field: str = "interval",
                  label: str = "step") -> render.Output:
    """`output` with data[field] (the range around `seconds`) and a note; unchanged where no held-out set
    prices this command (the note then says so)."""
    found = interval(key)
    if found is None:
        note = f"{label}: no held-out set scores this prediction ({key}), so no range is given"
        return render.Output(output.data, output.tables, (*output.notes, note), output.records, output.calculated)
    data = {**output.data, field: found.around(seconds)}
    return render.Output(data, output.tables, (*output.notes, f"{label} {found.text(seconds)}"), output.records,
                         output.calculated)


def train_interval_key(spec: ModelSpec) -> str:
    """The held-out range a training step of this model takes: the MoE runs' for a model with routed experts."""
    return "train_moe" if spec.moe is not None else "train"
