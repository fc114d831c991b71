"""Each reader's refusals, word for word: file, line, key and what is wrong, at the bounds of each rule.

tests/test_readers.py covers the files' text (BOM, JSON Lines, CSV limits); here the records of each
kind (traces, NCCL rows, memory-case records, whole-model rows, `--measured` folders) and the field
getters at their boundaries: a value at a bound is read, the next one is refused with its message.
"""

from __future__ import annotations

import json
import re

import pytest

from mlsyscalc.errors import MlsysError
from mlsyscalc.readers import files, schema
from mlsyscalc.readers.measured import measured_records, rows_files
from mlsyscalc.readers.model_rows import check_model_record
from mlsyscalc.readers.records import read_comm_rows, read_memory_records
from mlsyscalc.readers.rows import check_row
from mlsyscalc.readers.trace import MAX_REQUEST_TOKENS, read_length_column, read_trace


def refused(message: str, call, *args, **kwargs) -> None:
    """call(*args) raises MlsysError whose text is exactly message."""
    with pytest.raises(MlsysError) as info:
        call(*args, **kwargs)
    assert str(info.value) == message


# ---- field getters at their bounds --------------------------------------------------------------------------

def test_number_bounds_are_inclusive_or_strict_as_named():
    r = {"x": 2.0, "zero": 0, "big": 10**400, "inf": float("inf"), "t": " 2.5 ", "flag": False, "blank": "  "}
    assert schema.number(r, "x", "w", minimum=2.0, maximum=2.0) == 2.0      # both bounds inclusive
    assert schema.number(r, "zero", "w", minimum=0) == 0
    refused("w: key 'zero': must be > 0, got 0", schema.number, r, "zero", "w", above=0)
    refused("w: key 'x': must be >= 2.5, got 2", schema.number, r, "x", "w", minimum=2.5)
    refused("w: key 'x': must be <= 1.5, got 2", schema.number, r, "x", "w", maximum=1.5)
    assert schema.number(r, "x", "w", above=1.999) == 2.0
    refused(f"w: key 'big': {10**400!r} is not a finite number", schema.number, r, "big", "w")
    refused("w: key 'inf': inf is not a finite number", schema.number, r, "inf", "w")
    assert schema.number(r, "t", "w", text=True) == 2.5
    refused("w: key 't': ' 2.5 ' is not a number", schema.number, r, "t", "w")   # text only from CSV
    refused("w: key 'flag': False is not a number", schema.number, r, "flag", "w")
    refused("w: key 'gone': missing", schema.number, r, "gone", "w")
    refused("w: key 'blank': empty", schema.number, r, "blank", "w")
    assert schema.number(r, "gone", "w", required=False, default=7) == 7
    assert schema.number(r, "blank", "w", required=False) is None
    refused("key 'gone': missing", schema.number, r, "gone", "")   # no place to name: the key alone


def test_integer_bounds_and_spellings():
    r = {"one": 1, "two": 2.0, "big": 10**19, "cap": 5, "t": "+7", "e": "3e2", "w": "x7", "f": "2.5"}
    assert schema.integer(r, "one", "w") == 1 and schema.integer(r, "two", "w") == 2
    assert isinstance(schema.integer(r, "two", "w"), int)
    assert schema.integer(r, "cap", "w", maximum=5) == 5
    refused("w: key 'cap': 5 is too large (at most 4)", schema.integer, r, "cap", "w", maximum=4)
    refused("w: key 'cap': 1,000 is too large (at most 999)", schema.integer, {"cap": 1000}, "cap", "w", maximum=999)
    refused("w: key 'big': 1e+19 is too large (at most 9,007,199,254,740,992)", schema.integer, r, "big", "w",
            maximum=2**53)
    refused("w: key 'one': must be >= 2, got 1", schema.integer, r, "one", "w", minimum=2)
    assert schema.integer(r, "one", "w", minimum=0) == 1
    assert schema.integer(r, "t", "w", text=True) == 7 and schema.integer(r, "e", "w", text=True) == 300
    refused("w: key 'w': 'x7' is not a whole number", schema.integer, r, "w", "w", text=True)
    refused("w: key 'f': 2.5 is not a whole number", schema.integer, r, "f", "w", text=True)
    assert schema.integer(r, "gone", "w", required=False, default=3) == 3


def test_string_boolean_mapping_sequence():
    r = {"s": "graph", "b": True, "n": None, "m": {"a": 1}, "l": [1], "long": list(range(30))}
    assert schema.string(r, "s", "w", choices=("graph", "eager")) == "graph"
    refused("w: key 's': 'graph' is not one of eager, none", schema.string, r, "s", "w", choices=("eager", "none"))
    refused("w: key 'b': True is not a string", schema.string, r, "b", "w")
    assert schema.boolean(r, "b", "w") is True and schema.boolean(r, "n", "w", default=True) is True
    assert schema.boolean(r, "gone", "w") is False
    refused("w: key 's': 'graph' is not true or false", schema.boolean, r, "s", "w")
    assert schema.mapping(r, "m", "w") == {"a": 1} and schema.mapping(r, "n", "w") == {}
    refused("w: key 'n': missing", schema.mapping, r, "n", "w", required=True)
    refused("w: key 'l': must be a JSON object, got list [1]", schema.mapping, r, "l", "w")
    assert schema.sequence(r, "l", "w") == [1] and schema.sequence(r, "n", "w") == []
    refused("w: key 'm': must be a JSON list, got dict {'a': 1}", schema.sequence, r, "m", "w")
    shown = repr(list(range(30)))[:37] + "..."
    refused(f"w: key 'long': must be a JSON object, got list {shown}", schema.mapping, r, "long", "w")
    assert len(shown) == 40


# ---- files: the messages of each refusal --------------------------------------------------------------------

def test_file_level_refusals(tmp_path):
    refused(f"--trace: no such file {str(tmp_path / 'none.csv')!r}", files.read_text, tmp_path / "none.csv", "--trace")
    empty = tmp_path / "e.csv"
    empty.write_text("\n")
    refused(f"t: {empty} has no header line", files.read_csv, empty, "t")
    empty.write_text("a,,b\n1,2,3\n")
    refused(f"t {empty} line 1: column 2 has no name", files.read_csv, empty, "t")
    empty.write_text("a, b,a ,b\n1,2,3,4\n")
    refused(f"t {empty} line 1: column 'a' appears twice", files.read_csv, empty, "t")
    empty.write_text(" a , b \n1,2\n")
    assert files.read_csv(empty, "t")[0] == ["a", "b"]
    bad = tmp_path / "b.json"
    bad.write_text('{"a": [1, 2,]}')
    refused(f"x {bad}: not valid JSON (Expecting value at line 1 column 13)", files.read_json, bad, "x")
    assert files.nonfinite_path(float("nan")) == "the value" and files.nonfinite_path([1.0, {"k": 2.0}]) is None


# ---- traces and length columns ------------------------------------------------------------------------------

def test_trace_refusals_name_file_line_and_column(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_len\n0,5\n")
    refused(f"--trace: {path} has no column 'output_len' (needs arrival_s, prompt_len, output_len; found "
            "arrival_s, prompt_len)", read_trace, str(path), 10)
    path.write_text("arrival_s,prompt_len,output_len\n")
    refused(f"--trace: {path} has no data rows", read_trace, str(path), 10)
    path.write_text("arrival_s,prompt_len,output_len\n0,5,1\n0,5,1\n0,5,1\n")
    assert len(read_trace(str(path), 3)) == 3
    refused(f"--trace: {path} has 3 rows; at most 2 requests are simulated", read_trace, str(path), 2)
    path.write_text("arrival_s,prompt_len,output_len\n0,5,1\n-0.5,5,1\n")
    refused(f"--trace {path} line 3: key 'arrival_s': must be >= 0, got -0.5", read_trace, str(path), 9)
    path.write_text("arrival_s,prompt_len,output_len\n0,0,1\n")
    refused(f"--trace {path} line 2: key 'prompt_len': must be >= 1, got 0", read_trace, str(path), 9)
    path.write_text(f"arrival_s,prompt_len,output_len\n0,{MAX_REQUEST_TOKENS},{MAX_REQUEST_TOKENS + 1}\n")
    refused(f"--trace {path} line 2: key 'output_len': {MAX_REQUEST_TOKENS + 1:,} is too large "
            f"(at most {MAX_REQUEST_TOKENS:,})", read_trace, str(path), 9)
    jsonl = tmp_path / "t.ndjson"
    jsonl.write_text(json.dumps({"arrival_s": 0.25, "prompt_len": 4, "output_len": "3"}) + "\n")
    refused(f"--trace {jsonl} line 1: key 'output_len': '3' is not a whole number", read_trace, str(jsonl), 9)
    jsonl.write_text(json.dumps({"arrival_s": 0.25, "prompt_len": 4, "output_len": 3.0}) + "\n")
    assert read_trace(str(jsonl), 9) == [(0.25, 4, 3)]


def test_length_column_refusals(tmp_path):
    path = tmp_path / "l.csv"
    path.write_text("a,b\n3,x\n")
    refused(f"--output-len: {path} has no column 'len' (columns: a, b)", read_length_column, str(path), "len",
            "--output-len", 10)
    refused(f"--output-len {path} line 2: key 'b': 'x' is not a whole number", read_length_column, str(path), "b",
            "--output-len", 10)
    path.write_text("a\n3\n4\n")
    assert read_length_column(str(path), "a", "--output-len", 2) == (3, 4)


# ---- NCCL rows and memory-case records ----------------------------------------------------------------------

NCCL = {"collective": "all_reduce", "size_bytes": 1024, "gpus": 2, "backend": "nccl", "ok": True, "time_s": 1e-5}


def _jsonl(tmp_path, *records, name="r.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_nccl_rows(tmp_path):
    good = _jsonl(tmp_path, NCCL, {**NCCL, "ok": False, "time_s": 0, "prediction_error": -0.5, "nodes": 1})
    assert [r["ok"] for r in read_comm_rows(good, ("all_reduce",))] == [True, False]
    where = f"NCCL rows {good} line 1"
    for change, message in (({"time_s": 0}, "key 'time_s': must be > 0, got 0"),
                            ({"collective": "gather"}, "key 'collective': 'gather' is not one of all_reduce"),
                            ({"gpus": 0}, "key 'gpus': must be >= 1, got 0"),
                            ({"nodes": 1.5}, "key 'nodes': 1.5 is not a whole number"),
                            ({"busbw_GBps": -1}, "key 'busbw_GBps': must be >= 0, got -1"),
                            ({"backend": 3}, "key 'backend': 3 is not a string"),
                            ({"ok": "yes"}, "key 'ok': 'yes' is not true or false"),
                            ({"env": []}, "key 'env': must be a JSON object, got list []")):
        path = _jsonl(tmp_path, {**NCCL, **change})
        refused(f"{where}: {message}", read_comm_rows, path, ("all_reduce",))
    empty = _jsonl(tmp_path, name="empty.jsonl")
    refused(f"NCCL rows: {empty} holds no rows", read_comm_rows, empty, ("all_reduce",))
    rows = _jsonl(tmp_path, NCCL, {"kernel": "k", "baseline": "b"})
    refused(f"NCCL rows {rows} line 2: not NCCL rows (no 'collective' key); these look like benchmark rows of "
            "`mlsys bench` (read them with `mlsys bench rows FILE`)", read_comm_rows, rows, ("all_reduce",))
    other = _jsonl(tmp_path, {"a": 1, "b": 2})
    refused(f"NCCL rows {other} line 1: not NCCL rows (no 'collective' key); these look like records with the keys a, b",
            read_comm_rows, other, ("all_reduce",))


TRAIN = {"kind": "train", "model": "m", "case": [1, 2, 3, 4],
         "predicted": {k: 1 for k in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "forward_saved_bytes",
                                      "peak_bytes")},
         "measured": {k: 2 for k in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "forward_saved_bytes",
                                     "peak_bytes")}}


def test_memory_records(tmp_path):
    infer = {"kind": "infer", "model": "m", "case": [1, 2], "predicted": {"weights_bytes": 0, "kv_cache_bytes": 1,
             "peak_bytes": 2}, "measured": {"weights_bytes": 0, "kv_cache_bytes": 1, "peak_bytes": 2}}
    failed = {"kind": "train", "model": "m", "case": [1, 2, 3, 4], "error": "OOM"}
    path = _jsonl(tmp_path, TRAIN, infer, failed)
    assert [r["kind"] for r in read_memory_records(path)] == ["train", "infer", "train"]
    where = f"memory rows {path} line 1"
    for change, message in (({"case": [1, 2]}, "key 'case': must be a list of 4 numbers, got [1, 2]"),
                            ({"case": [1, 2, 3, "4"]}, "key 'case': must be a list of 4 numbers, got [1, 2, 3, '4']"),
                            ({"kind": "eval"}, "key 'kind': 'eval' is not one of train, infer"),
                            ({"measured": None}, "key 'measured': missing")):
        path = _jsonl(tmp_path, {**TRAIN, **change})
        refused(f"{where}: {message}", read_memory_records, path)
    part = _jsonl(tmp_path, {**TRAIN, "predicted": {**TRAIN["predicted"], "peak_bytes": -1}})
    refused(f"{where} predicted: key 'peak_bytes': must be >= 0, got -1", read_memory_records, part)
    nccl = _jsonl(tmp_path, NCCL)
    refused(f"{where}: not memory-case records (no 'kind' key); these look like records with the keys collective, "
            "size_bytes, gpus, backend, ok, time_s", read_memory_records, nccl)


# ---- whole-model rows and benchmark rows --------------------------------------------------------------------

MODEL = {"kernel": "model.forward", "baseline": "roofline", "shape": "b1s128", "dtype": "bf16", "median_ms": 1.5,
         "extra_phase": "prefill", "extra_batch": 1, "extra_seq": 128}


def test_model_row_fields():
    check_model_record(MODEL, "w")
    check_model_record({**MODEL, "median_ms": 0, "error": "OOM"}, "w")   # a failed row carries no times
    check_model_record({"kernel": "triton_matmul", "median_ms": 0}, "w")   # kernel rows: readers.rows' rules
    for change, message in (({"median_ms": 0}, "key 'median_ms': must be > 0, got 0"),
                            ({"extra_phase": "eval"}, "key 'extra_phase': 'eval' is not one of prefill, decode, train"),
                            ({"extra_seq": 0}, "key 'extra_seq': must be >= 1, got 0"),
                            ({"extra_tp": 1.5}, "key 'extra_tp': 1.5 is not a whole number"),
                            ({"extra_mode": "jit"}, "key 'extra_mode': 'jit' is not one of graph, eager"),
                            ({"extra_model": 7}, "key 'extra_model': 7 is not a string"),
                            ({"extra_overrides": "a=1"}, "key 'extra_overrides': must be a list of KEY=VALUE strings, "
                                                         "got 'a=1'"),
                            ({"extra_overrides": ["a=1", 2]}, "key 'extra_overrides': must be a list of KEY=VALUE "
                                                              "strings, got ['a=1', 2]"),
                            ({"extra_ops": "x"}, "key 'extra_ops': must be a JSON object, got str 'x'")):
        refused(f"w: {message}", check_model_record, {**MODEL, **change}, "w")
    check_model_record({**MODEL, "extra_overrides": ["a=1"], "extra_ops": {"linears": {"q": {"measured_s": 0}}}}, "w")
    refused("w extra_ops.linears: key 'q': must be a JSON object, got 3", check_model_record,
            {**MODEL, "extra_ops": {"linears": {"q": 3}}}, "w")
    refused("w extra_ops.kinds.norm: key 'measured_s': must be >= 0, got -1", check_model_record,
            {**MODEL, "extra_ops": {"kinds": {"norm": {"measured_s": -1}}}}, "w")
    text = {k: str(v) for k, v in MODEL.items()}
    check_model_record({**text, "extra_overrides": "a=1", "extra_ops": "{}"}, "w", text=True)   # CSV: text fields
    refused("w: key 'extra_batch': 'one' is not a whole number", check_model_record, {**text, "extra_batch": "one"},
            "w", True)


def test_row_fields():
    row = {"kernel": "k", "baseline": "b", "shape": "s", "dtype": "d"}
    check_row({**row, "ok": "TRUE ", "speedup": "2"}, "w", text=True)
    for change, message in (({"variant": 3}, "key 'variant': 3 is not a string"),
                            ({"ok": 2}, "key 'ok': 2 is not true or false"),
                            ({"rel_err": float("nan")}, "key 'rel_err': nan is not a finite number"),
                            ({"extra": [1]}, "key 'extra': must be a JSON object, got list [1]")):
        refused(f"w: {message}", check_row, {**row, **change}, "w")
    refused("w: key 'ok': 'yes' is not true or false", check_row, {**row, "ok": "yes"}, "w", True)
    refused("w: not a benchmark row (no 'dtype' key; keys: kernel, baseline, shape)", check_row,
            {"kernel": "k", "baseline": "b", "shape": "s"}, "w")
    refused("w: not a benchmark row (no 'kernel' key; keys: kind, model, predicted); these look like memory-case records of "
            "`mlsys bench memory` (`mlsys bench report DIR --family memory`)", check_row,
            {"kind": "train", "model": "m", "predicted": {}}, "w")
    refused("w: not a benchmark row (no 'kernel' key; keys: none)", check_row, {}, "w")


def test_measured_folder_skips_foreign_files_and_names_bad_rows(tmp_path):
    refused(f"--measured {tmp_path / 'no'}: no such folder", rows_files, tmp_path / "no")
    (tmp_path / "sub").mkdir()
    _jsonl(tmp_path, {"kernel": "k", "baseline": "b", "shape": "s", "dtype": "d", "median_ms": 1.0}, name="a.jsonl")
    _jsonl(tmp_path, NCCL, name="sub/nccl.jsonl")
    (tmp_path / "sub" / "b.csv").write_text("kernel,baseline,shape,dtype\nk,b,t,d\n")
    (tmp_path / "notes.txt").write_text("ignored")
    assert [p.name for p in rows_files(tmp_path)] == ["a.jsonl", "b.csv", "nccl.jsonl"]
    read = measured_records(tmp_path)
    assert [(p.name, [line.record["shape"] for line in lines]) for p, lines in read] == [("a.jsonl", ["s"]),
                                                                                         ("b.csv", ["t"])]
    bad = _jsonl(tmp_path, {"kernel": "k", "baseline": "b", "shape": "s", "dtype": "d"},
                 {"kernel": "k", "baseline": "b", "shape": "s", "dtype": "d", "flops": -5}, name="sub/c.jsonl")
    with pytest.raises(MlsysError, match=re.escape(f"--measured {bad} line 2: key 'flops': must be >= 0, got -5")):
        measured_records(tmp_path)


def test_measured_folder_file_cap_and_cache(tmp_path, monkeypatch):
    from mlsyscalc.readers import measured

    for name in ("a.jsonl", "b.jsonl"):
        _jsonl(tmp_path, {"kernel": "k", "baseline": "b", "shape": name, "dtype": "d"}, name=name)
    monkeypatch.setattr(measured, "MAX_FILES", 2)
    assert len(rows_files(tmp_path)) == 2
    monkeypatch.setattr(measured, "MAX_FILES", 1)
    refused(f"--measured {tmp_path}: 2 files; at most 1 are read", rows_files, tmp_path)
    monkeypatch.undo()
    first = measured_records(tmp_path)
    assert measured_records(tmp_path) is first   # the same files, sizes and times: read once
    _jsonl(tmp_path, {"kernel": "k", "baseline": "b", "shape": "new", "dtype": "d"}, name="c.jsonl")
    assert [p.name for p, _ in measured_records(tmp_path)] == ["a.jsonl", "b.jsonl", "c.jsonl"]
