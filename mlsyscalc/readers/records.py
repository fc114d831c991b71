"""Records that benchmark families keep in their own JSON Lines formats (not `Row`s).

- NCCL rows (`mlsys bench comm --out FILE`, `bench/comm_bench.py`): collective (one of the names
  given), size_bytes, gpus and nodes (whole numbers >= 1), backend (a string), ok (a boolean), and
  when ok time_s > 0; the bandwidths and predictions finite numbers >= 0 when present
  (prediction_error any finite number), env an object.
- Memory-case records (`bench/cases/memory.py`, reports/memory/rows.jsonl): kind train or infer,
  model a string, case a list of numbers, and unless the case failed (an `error` string) the
  `predicted` and `measured` objects of byte counts >= 0.

A file of benchmark rows or any other records is refused with a message saying what it looks like.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import MlsysError
from . import schema
from .files import Line, read_jsonl

COMM_COUNTS = ("size_bytes", "gpus")
# kind -> (the case's fields, the byte counts report/memory.py tables from both objects)
MEMORY_KINDS = {"train": (4, ("weights_bytes", "gradients_bytes", "optimizer_bytes", "forward_saved_bytes", "peak_bytes")),
                "infer": (2, ("weights_bytes", "kv_cache_bytes", "peak_bytes"))}
COMM_RATES = ("algbw_GBps", "busbw_GBps", "predicted_time_s", "predicted_busbw_GBps", "time_min_s")


def _foreign(line: Line, what: str, needs: str) -> MlsysError:
    r = line.record
    looks = ("benchmark rows of `mlsys bench` (read them with `mlsys bench rows FILE`)" if "kernel" in r else
             f"records with the keys {', '.join(list(map(str, r))[:6]) or 'none'}")
    return MlsysError(f"{what} {line.where}: not {needs} (no {'collective' if needs == 'NCCL rows' else 'kind'!r} key); "
                      f"these look like {looks}")


def read_comm_rows(path: str | Path, collectives: tuple[str, ...], what: str = "NCCL rows") -> list[dict[str, Any]]:
    """Every record of an NCCL rows file, checked (module docstring)."""
    lines = read_jsonl(path, what)
    if not lines:
        raise MlsysError(f"{what}: {path} holds no rows")
    for line in lines:
        r, where = line.record, f"{what} {line.where}"
        if "collective" not in r:
            raise _foreign(line, what, "NCCL rows")
        schema.string(r, "collective", where, choices=collectives)
        for key in COMM_COUNTS:
            schema.integer(r, key, where)
        schema.integer(r, "nodes", where, required=False)
        schema.string(r, "backend", where)
        schema.string(r, "algo", where, required=False)
        if schema.boolean(r, "ok", where):
            schema.number(r, "time_s", where, above=0)
        else:
            schema.number(r, "time_s", where, required=False, minimum=0)
        for key in COMM_RATES:
            schema.number(r, key, where, required=False, minimum=0)
        schema.number(r, "prediction_error", where, required=False)
        schema.mapping(r, "env", where)
    return [line.record for line in lines]


def read_memory_records(path: str | Path, what: str = "memory rows") -> list[dict[str, Any]]:
    """Every record of a memory-case rows file, checked (module docstring)."""
    lines = read_jsonl(path, what)
    for line in lines:
        r, where = line.record, f"{what} {line.where}"
        if "kind" not in r:
            raise _foreign(line, what, "memory-case records")
        fields, parts = MEMORY_KINDS[schema.string(r, "kind", where, choices=tuple(MEMORY_KINDS))]
        schema.string(r, "model", where)
        case = schema.sequence(r, "case", where)
        if len(case) != fields or not all(isinstance(x, (int, float)) for x in case):
            raise schema.fail(where, "case", f"must be a list of {fields} numbers, got {r.get('case')!r}")
        if r.get("error") is not None:
            schema.string(r, "error", where)
            continue
        for part in ("predicted", "measured"):
            section = schema.mapping(r, part, where, required=True)
            for key in parts:
                schema.number(section, key, f"{where} {part}", minimum=0)
    return [line.record for line in lines]
