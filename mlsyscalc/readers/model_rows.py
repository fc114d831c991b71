"""`mlsys bench model` rows: the whole-model fields of a benchmark row (readers.rows checks them on every
read, so `mlsys calibrate`, `mlsys bench rows` and `--measured` see the same rules).

A row whose kernel starts with `model.` and that has no `error` must carry: median_ms > 0; extra_phase
prefill, decode or train; extra_batch and extra_seq whole numbers >= 1 (extra_layers, extra_tp, extra_dp
too when present); extra_mode graph or eager and extra_kernels, extra_model, extra_model_ref strings
when present; extra_overrides a list of KEY=VALUE strings; extra_ops an object whose `linears` and
`kinds` are objects of objects, each measured_s a number >= 0 when present. Other rows (kernel
benchmarks) are left to readers.rows.
"""

from __future__ import annotations

from typing import Any

from . import schema

PHASES = ("prefill", "decode", "train")
MODES = ("graph", "eager")


def check_model_record(record: dict[str, Any], where: str, text: bool = False) -> None:
    """The whole-model fields of one flattened row (module docstring); kernel rows pass unchecked."""
    if not str(record.get("kernel") or "").startswith("model.") or record.get("error"):
        return
    schema.number(record, "median_ms", where, above=0, text=text)
    schema.string(record, "extra_phase", where, choices=PHASES)
    for key in ("extra_batch", "extra_seq"):
        schema.integer(record, key, where, text=text)
    for key in ("extra_layers", "extra_tp", "extra_dp"):
        schema.integer(record, key, where, required=False, text=text)
    schema.string(record, "extra_mode", where, required=False, choices=MODES)
    for key in ("extra_kernels", "extra_model", "extra_model_ref"):
        schema.string(record, key, where, required=False)
    overrides = record.get("extra_overrides")
    if not text and overrides is not None:
        if not isinstance(overrides, list) or not all(isinstance(x, str) for x in overrides):
            raise schema.fail(where, "extra_overrides", f"must be a list of KEY=VALUE strings, got {overrides!r}")
    if text:
        return  # a CSV flattens ops into text; calibrate reads ops from JSON Lines only
    ops = schema.mapping(record, "extra_ops", where)
    for section in ("linears", "kinds"):
        for name, entry in schema.mapping(ops, section, f"{where} extra_ops").items():
            if not isinstance(entry, dict):
                raise schema.fail(f"{where} extra_ops.{section}", name, f"must be a JSON object, got {entry!r}")
            schema.number(entry, "measured_s", f"{where} extra_ops.{section}.{name}", required=False, minimum=0)
