"""`--format csv` of every command: one table pandas reads, whose numbers equal the JSON's."""

from __future__ import annotations

import io
import json
import math

import pytest
from click.testing import CliRunner

from mlsyscalc.cli.main import cli

from .cli_cases import COMMANDS, invocations

pd = pytest.importorskip("pandas")

RECORDS = {"models": "models", "gpus": "gpus", "clusters": "clusters"}  # commands with one row per item


def test_sweep_csv_has_one_row_per_point():
    """A sweep's CSV is tidy: a header, then one row per swept value, the swept parameter first."""
    text = _run(["roofline", "llama2-7b", "--phase", "decode", "--context", "1024", "--sweep", "batch=1,8,64"], "csv")
    frame = pd.read_csv(io.StringIO(text))
    assert list(frame["batch"]) == [1, 8, 64] and frame.columns[0] == "batch"
    assert set(frame["model"]) == {"llama2-7b"} and (frame["tokens_per_s"].diff().dropna() > 0).all()


def _leaves(value, prefix=""):
    """Independent oracle: every scalar of the JSON with its dotted path."""
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in _leaves(v, f"{prefix}.{k}" if prefix else k)]
    if isinstance(value, list):
        return [leaf for i, v in enumerate(value) for leaf in _leaves(v, f"{prefix}.{i}" if prefix else str(i))]
    return [(prefix, value)]


def _same(cell, expected) -> bool:
    if expected is None or expected == "":  # both are an empty CSV cell
        return cell is None or (isinstance(cell, float) and math.isnan(cell)) or cell == ""
    if isinstance(expected, bool):
        return str(cell).lower() == str(expected).lower()
    if isinstance(expected, (int, float)):
        return float(cell) == pytest.approx(expected, rel=1e-15, abs=0)
    return str(cell) == str(expected)


def _run(args, fmt):
    result = CliRunner().invoke(cli, [*args, "--format", fmt])
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("index", range(len(COMMANDS)), ids=[" ".join(c[:3]) for c in COMMANDS])
def test_csv_is_one_tidy_table_equal_to_json(index, tmp_path):
    args = invocations(tmp_path)[index]
    data = json.loads(_run(args, "json"))
    data.pop("notes", None)
    data.pop("answer", None)  # the answer lines are prose for people; CSV is the numbers
    text = _run(args, "csv")
    assert not any(line.startswith("#") for line in text.splitlines())
    frame = pd.read_csv(io.StringIO(text), keep_default_na=False, na_values=[""], dtype=str)
    records = RECORDS.get(args[-1]) or RECORDS.get(args[0]) if len(data) == 1 else None
    records = "sweep" if "--sweep" in args else records  # one row per swept point
    if records:
        items = data[records]
        assert len(frame) == len(items)
        context = {k: v for k, v in data.items() if k != records and not isinstance(v, (dict, list))}
        for (_, row), item in zip(frame.iterrows(), items):
            for key, value in context.items():  # the result's plain values repeat on every row
                assert _same(None if pd.isna(row[key]) else row[key], value), (key, row[key], value)
            for key, value in _leaves(item):
                column = key if key in frame.columns else key.rsplit(".", 1)[0]  # lists joined with ';'
                if column == key:
                    assert _same(None if pd.isna(row[key]) else row[key], value), (key, row[key], value)
                else:
                    assert str(value) in str(row[column]).split(";")
        return
    assert list(frame.columns) == ["key", "value"]
    leaves = _leaves(data)
    assert len(frame) == len(leaves)
    for (key, cell), (path, value) in zip(frame.itertuples(index=False), leaves):
        assert key == path
        assert _same(None if pd.isna(cell) else cell, value), (key, cell, value)


def test_memory_train_csv_is_numeric_in_base_units(tmp_path):
    text = _run(["memory", "train", "llama2-7b"], "csv")
    frame = pd.read_csv(io.StringIO(text)).set_index("key")["value"]
    total = int(frame["total_bytes"])
    parts = [int(frame[f"breakdown.{p}_bytes"]) for p in ("weights", "gradients", "optimizer", "activations",
                                                            "temporaries")]
    assert total == sum(parts)  # raw bytes, not '12.55 GiB'
    assert int(frame["breakdown.weights_bytes"]) == 2 * 6_738_415_616  # bf16 weights of Llama-2-7B
