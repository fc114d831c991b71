"""The validating readers (mlsyscalc/readers) and the good input they must not refuse.

Each reader names the file, line and key of what it refuses; the same files with a byte-order mark,
blank lines or JSON Lines instead of CSV give the same values. Good input that was refused before
(a trace saved by Excel, calibrate without --hold-out, serving OPT and gemma2-9b) runs, and gives the
numbers its calculators give.
"""

from __future__ import annotations

import functools
import json
import math
import re
from pathlib import Path

import click
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsyscalc.errors import MlsysError
from mlsyscalc.readers import files, schema
from mlsyscalc.readers.rows import NotRows, check_row
from mlsyscalc.readers.trace import read_length_column, read_trace

ROOT = Path(__file__).resolve().parents[1]
TRACE = "arrival_s,prompt_len,output_len\n0,10,4\n0.5,20,6\n1.25,7,3\n"


# ---- text, JSON, JSON Lines, CSV ---------------------------------------------------------------------------

def test_a_byte_order_mark_and_blank_lines_change_nothing(tmp_path):
    plain, excel = tmp_path / "plain.csv", tmp_path / "excel.csv"
    plain.write_text(TRACE)
    excel.write_bytes(b"\xef\xbb\xbf" + TRACE.replace("\n0.5", "\n\n0.5").encode())
    assert read_trace(str(excel), 10) == read_trace(str(plain), 10) == [(0.0, 10, 4), (0.5, 20, 6), (1.25, 7, 3)]


def test_a_jsonl_trace_reads_as_its_csv(tmp_path):
    rows = [dict(zip(("arrival_s", "prompt_len", "output_len"), r)) for r in ((0, 10, 4), (0.5, 20, 6), (1.25, 7, 3))]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    (tmp_path / "t.csv").write_text(TRACE)
    assert read_trace(str(path), 10) == read_trace(str(tmp_path / "t.csv"), 10)


def test_csv_records_keep_their_line_numbers(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('a,b\n1,2\n\n"x\ny",3\n4,5\n')  # a quoted field spans lines 4-5
    header, rows = files.read_csv(path, "t")
    assert header == ["a", "b"] and [(r.number, r.record) for r in rows] == [
        (2, {"a": "1", "b": "2"}), (4, {"a": "x\ny", "b": "3"}), (6, {"a": "4", "b": "5"})]
    path.write_text("a,b\n1,2\n\n3,4,5\n")
    with pytest.raises(MlsysError, match="t .*t.csv line 4: 3 fields, the header has 2"):
        files.read_csv(path, "t")


def test_jsonl_names_the_line_and_what_it_holds(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2}\n')
    assert [(line.number, line.record) for line in files.read_jsonl(path, "r")] == [(1, {"a": 1}), (3, {"a": 2})]
    for text, words in (('{"a": 1}\n"x"\n', "line 2: a row must be a JSON object, got a string"),
                        ('{"a": 1}\n\n{"a": NaN}\n', "line 3: key a is not a finite number"),
                        ('{"a": {"b": [1, -Infinity]}}\n', "line 1: key a.b[1] is not a finite number"),
                        ('{"a": 1e400}\n', "key a is not a finite number"), ('{"a":\n', "line 1: not valid JSON")):
        path.write_text(text)
        with pytest.raises(MlsysError, match=re.escape(words)):
            files.read_jsonl(path, "r")


def test_file_size_and_encoding_limits(tmp_path, monkeypatch):
    path = tmp_path / "x.json"
    path.write_text('{"a": 1}')
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 7)
    with pytest.raises(MlsysError, match="x.json holds 8 bytes; input files are read up to 7"):
        files.read_json(path, "x")
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 8)
    assert files.read_json(path, "x") == {"a": 1}
    monkeypatch.undo()
    path.write_bytes(b'{"a": "\xe9"}')
    with pytest.raises(MlsysError, match="not UTF-8 text"):
        files.read_json(path, "x")
    with pytest.raises(MlsysError, match="is a folder"):
        files.read_text(tmp_path, "x")


def test_a_field_at_the_csv_limit_is_read_and_one_more_is_refused(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a\n" + "7" * files.MAX_CSV_FIELD_CHARS + "\n")
    assert len(files.read_csv(path, "t")[1][0].record["a"]) == files.MAX_CSV_FIELD_CHARS
    path.write_text("a\n" + "7" * (files.MAX_CSV_FIELD_CHARS + 1) + "\n")
    with pytest.raises(MlsysError, match="t.csv line 2: malformed CSV .*field larger than field limit"):
        files.read_csv(path, "t")


@pytest.mark.parametrize("value,kind,problem", [
    (True, "number", "True is not a number"), ("7", "number", "'7' is not a number"), (-1, "number", "must be >= 0"),
    (2.5, "integer", "2.5 is not a whole number"), (True, "integer", "True is not a whole number"),
    (0, "integer", "must be >= 1, got 0"), (2**60, "integer", "too large"), (3, "string", "3 is not a string"),
])
def test_schema_getters_name_where_and_key(value, kind, problem):
    get = {"number": lambda r: schema.number(r, "k", "f.csv line 9", minimum=0),
           "integer": lambda r: schema.integer(r, "k", "f.csv line 9"),
           "string": lambda r: schema.string(r, "k", "f.csv line 9")}[kind]
    with pytest.raises(MlsysError, match=f"^f.csv line 9: key 'k': .*{problem}"):
        get({"k": value})


def test_csv_text_numbers_are_parsed_and_checked():
    record = {"n": " 12 ", "x": "1e3", "neg": "-5", "frac": "2.0"}
    assert schema.integer(record, "n", "w", text=True) == 12 and schema.integer(record, "x", "w", text=True) == 1000
    assert schema.integer(record, "frac", "w", text=True) == 2
    with pytest.raises(MlsysError, match="key 'neg': must be >= 1, got -5"):
        schema.integer(record, "neg", "w", text=True)


def test_rows_name_the_family_they_belong_to():
    nccl = json.loads((ROOT / "reports" / "comm" / "rows.jsonl").read_text().splitlines()[0])
    with pytest.raises(NotRows, match="look like NCCL rows"):
        check_row(nccl, "w")
    row = {"kernel": "k", "baseline": "b", "shape": "s", "dtype": "bf16"}
    check_row({**row, "ok": True, "median_ms": 1.0, "prediction_error": -0.5}, "w")  # a negative error is a number
    with pytest.raises(MlsysError, match="key 'speedup': must be >= 0"):
        check_row({**row, "speedup": -2}, "w")


def test_rows_from_csv_read_ok_in_any_spelling_csv_writers_use(tmp_path):
    """A rows CSV saved by pandas or a spreadsheet spells booleans True/true/1: each is a passed row."""
    from mlsyscalc.bench.rows import ResultStore

    path = tmp_path / "rows.csv"
    lines = ["kernel,baseline,shape,dtype,variant,ok,median_ms"]
    lines += [f"k,b,{i}x{i}x{i},bf16,,{ok},1.5" for i, ok in enumerate(("True", "true", "1", "False", "false", "0", ""))]
    path.write_text("\n".join(lines) + "\n")
    assert [r.ok for r in ResultStore(path).rows()] == [True, True, True, False, False, False, False]
    assert all(r.median_ms == 1.5 and isinstance(r.median_ms, float) for r in ResultStore(path).rows())


def test_length_column(tmp_path):
    path = tmp_path / "l.csv"
    path.write_text("\ufefflen,other\n3,x\n9,y\n")
    assert read_length_column(str(path), "len", "--prompt-len", 10) == (3, 9)
    with pytest.raises(MlsysError, match="at most 1 requests"):
        read_length_column(str(path), "len", "--prompt-len", 1)


# ---- good input that used to be refused ---------------------------------------------------------------------

def test_serving_a_trace_with_a_byte_order_mark(run_cli, tmp_path):
    plain, excel = tmp_path / "plain.csv", tmp_path / "excel.csv"
    plain.write_text(TRACE)
    excel.write_bytes(b"\xef\xbb\xbf" + TRACE.encode())
    a, b = (run_cli.json("serve", "gpt2", "--trace", str(p)) for p in (plain, excel))
    assert a["requests"] == b["requests"] == 3 and a["e2e_p99_s"] == b["e2e_p99_s"] > 0


@pytest.mark.parametrize("model", ["opt-350m", "opt-6.7b"])
def test_opt_models_serve_up_to_their_position_table(run_cli, model):
    """OPT keeps 2050 position rows for 2048 positions: a request of 1024 + 1025 tokens (2048 positions)
    is served, one more output token is refused (as `mlsys roofline --seq 2049` is)."""
    data = run_cli.json("serve", model, "--rate", "1", "--requests", "3", "--prompt-len", "1024", "--output-len", "1025")
    assert data["requests"] == 3 and data["ttft_p50_s"] > 0
    code, _, err = run_cli("serve", model, "--rate", "1", "--requests", "3", "--prompt-len", "1024",
                           "--output-len", "1026")
    assert code == 2 and "2049 positions" in err


@pytest.mark.parametrize("calibration", [None, "reports/models/h200/calibration.json"])
def test_gemma2_serves(run_cli, calibration):
    extra = ["--calibration", str(ROOT / calibration)] if calibration else []
    data = run_cli.json("serve", "gemma2-9b", "--rate", "2", "--requests", "20", *extra)
    assert data["requests"] == 20 and 0 < data["ttft_p50_s"] < data["e2e_p50_s"]


def test_gemma2_decode_steps_equal_the_roofline_at_every_batch_up_to_128():
    """gemma2-9b's k_proj steps at 9, 17 and 33 rows (cuBLAS's split-K, hence the few-CTA cap, changes):
    the serving cost reads those rows token by token and matches the roofline's decode step."""
    from mlsyscalc.calc.roofline.model import predict_model
    from mlsyscalc.calc.roofline.ops import resolve_ceilings
    from mlsyscalc.calc.roofline.options import RooflineOptions
    from mlsyscalc.calc.serve.iteration import Batch, IterationCost
    from mlsyscalc.specs.lookup import load_model

    spec, ceil = load_model("gemma2-9b"), resolve_ceilings("H100-SXM")
    cost = IterationCost(spec, ceil, RooflineOptions())
    assert any(r.small_memory_s for r in cost.token_rows)
    for batch in (*range(1, 66), 96, 128):
        want = predict_model(spec, ceil, RooflineOptions(phase="decode", batch=batch, seq=1, context=1000,
                                                         check_fit=False, window="full")).time_s
        assert cost.time_s(Batch.of(contexts=(1000,) * batch)) == pytest.approx(want, rel=2e-3), batch


def test_calibrate_runs_without_hold_out(run_cli, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text((ROOT / "reports" / "models" / "h100_fitset.jsonl").read_text().splitlines()[0] + "\n")
    out = tmp_path / "fit.json"
    data = run_cli.json("calibrate", str(rows), "--out", str(out))
    assert data["summary"]["held_out"]["rows"] == 0 and data["summary"]["fitted"]["rows"] == 1
    efficiencies = json.loads(out.read_text())["efficiency"]
    assert all(0 < v <= 1 for v in efficiencies.values()), efficiencies
    assert run_cli.json("roofline", "llama2-7b", "--calibration", str(out))["predicted_s"] > 0  # the file it wrote reads


def test_a_calibration_at_the_datasheet_gives_mfu_at_most_one(run_cli, tmp_path):
    """Peaks and bandwidths equal to the datasheet (the largest a calibration may hold) and every efficiency 1:
    MFU is the share of the datasheet peak the step reaches, so at most 1."""
    from mlsyscalc.calc.roofline.calibration import EFFICIENCY_FIELDS
    from mlsyscalc.specs.gpu import load_gpu

    gpu = load_gpu("H100-SXM")
    record = {"gpu": gpu.name, "peak_flops": {k: v for k, v in gpu.peak_flops_by_dtype.items() if v},
              "bandwidth_Bps": {"read": gpu.memory_bandwidth_Bps, "write": gpu.memory_bandwidth_Bps},
              "efficiency": dict.fromkeys(EFFICIENCY_FIELDS, 1.0), "launch_overhead_s": 1e-9, "kernel_gap_s": 0}
    path = tmp_path / "ideal.json"
    path.write_text(json.dumps(record))
    for model, gpus in (("llama2-7b", 8), ("gpt2", 1), ("mixtral-8x7b", 8)):
        step = run_cli.json("train", model, "--gpu", "H100-SXM", "--gpus", str(gpus), "--global-batch", str(gpus),
                            "--seq", "1024", "--calibration", str(path))
        assert 0 < step["mfu"] <= 1 and 0 < step["hfu"] <= 1, (model, step["mfu"], step["hfu"])
    roof = run_cli.json("roofline", "llama2-7b", "--calibration", str(path), "--batch", "8")
    assert 0 < roof["mfu"] <= 1 and 0 < roof["mbu"] <= 1


def test_missing_optional_dependency_names_the_extra(run_cli, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "torch", None)  # `import torch` fails as when not installed
    for args in (("bench", "model", "gpt2", "--phase", "prefill"), ("bench", "host", "--cpu")):
        code, out, err = run_cli(*args)
        assert (code, out) == (2, "") and err.strip() == (f"error: mlsys {' '.join(args[:2])} needs torch, which is not "
                                                          "installed; pip install 'mlsyscalc[gpu]'")


@click.command()
def _warns():
    import numpy as np

    np.array([1.0]) / np.array([0.0])  # divide by zero: a RuntimeWarning
    raise MlsysError("inputs that make no sense together")


def test_numpy_warnings_do_not_stand_before_the_error_line(monkeypatch):
    from click.testing import CliRunner

    from mlsyscalc.cli.main import MainGroup, cli

    monkeypatch.setitem(MainGroup.lazy_commands, "warns", "tests.test_readers:_warns")
    result = CliRunner().invoke(cli, ["warns"])
    assert (result.exit_code, result.stderr) == (2, "error: inputs that make no sense together\n")


# ---- the simulator's cost: linear in the work a workload holds ----------------------------------------------

@settings(max_examples=40, deadline=None)
@given(requests=st.lists(st.tuples(st.floats(0, 5), st.integers(1, 300), st.integers(1, 40)), min_size=1, max_size=12),
       scheduler=st.sampled_from(["orca", "vllm", "sarathi", "static"]), chunk=st.integers(16, 256))
def test_iterations_are_bounded_by_output_tokens_and_prompt_chunks(requests, scheduler, chunk):
    """With room for every sequence (no preemption), each iteration decodes a token of a running sequence
    or prefills a chunk of budget tokens (or a whole prompt), so iterations <= sum(output) + sum(ceil(prompt /
    budget)): the cost of a run grows linearly with its requests, which MAX_OUTPUT_TOKENS caps."""
    from mlsyscalc.calc.serve.simulator import ServeOptions, engine_limits, kv_capacity
    from mlsyscalc.calc.serve.engine import Engine
    from mlsyscalc.calc.serve.workload import from_trace

    spec, ceil, cost = _gpt2()
    opts = ServeOptions(scheduler=scheduler, chunk=chunk, max_batch_tokens=max(chunk, 300), kv_blocks=10_000)
    work = from_trace(list(requests), "hypothesis")
    trace = Engine(work.requests, cost, engine_limits(kv_capacity(spec, ceil, opts), ceil, opts)).run()
    budget = opts.iteration_tokens
    bound = sum(o for _, _, o in work.requests) + sum(math.ceil(p / budget) for _, p, _ in work.requests)
    assert len(trace.iter_end_s) <= bound


@functools.lru_cache(maxsize=1)
def _gpt2():
    """gpt2 on an H100 and its iteration cost (one for every example)."""
    from mlsyscalc.calc.roofline.ops import resolve_ceilings
    from mlsyscalc.calc.serve.simulator import ServeOptions, iteration_cost
    from mlsyscalc.specs.lookup import load_model

    spec, ceil = load_model("gpt2"), resolve_ceilings("H100-SXM")
    return spec, ceil, iteration_cost(spec, ceil, ServeOptions())
