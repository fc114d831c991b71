"""The note a prediction carries when its card has no measured ceiling: it is datasheet x the default efficiencies."""

from __future__ import annotations

from typing import Any

from . import render

# The cards whose kernels the default efficiencies were read on (calc/roofline/calibration.py: H200 and H100 measurements).
MEASURED_CARDS = ("H100-SXM", "H200")


def ceilings_note(ceilings: Any) -> str | None:
    """None for a calibration file or a card the defaults were measured on; else what the prediction rests on."""
    if ceilings.calibrated or ceilings.gpu.name in MEASURED_CARDS:
        return None
    return (f"{ceilings.gpu.name}: no measured ceiling; a datasheet prediction (its peaks x the default efficiencies, "
            "measured on H100/H200; --calibration with a `mlsys bench ceilings` file of the card replaces them)")


def with_ceilings_note(output: render.Output, ceilings: Any) -> render.Output:
    note = ceilings_note(ceilings)
    return output if note is None else render.Output(output.data, output.tables, (*output.notes, note), output.records,
                                                      output.calculated)
