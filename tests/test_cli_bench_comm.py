"""`mlsys bench comm --from`: the NCCL table read back from committed rows, the fit's row selection, node
size and the command a written report names; the options --from ignores exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mlsyscalc.cli.bench_comm import Fitting
from mlsyscalc.errors import MlsysError

from .test_values_views import close, run_both, table

ROWS = Path(__file__).resolve().parents[1] / "reports" / "comm" / "rows.jsonl"


def _fit(**changes) -> Fitting:
    base = dict(min_size=2**20, calibrate=None, name="measured", report="out", fit_gpus=None, node_gpus=None)
    return Fitting(**{**base, **changes})


def test_fitting_rows_node_size_and_command():
    rows = [{"gpus": 2, "env": {"gpu_count_local": 4}}, {"gpus": 4, "env": {}}, {"gpus": 2}]
    assert _fit().rows(rows) == rows and _fit(fit_gpus=2).rows(rows) == [rows[0], rows[2]]
    with pytest.raises(MlsysError, match=r"^no rows of 8 GPUs to fit \(--fit-gpus\)$"):
        _fit(fit_gpus=8).rows(rows)
    assert _fit().node_size(rows) == 4 and _fit(node_gpus=8).node_size(rows) == 8
    assert _fit().node_size([{"gpus": 2, "env": {"gpu_count_local": 8}}]) == 8   # the host's count when larger
    assert _fit().node_size([{"gpus": 4, "env": {"gpu_count_local": 2}}]) == 4
    assert _fit().command("r.jsonl") == ("mlsys bench comm --from --out r.jsonl --report out --name measured "
                                         "--fit-min-size 1048576")
    assert _fit(calibrate="c.json", fit_gpus=2, node_gpus=8, model="shared").command("r.jsonl") == (
        "mlsys bench comm --from --out r.jsonl --report out --name measured --fit-min-size 1048576 --calibrate c.json "
        "--fit-gpus 2 --node-gpus 8 --model shared")


def test_from_rows_table_is_the_rows(run_cli, tmp_path):
    out = tmp_path / "rows.jsonl"
    shutil.copy(ROWS, out)
    data, views = run_both(run_cli, "bench", "comm", "--from", "--out", str(out))
    records = [json.loads(line) for line in ROWS.read_text().splitlines() if line.strip()]
    rows = table(views, r"^NCCL vs alpha-beta \(")
    assert len(rows) == len(records) == len(data["rows"])
    for row, record in zip(rows, records):
        assert row["collective"] == record["collective"]
        for key in ("size_bytes", "time_s", "algbw_GBps", "busbw_GBps", "predicted_busbw_GBps", "prediction_error"):
            if record.get(key) is not None:
                assert close(row[key], record[key], 4), key
    timed = [r for r in records if r.get("ok") and r["collective"] == "all-reduce"]
    for r in timed[:5]:   # nccl-tests: algbw = size / time, all-reduce busbw = algbw x 2(p-1)/p
        assert r["algbw_GBps"] == pytest.approx(r["size_bytes"] / r["time_s"] / 1e9, rel=1e-6)
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * 2 * (r["gpus"] - 1) / r["gpus"], rel=1e-6)
    assert data["notes"][0].startswith("busbw/algbw as nccl-tests defines them")


def test_from_rows_calibrate_writes_the_fitted_spec(run_cli, tmp_path):
    out = tmp_path / "rows.jsonl"
    shutil.copy(ROWS, out)
    spec = tmp_path / "fit.json"
    data = run_cli.json("bench", "comm", "--from", "--out", str(out), "--calibrate", str(spec), "--name", "mine",
                        "--fit-gpus", "2")
    written = json.loads(spec.read_text())
    assert written == data["calibrated"] and written["name"] == "mine"
    assert f"fitted cluster spec written to {spec}" in data["notes"]


def test_options_that_from_ignores(run_cli, tmp_path):
    out = tmp_path / "rows.jsonl"
    shutil.copy(ROWS, out)
    for option, value in (("--nproc", "4"), ("--min-size", "1MiB"), ("--factor", "4")):
        code, _, err = run_cli("bench", "comm", "--from", "--out", str(out), option, value)
        assert code == 2 and f"{option} does not apply with --from (nothing is measured)" in err, option
