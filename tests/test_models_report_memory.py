"""models_report re-scores every row's peak memory with today's prediction, for the card the row ran on."""

from __future__ import annotations

import pytest

from mlsyscalc.bench.cases.model import ModelCase, predicted_peak_bytes
from mlsyscalc.bench.rows import Row
from mlsyscalc.report.models_report_memory import rescored_memory
from mlsyscalc.specs.lookup import load_model

MiB = 2**20


def _gpt2_decode(capability: str, peak: int | None) -> Row:
    """gpt2 decode B1 ctx1023 graph as a stored row: measured on one H100 at 2f5bb4e with
    max_memory_allocated 336,346,624 B and stored predicted 321,450,820 B (-4.43%;
    reports/models/h100_memory_remeasured.jsonl)."""
    extra = {"model": "gpt2", "phase": "decode", "batch": 1, "seq": 1023, "mode": "graph", "kernels": "torch",
             "tp": 1, "dp": 1, "layers": 12, "predicted_peak_bytes": 321_450_820, "memory_error": -0.0443}
    if peak:
        extra["peak_bytes"] = peak
    return Row("model.decode", "graph", "B1 ctx1023", "bf16", "gpt2 torch", ok=True, median_ms=0.69, extra=extra,
               env={"capability": capability})


def test_a_stored_error_is_replaced_by_todays():
    (row,) = rescored_memory([_gpt2_decode("9.0", 336_346_624)])
    want = predicted_peak_bytes(load_model("gpt2"), ModelCase("decode", 1, 1023, True), (9, 0))
    assert row.extra["predicted_peak_bytes"] == want
    assert row.extra["memory_error"] == pytest.approx((want - 336_346_624) / 336_346_624)
    assert abs(row.extra["memory_error"]) < 0.01  # the allocator's rounding closes the stored -4.4%


def test_the_rows_card_sets_the_workspace():
    """sm80's default cuBLAS workspace is 8 MiB + 128 KiB against sm90's 32 MiB."""
    (h100,) = rescored_memory([_gpt2_decode("9.0", 336_346_624)])
    (a100,) = rescored_memory([_gpt2_decode("8.0", 336_346_624)])
    assert h100.extra["predicted_peak_bytes"] - a100.extra["predicted_peak_bytes"] == 32 * MiB - (8 * 1024 + 128) * 1024


def test_rows_without_a_measured_peak_are_kept():
    row = _gpt2_decode("9.0", None)
    assert rescored_memory([row]) == [row]
