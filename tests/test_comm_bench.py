"""The NCCL benchmark's correctness gate, the alpha/beta fit, the report, and a 2-process gloo run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from mlsyscalc.report import comm as comm_report
from mlsyscalc.calc.comm.collectives import COLLECTIVES, collective_cost
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.cluster import cluster_from_dict

MiB = 2**20


def _has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def synthetic_rows(alpha=12e-6, bandwidth=300e9, gpus=2, noise=None):
    """Rows whose times follow the ring model exactly (what a perfect fit must recover)."""
    spec = cluster_from_dict({"name": "truth", "gpus_per_node": 8,
                              "intra_node": {"bandwidth_GBps": bandwidth / 1e9, "latency_us": alpha * 1e6}}, "test")
    rows = []
    for c in COLLECTIVES:
        for k, size in enumerate(2**e for e in range(13, 31, 2)):
            t = collective_cost(c, size, 2 if c == "p2p" else gpus, spec).time_s * (1 + (noise or 0) * (-1) ** k)
            rows.append({"collective": c, "size_bytes": size, "gpus": 2 if c == "p2p" else gpus, "nodes": 1,
                         "backend": "nccl", "ok": True, "time_s": t, "algbw_GBps": size / t / 1e9,
                         "busbw_GBps": size / t / 1e9, "trials": 5, "measured_at": "now",
                         "env": {"gpu": "TestGPU", "nccl": "2.x", "torch": "t", "cuda": "c", "git_commit": "abc",
                                 "world_size": gpus, "backend": "nccl"}})
    return rows


def test_fit_recovers_alpha_and_beta():
    rows = synthetic_rows(gpus=4)
    joint, per = comm_report.fit_all(rows, MiB)
    assert joint.latency_s == pytest.approx(12e-6, rel=1e-6) and joint.bandwidth_Bps == pytest.approx(300e9, rel=1e-9)
    assert joint.max_abs_error < 1e-9 and set(per) == set(COLLECTIVES)


def test_fit_keeps_alpha_non_negative():
    rows = [r | {"time_s": r["size_bytes"] / 200e9} for r in synthetic_rows() if r["collective"] == "broadcast"]
    for k, r in enumerate(rows):
        r["time_s"] *= 1 - 0.05 * (k % 2)  # noise that would pull alpha below zero
    fit = comm_report.fit_alpha_beta(comm_report._timed(rows, MiB))
    assert fit.latency_s >= 0 and fit.bandwidth_Bps > 0


def test_measured_cluster_round_trips_and_predicts(tmp_path):
    rows = synthetic_rows(alpha=20e-6, bandwidth=350e9, noise=0.02)
    spec = comm_report.measured_cluster(rows, MiB, "test-measured")
    again = cluster_from_dict(json.loads(json.dumps(spec.to_dict())), "round trip")
    assert again.measured and set(again.intra.per_collective) == set(COLLECTIVES)
    t = collective_cost("all-gather", 256 * MiB, 2, again).time_s
    assert t == pytest.approx(collective_cost("all-gather", 256 * MiB, 2, spec).time_s)
    errors = comm_report.error_table(rows, again, MiB)
    assert all(e["max_abs_error"] < 0.05 for e in errors.values())


def test_report_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    rows = synthetic_rows(noise=0.03)
    spec = comm_report.measured_cluster(rows, MiB, "test-measured")
    path = comm_report.write_report(rows, tmp_path, MiB, "hgx-h100", spec, "mlsys bench comm --from ...")
    text = path.read_text()
    assert "2 x TestGPU" in text and "| all-reduce |" in text and "MEASURED" in text
    assert (tmp_path / "busbw.png").stat().st_size > 10_000 and (tmp_path / "rows.jsonl").exists()


def test_wrong_rows_stop_the_report():
    rows = synthetic_rows()
    rows[3] = rows[3] | {"ok": False, "error": "result differs"}
    with pytest.raises(MlsysError, match="failed the correctness check"):
        comm_report.check_rows(rows)


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_gate_catches_a_collective_that_does_nothing(collective):
    """With a no-op 'distributed' module every check must fail (rank 1 of 2; reduce checks rank 0)."""
    torch = pytest.importorskip("torch")
    from mlsyscalc.bench.comm_bench import _build

    noop = lambda *a, **k: None  # noqa: E731
    fake = SimpleNamespace(all_reduce=noop, all_gather_into_tensor=noop, reduce_scatter_tensor=noop,
                           all_to_all_single=noop, broadcast=noop, reduce=noop, P2POp=lambda *a: None,
                           isend=None, irecv=None, batch_isend_irecv=lambda ops: [])
    rank = 0 if collective == "reduce" else 1
    run, check = _build(torch, fake, collective, 64, rank, 2, torch.device("cpu"))
    run()
    assert not check()


@pytest.mark.skipif(_has_gpu(), reason="this machine has a CUDA GPU")
def test_bench_comm_without_gpus_exits_2(run_cli, tmp_path):
    code, _, err = run_cli("bench", "comm", "--out", str(tmp_path / "rows.jsonl"))
    assert code == 2 and ("needs at least 2 CUDA GPUs" in err or "needs torch" in err)


def test_gloo_run_end_to_end(tmp_path):
    """Two local processes through torchrun: every result checked, rows and predictions written."""
    pytest.importorskip("torch.distributed")
    out = tmp_path / "rows.jsonl"
    cmd = [sys.executable, "-m", "mlsyscalc", "bench", "comm", "--backend", "gloo", "--collective", "all-reduce",
           "--collective", "reduce-scatter", "--collective", "p2p", "--min-size", "8KiB", "--max-size", "64KiB",
           "--factor", "8", "--out", str(out), "--graph", "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(done.stdout)
    rows = data["rows"]
    assert len(rows) == 6 and all(r["ok"] and r["time_s"] > 0 for r in rows)
    assert {r["backend"] for r in rows} == {"gloo"} and all(r["predicted_time_s"] > 0 for r in rows)
    assert rows[0]["busbw_GBps"] == pytest.approx(rows[0]["algbw_GBps"])  # all-reduce on 2 ranks: 2(p-1)/p = 1
    assert out.read_text().count("\n") == 6
    for r in rows:  # every trial timed, the spread recorded; no CUDA graph on the CPU, and the row says so
        assert r["time_min_s"] <= r["time_s"] <= r["time_max_s"] and len(r["trial_times_s"]) == r["trials"]
        assert r["trial_spread"] == pytest.approx(r["time_s"] / r["time_min_s"] - 1) and r["host_issue_s"] > 0
        assert "graph_time_s" not in r and r["graph_error"]
