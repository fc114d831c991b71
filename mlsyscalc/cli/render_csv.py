"""`--format csv`: one tidy table per command, raw numbers in base units.

Two shapes, chosen by the command's Output:
- records (Output.records names a list of objects in the JSON, e.g. `gpus`, or a sweep's points):
  one row per item, one column per field; nested objects become dotted columns (`peak_flops.bf16`),
  lists of plain values are joined with ";". The result's other top-level plain values (a sweep's
  `model`, `gpu`, `phase`) follow as columns repeated on every row, so each row stands alone.
- otherwise the whole JSON result in long form: columns `key,value`, one row per number or
  string, nested keys dotted and list items indexed (`breakdown.weights_bytes`, `stages.0.layers`).
Either way the unit is in the column or key name (`_bytes`, `_flops`, `_s`, `_GBps`), exactly as
in the JSON, and every number is the JSON's number (ints as ints, floats with full precision).
"""

from __future__ import annotations

import csv
import io
from typing import Any, Iterator


def flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, scalar) for every leaf of a JSON-like value."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from flatten(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from flatten(item, f"{prefix}.{i}" if prefix else str(i))
    else:
        yield prefix, value


def _scalar(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return _scalar(value.item())
    return value


def _record(item: dict[str, Any]) -> dict[str, Any]:
    """One item as a flat row: nested objects dotted, lists of plain values joined with ';'."""
    row: dict[str, Any] = {}
    for key, value in item.items():
        if isinstance(value, (list, tuple)) and all(not isinstance(v, (dict, list, tuple)) for v in value):
            row[key] = ";".join(str(_scalar(v)) for v in value)
        elif isinstance(value, (dict, list, tuple)):
            row.update((k, _scalar(v)) for k, v in flatten(value, key))
        else:
            row[key] = _scalar(value)
    return row


def _context(data: dict[str, Any], records: str) -> dict[str, Any]:
    """The result's top-level plain values beside the records (a sweep's model and GPU)."""
    return {k: _scalar(v) for k, v in data.items() if k != records and not isinstance(v, (dict, list, tuple))}


def to_csv(data: dict[str, Any], records: str | None) -> str:
    buf = io.StringIO()
    if records is not None:
        context = _context(data, records)
        rows = [_record(item) for item in data[records]]
        rows = [{**row, **{k: v for k, v in context.items() if k not in row}} for row in rows]
        columns = list(dict.fromkeys(key for row in rows for key in row))
        records_writer = csv.DictWriter(buf, columns, restval="", lineterminator="\n")
        records_writer.writeheader()
        records_writer.writerows(rows)
    else:
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(["key", "value"])
        writer.writerows((key, _scalar(value)) for key, value in flatten(data))
    return buf.getvalue()
