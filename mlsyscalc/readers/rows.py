"""Benchmark rows (`bench/rows.py` Row, flattened): JSON Lines or CSV files that `mlsys bench` writes.

Each record must be a row: it has the key fields (kernel, baseline, shape, dtype; variant optional) as
strings, `ok` as a boolean, every measured number (times, FLOPs, bytes, rates, errors) finite or
absent, times, counts and rates >= 0, and `extra_*` / `env_*` keys for the rest; a whole-model row
(`mlsys bench model`) its fields too (readers.model_rows). A file whose records
are not rows at all (NCCL rows, memory-case records, any other JSON Lines) raises NotRows, which
names what it looks like; callers that scan a folder (`--measured`) skip those files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import MlsysError
from . import schema
from .files import Line, read_csv, read_jsonl
from .model_rows import check_model_record

KEY_FIELDS = ("kernel", "baseline", "shape", "dtype")
TEXT_FIELDS = ("variant", "error", "measured_at")
SIGNED_FIELDS = ("prediction_error",)  # may be negative
NUMBER_FIELDS = ("rel_err", "tol", "median_ms", "baseline_median_ms", "flops", "bytes", "tflops_per_s", "GBps",
                 "baseline_tflops_per_s", "baseline_GBps", "speedup", "predicted_ms")
OK_TEXT = ("true", "false", "1", "0", "")
FOREIGN = {"collective": "NCCL rows of `mlsys bench comm` (read them with `mlsys bench comm --from --out FILE`)",
           "predicted": "memory-case records of `mlsys bench memory` (`mlsys bench report DIR --family memory`)"}


class NotRows(MlsysError):
    """The file holds records, but not benchmark rows."""


def read_row_records(path: str | Path, what: str = "rows") -> list[Line]:
    """Every record of a rows file (.csv or JSON Lines), checked; CSV values are left as text."""
    text = Path(path).suffix.lower() == ".csv"
    lines = read_csv(path, what)[1] if text else read_jsonl(path, what)
    for line in lines:
        check_row(line.record, f"{what} {line.where}", text)
    return lines


def check_row(record: dict[str, Any], where: str, text: bool = False) -> None:
    """One flattened row's fields (module docstring); NotRows when it lacks the row keys altogether."""
    missing = [k for k in KEY_FIELDS if k not in record]
    if missing:
        hint = next((why for key, why in FOREIGN.items() if key in record), None)
        shown = ", ".join(list(map(str, record))[:6]) or "none"
        raise NotRows(f"{where}: not a benchmark row (no {missing[0]!r} key; keys: {shown}"
                      + (f"); these look like {hint}" if hint else ")"))
    for key in KEY_FIELDS + TEXT_FIELDS:
        value = record.get(key)
        if value is not None and not isinstance(value, str):
            raise schema.fail(where, key, f"{value!r} is not a string")
    ok = record.get("ok")
    if ok is not None and not (ok in (0, 1) or isinstance(ok, str) and ok.strip().lower() in OK_TEXT):
        raise schema.fail(where, "ok", f"{ok!r} is not true or false")
    for key in NUMBER_FIELDS + SIGNED_FIELDS:
        schema.number(record, key, where, required=False, minimum=None if key in SIGNED_FIELDS else 0, text=text)
    for key in ("extra", "env"):
        if key in record:
            schema.mapping(record, key, where)
    check_model_record(record, where, text)
