"""What `mlsys bench` prints about rows: derived rates, speedup = baseline ms / kernel ms, the per-group
geomean / min / worst shape, the row store's replace-and-resume rules, and `mlsys bench rows` views.

Every expected number is worked out here by hand from the row's own times and counts, never through
the functions under test.
"""

from __future__ import annotations

import csv
import io
import json
import math

import pytest

from mlsyscalc.bench.rows import ResultStore, Row, row_from_flat
from mlsyscalc.bench.summary import geomean, summarize

from .test_values_views import tables


def _row(shape: str, ms: float | None, base_ms: float | None, kernel: str = "k", dtype: str = "bf16",
         flops: float | None = 2e12, nbytes: float | None = 4e9, predicted: float | None = None,
         error: str | None = None) -> Row:
    return Row(kernel=kernel, baseline="torch.matmul", shape=shape, dtype=dtype, ok=error is None, median_ms=ms,
               baseline_median_ms=base_ms, flops=flops, bytes=nbytes, predicted_ms=predicted, error=error).finish()


# ---- Row.finish: the rates a row carries ----------------------------------------------------------------------

def test_finish_derives_every_rate_from_times_and_counts():
    row = _row("4x4x4", 2.0, 3.0, flops=2e12, nbytes=4e9, predicted=1.6)
    assert row.tflops_per_s == pytest.approx(1000.0)           # 2e12 FLOP in 2 ms = 1e15 FLOP/s
    assert row.GBps == pytest.approx(2000.0)                   # 4e9 B in 2 ms = 2e12 B/s
    assert row.baseline_tflops_per_s == pytest.approx(2e12 / 3e-3 / 1e12)
    assert row.baseline_GBps == pytest.approx(4e9 / 3e-3 / 1e9)
    assert row.speedup == pytest.approx(1.5)                   # baseline 3 ms over kernel 2 ms
    assert row.prediction_error == pytest.approx(0.25)         # (2.0 - 1.6) / 1.6


def test_finish_leaves_missing_inputs_missing():
    untimed = _row("1x1x1", None, 3.0, predicted=1.0, error="gate failed")
    assert (untimed.tflops_per_s, untimed.GBps, untimed.speedup, untimed.prediction_error) == (None, None, None, None)
    assert untimed.baseline_tflops_per_s == pytest.approx(2e12 / 3e-3 / 1e12)
    no_baseline = _row("1x1x1", 2.0, None, flops=None, nbytes=0.0)
    assert (no_baseline.speedup, no_baseline.tflops_per_s, no_baseline.GBps) == (None, None, None)
    assert no_baseline.baseline_tflops_per_s is None and no_baseline.prediction_error is None


def test_key_and_flat_name_every_part():
    row = Row(kernel="k", baseline="b", shape="s", dtype="d", variant="v", extra={"host_us": 3.5}, env={"gpu": "H200"})
    assert row.key == "k|b|s|d|v"
    flat = row.flat()
    assert flat["key"] == "k|b|s|d|v" and flat["extra_host_us"] == 3.5 and flat["env_gpu"] == "H200"
    assert "extra" not in flat and "env" not in flat


# ---- reading rows back --------------------------------------------------------------------------------------

def test_csv_text_comes_back_as_numbers_of_the_right_type():
    row = row_from_flat({"kernel": "k", "baseline": "b", "shape": "8", "dtype": "bf16", "variant": "",
                         "ok": "True", "median_ms": "1.25", "flops": "1000", "bytes": "1e3", "tol": "",
                         "env_torch": "2.11", "env_sm_count": "132", "extra_note": "fast"}, from_text=True)
    assert row.median_ms == 1.25 and row.flops == 1000 and isinstance(row.flops, int)
    assert row.bytes == 1000.0 and isinstance(row.bytes, float)   # an exponent means a float
    assert row.tol is None and row.ok is True and row.shape == "8"   # key fields stay text
    assert row.env == {"torch": 2.11, "sm_count": 132} and row.extra == {"note": "fast"}
    for text, ok in (("false", False), ("0", False), ("1", True), ("true", True)):
        assert row_from_flat({"kernel": "k", "baseline": "b", "shape": "s", "dtype": "d", "ok": text},
                             from_text=True).ok is ok
    kept = row_from_flat({"kernel": "k", "baseline": "b", "shape": "s", "dtype": "d", "env_cuda": "13.0"})
    assert kept.env == {"cuda": "13.0"}   # JSON keeps a version string a string


def test_the_store_keeps_the_latest_row_of_a_key_and_resumes_past_timed_ones(tmp_path):
    for name in ("rows.jsonl", "rows.csv"):
        store = ResultStore(tmp_path / name)
        store.append(_row("a", 2.0, 3.0))
        store.append(_row("b", None, None, error="OOM"))
        store.append(_row("a", 1.0, 3.0))          # a rerun of a: replaces the first
        store.append(_row("c", float("inf"), 3.0))  # not finite: stored as missing
        rows = store.rows()
        assert [r.shape for r in rows] == ["a", "b", "c"], name
        assert rows[0].median_ms == 1.0 and rows[0].speedup == pytest.approx(3.0), name
        assert rows[2].median_ms is None, name
        assert store.done() == {"k|torch.matmul|a|bf16|", "k|torch.matmul|c|bf16|"}, name   # b failed: run again
    header = (tmp_path / "rows.csv").read_text().splitlines()
    assert sum(line.startswith("kernel,") for line in header) == 1 and len(header) == 5


# ---- summaries: geomean, min, worst shape, counts ------------------------------------------------------------

def test_geomean_by_hand():
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([1.0, 10.0, 100.0]) == pytest.approx(10.0)
    assert geomean([4.0, 0.0, None, -1.0]) == pytest.approx(4.0)   # only positive speedups count
    assert geomean([]) is None and geomean([0.0]) is None


def test_summary_per_kernel_baseline_dtype():
    rows = [_row("1024", 1.0, 0.5), _row("2048", 2.0, 4.0), _row("4096", 1.0, 8.0), _row("8192", None, 2.0, error="OOM"),
            _row("1024", 1.0, 3.0, dtype="fp8"), _row("x", 1.0, 1.0, kernel="other")]
    groups = {(g.kernel, g.dtype): g for g in summarize(rows)}
    assert list(groups) == [("k", "bf16"), ("k", "fp8"), ("other", "bf16")]
    bf16 = groups[("k", "bf16")]
    assert (bf16.rows, bf16.timed, bf16.failed) == (4, 3, 1)
    assert bf16.geomean_speedup == pytest.approx((0.5 * 2.0 * 8.0) ** (1 / 3))   # = 2.0
    assert (bf16.min_speedup, bf16.max_speedup, bf16.worst_shape) == (0.5, 8.0, "1024")
    fp8 = groups[("k", "fp8")]
    assert (fp8.timed, fp8.failed, fp8.geomean_speedup, fp8.worst_shape) == (1, 0, pytest.approx(3.0), "1024")
    nothing = summarize([_row("s", None, None, error="gate")])[0]
    assert (nothing.timed, nothing.failed, nothing.geomean_speedup, nothing.min_speedup, nothing.worst_shape) == \
        (0, 1, None, None, None)


def test_sweep_view_tables_and_notes(monkeypatch):
    """emit_rows (every kernel subcommand): the rows table, then the summary table, in that order."""
    import click
    from click.testing import CliRunner

    from mlsyscalc.cli.bench import emit_rows

    rows = [_row("1024", 1.0, 0.5), _row("2048", 2.0, 4.0), _row("4096", None, None, error="OOM")]

    @click.command()
    @click.option("--json", "as_json", is_flag=True)
    @click.option("--md", is_flag=True)
    def show(as_json, md):
        emit_rows(rows, "markdown" if md else "table", as_json, "matmul rows")

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    data = json.loads(CliRunner().invoke(show, ["--json"]).stdout)
    assert [r["shape"] for r in data["rows"]] == ["1024", "2048", "4096"]
    (group,) = data["summary"]
    assert group["geomean_speedup"] == pytest.approx(1.0) and group["min_speedup"] == 0.5
    assert (group["timed"], group["failed"], group["worst_shape"]) == (2, 1, "1024")
    assert data["notes"] == ["times are triton.testing.do_bench medians with L2 flushed; a row with an error was not timed"]
    md = CliRunner().invoke(show, ["--md"]).stdout
    views = tables(md)
    assert list(views) == ["matmul rows", "summary (speedup = baseline ms / kernel ms)"]
    (summary,) = views["summary (speedup = baseline ms / kernel ms)"]
    assert list(summary.values()) == ["k", "torch.matmul", "bf16", "2", "1", "1", "0.5", "1024"]
    assert list(summary) == ["kernel", "baseline", "dtype", "timed", "failed", "geomean", "min", "worst shape"]
    detail = views["matmul rows"]
    assert list(detail[1]) == ["kernel", "dtype", "shape", "variant", "ok", "rel_err", "median_ms",
                               "baseline_median_ms", "tflops_per_s", "GBps", "speedup", "error"]
    assert list(detail[1].values()) == ["k", "bf16", "2048", "", "yes", "", "2", "4", "1000", "2000", "2", ""]
    assert (detail[2]["ok"], detail[2]["error"], detail[2]["median_ms"]) == ("no", "OOM", "")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    interpreted = json.loads(CliRunner().invoke(show, ["--json"]).stdout)
    assert len(interpreted["notes"]) == 2 and "interpreter" in interpreted["notes"][1]


# ---- mlsys bench rows ---------------------------------------------------------------------------------------

def _store(tmp_path, name="rows.jsonl") -> str:
    store = ResultStore(tmp_path / name)
    store.append(_row("1024", 1.0, 0.5))
    row = _row("2048", 2.0, 4.0)
    row.extra = {"host_us": 12.5}
    row.env = {"gpu": "NVIDIA H200"}
    store.append(row)
    return str(tmp_path / name)


def test_bench_rows_views_agree(run_cli, tmp_path):
    path = _store(tmp_path)
    data = run_cli.json("bench", "rows", path)
    assert [r["shape"] for r in data["rows"]] == ["1024", "2048"]
    assert data["rows"][1]["extra_host_us"] == 12.5 and data["rows"][1]["env_gpu"] == "NVIDIA H200"
    assert "extra_host_us" not in data["rows"][0]
    code, out, _ = run_cli("bench", "rows", path, "--format", "csv")
    parsed = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and [r["speedup"] for r in parsed] == ["0.5", "2.0"]
    assert parsed[1]["tflops_per_s"] == "1000.0" and parsed[0]["extra_host_us"] == ""
    assert list(parsed[0])[:5] == ["kernel", "baseline", "shape", "dtype", "variant"]
    assert list(parsed[0])[-3:] == ["key", "extra_host_us", "env_gpu"]   # first-seen order of every key
    code, md, _ = run_cli("bench", "rows", path, "--format", "markdown")
    assert code == 0 and "### rows.jsonl" in md
    cell = tables(md)["rows.jsonl"][1]
    assert (cell["speedup"], cell["GBps"], cell["extra_host_us"], cell["key"]) == ("2", "2000", "12.5",
                                                                                   "k|torch.matmul|2048|bf16|")
    assert math.isclose(float(cell["baseline_tflops_per_s"]), 2e12 / 4e-3 / 1e12)


def test_bench_rows_refuses_a_file_that_is_not_rows(run_cli, tmp_path):
    bad = tmp_path / "nccl.jsonl"
    bad.write_text(json.dumps({"collective": "all_reduce", "bytes": 1024}) + "\n")
    code, out, err = run_cli("bench", "rows", str(bad))
    assert code == 2 and out == ""
    assert "nccl.jsonl" in err and "line 1" in err and "'kernel'" in err and "NCCL rows" in err
    negative = tmp_path / "neg.jsonl"
    negative.write_text(json.dumps({"kernel": "k", "baseline": "b", "shape": "s", "dtype": "d", "median_ms": -1}) + "\n")
    code, _, err = run_cli("bench", "rows", str(negative))
    assert code == 2 and "neg.jsonl" in err and "line 1" in err and "median_ms" in err
    text = tmp_path / "rows.csv"
    text.write_text("kernel,baseline,shape,dtype,ok\nk,b,s,d,maybe\n")
    code, _, err = run_cli("bench", "rows", str(text))
    assert code == 2 and "rows.csv" in err and "line 2" in err and "ok" in err and "'maybe'" in err


# ---- mlsys bench model: the case and op tables, the notes -----------------------------------------------------

def _model_row(**extra) -> Row:
    env = extra.pop("env", {"gpu": "NVIDIA H200"})
    return Row(kernel="model.forward", baseline="graph", shape="b2s512", dtype="bf16", variant="v", median_ms=3.0,
               predicted_ms=2.5, prediction_error=0.2, env=env,
               extra={"model": "llama2-7b", "phase": "prefill", "kernels": "torch", "layers": 32, "full_layers": 32,
                      **extra})


def test_bench_model_case_table_by_hand():
    from mlsyscalc.bench.model_report import CASE_COLUMNS, case_table

    row = _model_row(peak_bytes=3 * 2**30, predicted_peak_bytes=2.5 * 2**30, memory_error=-0.1667,
                     full_estimated_s=0.012)
    (cells,) = case_table([row])
    assert dict(zip(CASE_COLUMNS, cells)) == {
        "model": "llama2-7b", "phase": "prefill", "shape": "b2s512", "mode": "graph", "kernels": "torch",
        "dtype": "bf16", "measured_ms": 3.0, "predicted_ms": 2.5, "error": 0.2, "peak_GiB": 3.0,
        "predicted_peak_GiB": 2.5, "memory_error": -0.1667, "full_estimated_ms": pytest.approx(12.0), "status": "ok"}
    bare = Row(kernel="model.forward", baseline="eager", shape="s", dtype="bf16", variant="opt-125m", error="OOM")
    (cells,) = case_table([bare])
    got = dict(zip(CASE_COLUMNS, cells))
    assert (got["model"], got["peak_GiB"], got["full_estimated_ms"], got["status"]) == ("opt-125m", None, None, "OOM")


def test_bench_model_op_table_by_hand():
    from mlsyscalc.bench.model_report import OP_COLUMNS, op_table

    ops = {"kinds": {"matmul": {"measured_kernels": 224, "measured_s": 0.002, "predicted_s": 0.0016, "error": 0.25}},
           "linears": {"o_proj": {"count": 32, "measured_s": 4e-4, "predicted_s": 5e-4, "error": -0.2},
                       "down_proj": {"count": 32, "measured_s": 1e-3}}}
    rows = [dict(zip(OP_COLUMNS, cells)) for cells in op_table([_model_row(ops=ops), _model_row()])]
    assert [r["op"] for r in rows] == ["[matmul]", "down_proj", "o_proj"]   # kinds first, each section sorted
    assert rows[0]["count"] == 224 and rows[0]["measured_ms"] == pytest.approx(2.0) and rows[0]["error"] == 0.25
    assert rows[2] == {"model": "llama2-7b", "phase": "prefill", "shape": "b2s512", "op": "o_proj", "count": 32,
                       "measured_ms": pytest.approx(0.4), "predicted_ms": pytest.approx(0.5), "error": -0.2}
    assert rows[1]["predicted_ms"] is None and rows[1]["error"] is None


def test_bench_model_notes_follow_the_rows():
    from mlsyscalc.bench.model_report import notes

    assert len(notes([_model_row()])) == 1 and notes([_model_row()])[0].startswith("measured: median of CUDA-event")
    reduced = notes([_model_row(layers=2)])
    assert len(reduced) == 2 and reduced[1].startswith("--layers: model and prediction both run the reduced depth")
    cpu = notes([_model_row(env={"gpu": "cpu (x86_64)"})])
    assert len(cpu) == 2 and cpu[1].startswith("--cpu: the model ran on the CPU")
    assert len(notes([_model_row(env={"backend": "interpret", "gpu": "H200"})])) == 2


# ---- one case through the sweep, with the harness's gate and timer stood in -----------------------------------

def _fake_harness(monkeypatch, times, gate_ok=True):
    from mlsyscalc.bench import harness, sweep

    checks = iter([harness.Check(gate_ok, 1e-3, 2e-2, "ok" if gate_ok else "relative error 1e-1 > tolerance 2e-2"),
                   harness.Check(True, 5e-4, 2e-2, "ok")])
    monkeypatch.setattr(sweep.harness, "check_close", lambda out, ref, dtype, tol=None: next(checks))
    monkeypatch.setattr(sweep.harness, "time_ms", lambda fn: times.pop(0))
    monkeypatch.setattr(sweep.harness, "env_metadata", lambda: {"gpu": "test"})
    monkeypatch.setattr(sweep.harness, "now", lambda: "2026-12-03T00:00:00+00:00")


def test_run_case_fills_the_row_from_gate_and_timer(monkeypatch):
    from mlsyscalc.bench.sweep import Bench, Case, run_case

    _fake_harness(monkeypatch, [2.0, 3.0])
    case = Case("k", "torch.matmul", "8x8x8", "bf16", lambda: Bench(lambda: 1, lambda: 1, lambda: 1, extra={"q": 7}),
                flops=4e12, bytes=2e9, variant="v", predicted_ms=1.6)
    row = run_case(case)
    assert (row.ok, row.rel_err, row.tol, row.error) == (True, 1e-3, 2e-2, None)
    assert (row.median_ms, row.baseline_median_ms, row.speedup) == (2.0, 3.0, 1.5)
    assert row.tflops_per_s == pytest.approx(2000.0) and row.GBps == pytest.approx(1000.0)
    assert row.prediction_error == pytest.approx(0.25) and row.variant == "v" and row.predicted_ms == 1.6
    assert row.extra == {"q": 7, "timing": "eager", "baseline_rel_err": 5e-4, "baseline_timing": "eager"}
    assert row.env == {"gpu": "test"} and row.measured_at == "2026-12-03T00:00:00+00:00"


def test_a_failed_gate_is_reported_not_timed(monkeypatch):
    from mlsyscalc.bench.sweep import Bench, Case, run_case

    times = [2.0, 3.0]
    _fake_harness(monkeypatch, times, gate_ok=False)
    row = run_case(Case("k", "b", "s", "bf16", lambda: Bench(lambda: 1, lambda: 1, lambda: 1)))
    assert row.ok is False and row.error == "correctness gate failed: relative error 1e-1 > tolerance 2e-2"
    assert row.median_ms is None and row.speedup is None and times == [2.0, 3.0]   # the timer never ran
    assert row.flops is None and row.bytes is None   # a case without counts stores none (not 0)


def test_run_cases_reports_progress_and_resumes(monkeypatch, tmp_path):
    from mlsyscalc.bench.sweep import Bench, Case, run_cases

    _fake_harness(monkeypatch, [1.0, 1.0, 1.0, 1.0])
    cases = [Case("k", "b", s, "bf16", lambda: Bench(lambda: 1, lambda: 1)) for s in ("a", "b")]
    store = ResultStore(tmp_path / "rows.jsonl")
    store.append(_row("a", 1.0, 1.0, kernel="k"))   # different baseline: another key
    seen: list[tuple[int, int, str]] = []
    rows = run_cases(cases, store, lambda *args: seen.append(args))
    assert [r.shape for r in rows] == ["a", "b"] and seen == [(0, 2, "k bf16 a"), (1, 2, "k bf16 b"), (2, 2, "")]
    seen.clear()
    again = run_cases(cases, store, lambda *args: seen.append(args))
    assert [r.shape for r in again] == ["a", "b"] and seen == []   # both stored: nothing runs, no progress


def test_store_without_a_path_and_a_csv_keeps_its_first_header(tmp_path):
    nowhere = ResultStore(None)
    nowhere.append(_row("a", 1.0, 1.0))
    assert nowhere.rows() == [] and nowhere.done() == set()
    assert ResultStore(tmp_path / "missing.jsonl").rows() == []
    path = tmp_path / "rows.csv"
    path.write_text("kernel,baseline,shape,dtype,variant,ok,median_ms\n")
    store = ResultStore(path)
    row = _row("b", 2.0, 4.0)
    row.extra = {"new_field": 1}
    store.append(row)
    lines = path.read_text().splitlines()
    assert lines == ["kernel,baseline,shape,dtype,variant,ok,median_ms", "k,torch.matmul,b,bf16,,True,2.0"]
    assert ResultStore(path).rows()[0].median_ms == 2.0 and ResultStore(path).rows()[0].speedup is None


def test_the_sweep_progress_bar_is_fed_by_the_callback(monkeypatch):
    from mlsyscalc.cli import bench as bench_cli
    from mlsyscalc.cli import progress

    calls: list[tuple] = []

    class Bar:
        def add_task(self, description, total):
            calls.append(("add", description, total))
            return 7

        def start(self):
            calls.append(("start",))

        def update(self, task, **fields):
            calls.append(("update", task, fields))

        def stop(self):
            calls.append(("stop",))

    monkeypatch.setattr(progress, "rich_bar", Bar)
    with bench_cli.progress_bar(quiet=True) as advance:
        assert advance is None
    with bench_cli.progress_bar(quiet=False) as advance:
        advance(0, 2, "k bf16 a")
        advance(1, 2, "k bf16 b")
        advance(2, 2, "")
    assert calls == [("add", "bench", None), ("start",),
                     ("update", 7, {"completed": 0, "total": 2, "description": "k bf16 a"}),
                     ("update", 7, {"completed": 1, "total": 2, "description": "k bf16 b"}),
                     ("update", 7, {"completed": 2, "total": 2, "description": ""}), ("stop",)]
