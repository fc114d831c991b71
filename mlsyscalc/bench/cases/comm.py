"""NCCL collectives as benchmark rows: what `mlsys bench comm` measures, in the one row shape.

The collective sweep itself runs under torchrun (bench/comm_bench.py writes one JSON object per
collective and size; the alpha-beta fit is bench/comm_fit.py). `to_row` puts such a record into a
`Row` (kernel `<backend>_<collective>`, shape `<size_bytes>B`, variant `<gpus>gpu<nodes>node`,
median_ms = the slowest rank's median time, bytes = the buffer size so GBps = algbw, the model's
prediction in predicted_ms); the record itself rides in `extra`, so `from_row` gives it back.
"""

from __future__ import annotations

from typing import Any

from ..rows import Row

_ROW_OWN = ("env", "measured_at")   # record keys that live in Row fields, not in extra


def to_row(record: dict[str, Any]) -> Row:
    time_s, predicted_s = record.get("time_s"), record.get("predicted_time_s")
    row = Row(kernel=f"{record['backend']}_{record['collective']}",
              baseline=f"alpha-beta {record['cluster']}" if record.get("cluster") else "",
              shape=f"{record['size_bytes']}B", dtype=record.get("dtype", ""),
              variant=f"{record['gpus']}gpu{record['nodes']}node", ok=bool(record.get("ok")),
              median_ms=time_s * 1e3 if time_s else None, bytes=float(record["size_bytes"]),
              predicted_ms=predicted_s * 1e3 if predicted_s else None, error=record.get("error"),
              measured_at=record.get("measured_at"), env=dict(record.get("env") or {}),
              extra={k: v for k, v in record.items() if k not in _ROW_OWN})
    return row.finish()


def from_row(row: Row) -> dict[str, Any]:
    record = dict(row.extra)
    if row.measured_at is not None:
        record["measured_at"] = row.measured_at
    if row.env:
        record["env"] = dict(row.env)
    return record
