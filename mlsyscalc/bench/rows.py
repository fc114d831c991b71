"""Result rows and the append-only store (JSONL or CSV) that lets a sweep resume.

A row is written the moment it is measured, so a crash or Ctrl-C loses nothing; a rerun asks
`ResultStore.done()` and skips every key already measured without an error.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any


@dataclass
class Row:
    """One measured (or failed) benchmark. Units live in the field names."""

    kernel: str                      # e.g. "triton_matmul"
    baseline: str                    # e.g. "torch.matmul"
    shape: str                       # e.g. "4096x4096x4096" (MxNxK)
    dtype: str                       # e.g. "bfloat16", "fp8_rowwise", "w4a16_g128"
    variant: str = ""                # extra key part (layout, epilogue, ...)
    ok: bool = False                 # passed the correctness gate
    rel_err: float | None = None     # relative Frobenius error vs the torch reference
    tol: float | None = None
    median_ms: float | None = None   # kernel, do_bench median
    baseline_median_ms: float | None = None
    flops: float | None = None       # useful FLOPs of the operation (2 per multiply-add)
    bytes: float | None = None       # fewest bytes moved: each input read once, output written once
    tflops_per_s: float | None = None
    GBps: float | None = None
    baseline_tflops_per_s: float | None = None
    baseline_GBps: float | None = None
    speedup: float | None = None     # baseline_median_ms / median_ms
    predicted_ms: float | None = None         # roofline calculator's prediction, when it exists
    prediction_error: float | None = None     # (measured - predicted) / predicted
    error: str | None = None         # gate failure, compile error, OOM: the row exists, untimed
    measured_at: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)   # kernel-specific numbers (quant error, ...)
    env: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return "|".join((self.kernel, self.baseline, self.shape, self.dtype, self.variant))

    def finish(self) -> "Row":
        """Fill the derived rates from times and counts (None where an input is missing)."""
        self.tflops_per_s = _rate(self.flops, self.median_ms, 1e12)
        self.GBps = _rate(self.bytes, self.median_ms, 1e9)
        self.baseline_tflops_per_s = _rate(self.flops, self.baseline_median_ms, 1e12)
        self.baseline_GBps = _rate(self.bytes, self.baseline_median_ms, 1e9)
        if self.median_ms and self.baseline_median_ms:
            self.speedup = self.baseline_median_ms / self.median_ms
        if self.median_ms and self.predicted_ms:
            self.prediction_error = (self.median_ms - self.predicted_ms) / self.predicted_ms
        return self

    def flat(self) -> dict[str, Any]:
        """One level of keys (env_*, extra_*) for CSV and dataframes."""
        data = {k: v for k, v in asdict(self).items() if k not in ("env", "extra")}
        data.update({f"extra_{k}": v for k, v in self.extra.items()})
        data.update({f"env_{k}": v for k, v in self.env.items()})
        data["key"] = self.key
        return data


def _rate(amount: float | None, ms: float | None, unit: float) -> float | None:
    if not amount or not ms:
        return None
    return amount / (ms * 1e-3) / unit


_ROW_FIELDS = {f.name for f in fields(Row)}


def row_from_flat(data: dict[str, Any], from_text: bool = False) -> Row:
    """Inverse of Row.flat(). from_text: the values came from CSV, where all are strings; numbers are
    restored (JSON keeps its types, so a version string such as "13.0" stays a string)."""
    _parse = _parse_text if from_text else _same
    base = {k: _parse(v) for k, v in data.items() if k in _ROW_FIELDS}
    for name in ("kernel", "baseline", "shape", "dtype", "variant"):
        base[name] = "" if base.get(name) is None else str(base[name])
    row = Row(**base)
    row.ok = data.get("ok") in (True, "True", "true", 1, "1")
    row.extra = {k[6:]: _parse(v) for k, v in data.items() if k.startswith("extra_")}
    row.env = {k[4:]: _parse(v) for k, v in data.items() if k.startswith("env_")}
    return row


def _same(value: Any) -> Any:
    return value


def _parse_text(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    if value == "":
        return None
    try:
        number = float(value)
    except ValueError:
        return value
    return int(number) if number.is_integer() and "." not in value and "e" not in value.lower() else number


class ResultStore:
    """Append-only rows in `path` (.jsonl, or .csv); `done()` gives the keys to skip on a rerun."""

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None
        self._csv_columns: list[str] | None = None

    def rows(self) -> list[Row]:
        """Every stored row, later rows for the same key replacing earlier ones; a file that is not rows, or a
        malformed record, is an MlsysError naming the file, line and key (mlsyscalc.readers.rows)."""
        from ..readers.rows import read_row_records

        if self.path is None or not self.path.exists():
            return []
        latest: dict[str, Row] = {}
        for line in read_row_records(self.path):
            row = row_from_flat(line.record, from_text=self.path.suffix.lower() == ".csv")
            latest[row.key] = row
        return list(latest.values())

    def done(self) -> set[str]:
        return {row.key for row in self.rows() if not row.error}

    def append(self, row: Row) -> None:
        path = self.path
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        flat = {k: _finite(v) for k, v in row.flat().items()}
        if path.suffix == ".csv":
            self._append_csv(path, flat)
        else:
            with path.open("a") as handle:
                handle.write(json.dumps(flat) + "\n")

    def _append_csv(self, path: Path, flat: dict[str, Any]) -> None:
        new = not path.exists() or path.stat().st_size == 0
        if self._csv_columns is None:
            if new:
                self._csv_columns = list(flat)
            else:
                with path.open(newline="") as handle:
                    self._csv_columns = next(csv.reader(handle))
        with path.open("a", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=self._csv_columns, extrasaction="ignore")
            if new:
                writer.writeheader()
            writer.writerow(flat)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
