"""One row shape for every benchmark family: rows of each family survive the JSONL store unchanged,
and the records that comm / memory / ceilings keep in their own formats come back from rows.

The inputs are the measured rows committed under reports/ (real GPU output, not made up here).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from mlsyscalc.bench.cases import ceilings, comm, memory
from mlsyscalc.bench.rows import ResultStore, Row

REPORTS = Path(__file__).resolve().parents[1] / "reports"


def _jsonl(path: Path, limit: int = 40) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()][:limit]


def _through_store(rows: list[Row], path: Path) -> list[Row]:
    store = ResultStore(path)
    for row in rows:
        store.append(row)
    return store.rows()


@pytest.mark.parametrize("family", ["matmul", "quant", "attention"])
def test_kernel_rows_round_trip_through_jsonl(family, tmp_path):
    rows = ResultStore(REPORTS / family / "rows.jsonl").rows()[:60]
    assert rows and all(isinstance(r, Row) for r in rows)
    again = _through_store(rows, tmp_path / "rows.jsonl")
    assert [asdict(r) for r in again] == [asdict(r) for r in rows]


def test_kernel_rows_give_csv_on_demand(tmp_path):
    rows = ResultStore(REPORTS / "quant" / "rows.jsonl").rows()[:20]
    again = _through_store(rows, tmp_path / "rows.csv")
    assert [(r.key, r.median_ms, r.ok, r.env.get("gpu")) for r in again] == \
        [(r.key, r.median_ms, r.ok, r.env.get("gpu")) for r in rows]


@pytest.mark.parametrize("module,path", [(comm, REPORTS / "comm" / "rows.jsonl"),
                                         (memory, REPORTS / "memory" / "rows.jsonl")])
def test_family_records_round_trip_through_rows(module, path, tmp_path):
    records = _jsonl(path)
    rows = [module.to_row(r) for r in records]
    assert len({r.key for r in rows}) == len(rows), "each record needs its own row key"
    again = _through_store(rows, tmp_path / "rows.jsonl")
    assert [module.from_row(r) for r in again] == records


def test_nccl_row_fields_mean_what_the_record_says():
    record = _jsonl(REPORTS / "comm" / "rows.jsonl", 1)[0]
    row = comm.to_row(record)
    assert row.kernel == "nccl_" + record["collective"] and row.ok
    assert row.median_ms == pytest.approx(record["time_s"] * 1e3)
    assert row.GBps == pytest.approx(record["algbw_GBps"])      # bytes / time = nccl-tests' algbw
    assert row.prediction_error == pytest.approx(record["prediction_error"])
    assert row.env["nccl"] == record["env"]["nccl"]


def test_memory_row_carries_measured_peak():
    record = next(r for r in _jsonl(REPORTS / "memory" / "rows.jsonl") if "error" not in r)
    row = memory.to_row(record)
    assert row.bytes == record["measured"]["peak_bytes"] and row.env["gpu"] == record["gpu"]


def test_ceilings_record_round_trips_through_rows(tmp_path):
    record = json.loads((REPORTS / "matmul" / "ceilings.json").read_text())
    rows = ceilings.to_rows(record)
    assert {r.kernel for r in rows} >= {"ceiling_matmul", "ceiling_read", "ceiling_copy"}
    again = _through_store(rows, tmp_path / "rows.jsonl")
    assert ceilings.from_rows(again) == record
