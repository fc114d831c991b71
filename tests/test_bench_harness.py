"""The harness core: correctness gate, result store with resume, sweep runner, CLI guards."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner

from mlsyscalc.bench import harness
from mlsyscalc.bench.rows import ResultStore, Row
from mlsyscalc.bench.summary import geomean, summarize
from mlsyscalc.bench.sweep import Bench, Case, run_case, run_cases
from mlsyscalc.cli.main import cli


def test_check_close_measures_relative_frobenius_error():
    ref = torch.ones(10, 10)
    out = ref.clone()
    out[0, 0] = 2.0  # ||out - ref|| = 1, ||ref|| = 10
    check = harness.check_close(out, ref, "float32", tol=0.2)
    assert check.ok and check.rel_err == pytest.approx(0.1)
    assert not harness.check_close(out, ref, "float32").ok  # default fp32 tolerance 2e-3


def test_check_close_rejects_nan_shape_and_zero_reference():
    ref = torch.randn(4, 4)
    bad = ref.clone()
    bad[1, 2] = float("nan")
    assert "NaN" in harness.check_close(bad, ref, "bfloat16").message
    assert not harness.check_close(ref[:3], ref, "bfloat16").ok
    assert not harness.check_close(ref, torch.zeros(4, 4), "bfloat16").ok


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_store_round_trips_and_resumes(tmp_path, suffix):
    store = ResultStore(tmp_path / f"rows{suffix}")
    good = Row("k", "b", "2x2x2", "float16", ok=True, median_ms=2.0, baseline_median_ms=3.0, flops=8e9,
               env={"gpu": "X"}, extra={"q_err": 0.01}).finish()
    broken = Row("k", "b", "4x4x4", "float16", error="OOM")
    store.append(good)
    store.append(broken)
    rows = {r.key: r for r in ResultStore(store.path).rows()}
    assert rows[good.key].speedup == pytest.approx(1.5)
    assert rows[good.key].tflops_per_s == pytest.approx(4.0)  # 8e9 FLOP in 2 ms
    assert rows[good.key].env["gpu"] == "X" and rows[good.key].extra["q_err"] == pytest.approx(0.01)
    assert rows[good.key].ok is True
    assert store.done() == {good.key}  # the errored row is retried on a rerun


def _case(shape: str, calls: list, wrong: bool = False) -> Case:
    def build():
        x = torch.randn(8, 8) + 3.0
        calls.append(shape)
        return Bench(run=lambda: x * (1.5 if wrong else 1.0), reference=lambda: x.double(), baseline=lambda: x + 0)
    return Case("toy", "torch", shape, "float32", build, flops=1e3, bytes=1e3)


def test_run_cases_gates_times_and_skips_done(tmp_path, monkeypatch):
    monkeypatch.setattr(harness, "time_ms", lambda fn: 1.0)
    store = ResultStore(tmp_path / "rows.jsonl")
    calls: list = []
    rows = run_cases([_case("1", calls), _case("2", calls, wrong=True)], store)
    assert [r.ok for r in rows] == [True, False]
    assert rows[1].error.startswith("correctness gate failed") and rows[1].median_ms is None
    assert rows[0].speedup == pytest.approx(1.0)
    calls.clear()
    again = run_cases([_case("1", calls), _case("2", calls, wrong=True)], store)
    assert calls == ["2"] and len(again) == 2  # the passed row was skipped, the failed one retried


def test_run_case_turns_exceptions_into_error_rows():
    def build():
        raise RuntimeError("out of memory\nmore")
    row = run_case(Case("toy", "torch", "1", "float32", build))
    assert row.error == "RuntimeError: out of memory" and not row.ok


def test_summary_geomean():
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    rows = [Row("k", "b", s, "bf16", speedup=v) for s, v in (("a", 0.5), ("b", 2.0))]
    (group,) = summarize(rows)
    assert group.geomean_speedup == pytest.approx(1.0) and group.worst_shape == "a"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
@pytest.mark.parametrize("sub", ["matmul", "quant", "ceilings"])
def test_bench_without_gpu_exits_2(sub):
    result = CliRunner().invoke(cli, ["bench", sub])
    assert result.exit_code == 2 and "needs a CUDA GPU" in result.output


def test_help_imports_neither_torch_nor_triton():
    code = ("import sys; from mlsyscalc.cli.main import main\n"
            "try: main(['bench', '--help'])\nexcept SystemExit: pass\n"
            "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_interpret_matmul_cli_writes_rows(tmp_path):
    # A fresh process: TRITON_INTERPRET must be set before triton is imported.
    out = tmp_path / "rows.jsonl"
    proc = subprocess.run([sys.executable, "-m", "mlsyscalc", "bench", "matmul", "--interpret", "--quiet",
                           "--shapes", "33x40x24", "--dtype", "float16", "--out", str(out), "--json"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["rows"]
    assert row["ok"] and row["rel_err"] < 5e-3 and row["env_backend"] == "interpret"
    assert len(ResultStore(out).rows()) == 1
