"""The one renderer and its helpers, by hand: engineering suffixes at every boundary, the cell of each
value type, the markdown layout, the last-guard messages, CSV in both shapes, and the 80-column
rules (widths, which column goes first, the line that names what was dropped, the stacked form).

Every expected string is written out here; none is produced by the code under test.
"""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from mlsyscalc.cli import render
from mlsyscalc.cli.render_csv import to_csv
from mlsyscalc.cli.render_rich import _dropped_line, column_widths, drop_order, fitting_columns
from mlsyscalc.cli.render_units import eng, eng_unit, gib, number, percent, plain_text, seconds
from mlsyscalc.errors import MlsysError


# ---- engineering suffixes -----------------------------------------------------------------------------------

@pytest.mark.parametrize("value,text", [
    (1.0, "1"), (0.5, "500m"), (999.0, "999"), (1000.0, "1k"), (999.96, "1k"), (123456.0, "123k"),
    (-70181.3, "-70.2k"), (2.5e6, "2.5M"), (7e9, "7G"), (1.4e12, "1.4T"), (3e15, "3P"), (4e18, "4E"),
    (5e21, "5Z"), (6e24, "6Y"), (7e27, "7R"), (8e30, "8Q"), (1.5e33, "1.5x10^33"), (-2.25e40, "-2.25x10^40"),
    (1.5e-5, "15u"), (2e-9, "2n"), (3e-12, "3p"), (1e-15, "1f"), (6e-16, "0.6f"), (4e-16, "0"), (0.0, "0"),
    (float("inf"), "inf"), (float("nan"), "nan"), (0.001, "1m"), (0.000999, "999u"),
])
def test_eng_at_each_prefix(value, text):
    assert eng(value) == text


def test_eng_digits_and_units():
    assert eng(123456.0, 4) == "123.5k" and eng(1.0, 4) == "1" and eng(12.345, 2) == "12"
    assert eng_unit(1500.0, "B") == "1.5 kB" and eng_unit(0.0, "FLOP") == "0 FLOP"
    assert eng_unit(-2e-3, "s") == "-2 ms" and eng_unit(42.0, "tok/s") == "42 tok/s"
    assert eng_unit(8.1e4, "tok/s") == "81 ktok/s"


@pytest.mark.parametrize("value,text", [
    (0.001, "0.001"), (9999.0, "9999"), (1e4, "10k"), (12345.6, "12.35k"), (0.000999, "999u"), (-5.5, "-5.5"),
    (0.0, "0"), (float("inf"), "inf"), (-1234.56, "-1235"), (0.012345, "0.01235"), (1.5e-7, "150n"),
])
def test_number_cells_keep_four_digits(value, text):
    assert number(value) == text


@pytest.mark.parametrize("value,text", [
    (3 * 86400, "3 days"), (172800.0, "2 days"), (172799.0, "48 h"), (3600.0, "1 h"), (3599.0, "3599 s"),
    (1.0, "1 s"), (0.0, "0 s"), (0.999, "999 ms"), (1e-3, "1 ms"), (9.99e-4, "999 us"), (1e-6, "1 us"),
    (5e-7, "500 ns"), (-0.5, "-500 ms"), (11.78, "11.8 s"), (5400.0, "1.5 h"),
])
def test_seconds_pick_the_unit_at_each_boundary(value, text):
    assert seconds(value) == text


@pytest.mark.parametrize("value,text", [
    (2**40, "1 TiB"), (1.5 * 2**40, "1.5 TiB"), (1023 * 2**30, "1023 GiB"), (2**30, "1 GiB"), (1023 * 2**20, "1023 MiB"),
    (0, "0 MiB"), (512 * 2**10, "0.5 MiB"), (61.2 * 2**30, "61.2 GiB"), (10**9, "954 MiB"), (80e9, "74.5 GiB"),
])
def test_gib_is_binary(value, text):
    assert gib(value) == text


@pytest.mark.parametrize("fraction,text", [
    (0.0, "0%"), (0.05, "5.0%"), (0.0999, "10.0%"), (0.1, "10%"), (0.123, "12%"), (1.0, "100%"), (-0.5, "-50%"),
    (0.004, "0.4%"), (1.55, "155%"),
])
def test_percent(fraction, text):
    assert percent(fraction) == text


def test_plain_text_rewrites_only_numbers_in_scientific_form():
    assert plain_text("1e9 and +1E9 and 1e-3") == "10^9 and 10^9 and 10^-3"
    assert plain_text("2.5E-3 s, -4.2e+06 B") == "2.5m s, -4.2M B"
    assert plain_text("x1e9 1e9x 1.5e3.2 fp8e4m3") == "x1e9 1e9x 1.5e3.2 fp8e4m3"


# ---- cells, markdown, the guard -----------------------------------------------------------------------------

def test_cells_by_type():
    assert [render._cell(v) for v in (None, True, False, 1234567, 0.5, 12345.6, "7e+04 rows", "a|b")] == [
        "", "yes", "no", "1,234,567", "0.5", "12.35k", "70k rows", "a|b"]


def test_markdown_layout():
    output = render.Output({"x": 1}, (render.table("title 1e9", ["a", "b"], [["r", 2.5], ["s", None]]),
                                      render.table("t2", ["c"], [[True]])), ("note 1e3", "second"))
    assert render._markdown(output, ["answer one", "answer two"]) == (
        "**answer one**  \n**answer two**  \n\n### title 10^9\n\n| a | b |\n| :--- | :--- |\n| r | 2.5 |\n| s |  |\n\n"
        "### t2\n\n| c |\n| :--- |\n| yes |\n\n- note 10^3\n- second\n")
    assert render._markdown(render.Output({}, ()), []) == "\n"


def test_the_result_guard_names_the_key_path():
    with pytest.raises(MlsysError, match=r"^these inputs give a negative parts\[1\]\.weights_bytes \(-2\); check the sizes"):
        render.check_numbers({"parts": [{"weights_bytes": 1}, {"weights_bytes": -2}]})
    with pytest.raises(MlsysError, match=r"^these inputs give a non-finite a\.step_s \(inf\)"):
        render.check_numbers({"a": {"step_s": float("inf")}})
    with pytest.raises(MlsysError, match="negative tokens"):
        render.check_numbers({"tokens": -1})
    render.check_numbers({"margin_bytes": -1, "count": -3, "ok": True, "name": "x", "log_loss": -2.0, "flops": 0})


def test_only_list_and_jsonable():
    assert render._only_list({"gpus": [{"a": 1}]}) == "gpus"
    assert render._only_list({"gpus": [{"a": 1}], "n": 1}) is None and render._only_list({"gpus": []}) is None
    assert render._only_list({"gpus": [1, 2]}) is None
    assert render._jsonable({"a": (1.0, float("nan")), 2: {"b": float("-inf")}}) == {"a": [1.0, None], "2": {"b": None}}


def _command(output: render.Output):
    """`mlsys params` stand-in: a group named like the CLI whose one command emits output."""
    @click.group()
    def mlsys():
        pass

    @mlsys.command()
    @render.output_options
    def params(fmt, as_json):
        render.emit(output, fmt, as_json)
    return lambda args: CliRunner().invoke(mlsys, ["params", *args], env={"COLUMNS": "80"})


def test_emit_formats_and_brief():
    out = render.Output({"total_params": 10, "active_params": 10}, (render.table("t", ["k", "v"], [["a", 1.5]]),),
                        ("n",))
    run = _command(out)
    data = run(["--json"])
    assert data.exit_code == 0 and data.stdout == (
        '{\n  "total_params": 10,\n  "active_params": 10,\n  "notes": [\n    "n"\n  ],\n  "answer": [\n'
        '    "params: 10 total (10)"\n  ]\n}\n')
    assert run(["--brief"]).stdout == "params: 10 total (10)\n"
    for args in (["--brief", "--json"], ["--brief", "--format", "csv"]):
        result = run(args)
        assert result.exit_code == 2 and "--brief prints the answer lines only" in result.stderr
    assert run(["--format", "csv"]).stdout == "key,value\ntotal_params,10\nactive_params,10\n"
    table = run([]).stdout.splitlines()
    assert table[0] == "params: 10 total (10)" and table[1] == "t" and "1.5" in table[5] and table[-1] == "- n"
    result = _command(render.Output({"x_bytes": -1.0}))([])
    assert result.exit_code != 0 and isinstance(result.exception, MlsysError)
    assert _command(render.Output({"x_bytes": -1.0}, calculated=False))(["--json"]).stdout == '{\n  "x_bytes": -1.0\n}\n'


def test_width_from_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    assert render._width() == 100
    monkeypatch.setenv("COLUMNS", "30")
    assert render._width() == 40
    monkeypatch.setenv("COLUMNS", "wide")
    assert render._width() == 120   # not a terminal under pytest: the pipe width
    monkeypatch.setenv("COLUMNS", "0")
    assert render._width() == 120


# ---- CSV ----------------------------------------------------------------------------------------------------

def test_csv_long_form_and_records():
    data = {"model": "m", "n": 3, "x_s": 0.1, "ok": True, "none": None, "parts": {"a_bytes": 1, "b": [2, 3]}}
    assert to_csv(data, None) == ("key,value\nmodel,m\nn,3\nx_s,0.1\nok,true\nnone,\nparts.a_bytes,1\nparts.b.0,2\n"
                                  "parts.b.1,3\n")
    sweep = {"model": "m", "gpu": "g", "meta": {"k": 1}, "points": [
        {"rate": 1.0, "tags": ["a", "b"], "peak": {"bf16": 2.5}, "model": "own"},
        {"rate": 2.0, "extra": 7, "list": [{"q": 1}]}]}
    assert to_csv(sweep, "points") == (
        "rate,tags,peak.bf16,model,gpu,extra,list.0.q\n1.0,a;b,2.5,own,g,,\n2.0,,,m,g,7,1\n")


# ---- 80 columns ---------------------------------------------------------------------------------------------

def test_column_widths_by_hand():
    columns, rows = ["name", "value"], [["alpha beta", 12345], ["g", 7]]
    cells = [["alpha beta", "12,345"], ["g", "7"]]
    # natural widths: "alpha beta" 10, "value"/"12,345" 6; borders 3 per column + 1 = 7
    assert column_widths(columns, rows, cells, 10 + 6 + 7) == [10, 6]
    assert column_widths(columns, rows, cells, 10 + 6 + 7, natural=True) == [10, 6]
    assert column_widths(columns, rows, cells, 22, natural=True) is None
    assert column_widths(columns, rows, cells, 22) == [9, 6]            # text wraps, the number stays whole
    assert column_widths(columns, rows, cells, 5 + 6 + 7) == [5, 6]     # down to the longest word
    assert column_widths(columns, rows, cells, 5 + 6 + 6) is None
    assert column_widths(columns, rows, cells, 40) == [10, 6]           # never wider than the widest cell
    long_word = [["x" * 30, 1]]
    assert column_widths(["n", "v"], long_word, [["x" * 30, "1"]], 16 + 1 + 7) == [16, 1]  # words fold past 16


def test_drop_order_and_the_line_under_the_table():
    columns = ["name", "same", "empty", "a", "b", "c"]
    cells = [["r1", "4", "", "1", "2", "3"], ["r2", "4", "", "5", "6", "7"]]
    order, free = drop_order(columns, cells)
    assert (order, free) == ([2, 1, 5, 4, 3], 2)   # empty first, then the constant one, then from the right
    assert drop_order(columns, cells, ["c", "b"]) == ([2, 1, 3, 4, 5], 2)   # unranked first, least important next
    assert drop_order(columns, cells[:1])[1] == 1   # one row: only an empty column loses nothing
    assert _dropped_line(columns, cells, [0, 3, 4], 80) == (
        "every row: same 4; not shown at 80 columns: c (a wider terminal, --format markdown or --json shows them)")
    assert _dropped_line(columns, cells, [0, 1, 3, 4, 5], 80) == ""
    assert _dropped_line(columns, cells, [0, 3, 4, 5], 80) == "every row: same 4"


def test_fitting_columns_drops_the_fewest():
    columns = ["name", *(f"m{i}" for i in range(1, 7))]
    rows = [["row", *(100000 + i for i in range(6))], ["row2", *(200000 + i for i in range(6))]]
    cells = [[render._cell(v) for v in row] for row in rows]
    # each number is 7 characters ("100,000"), each column 3 more; the name column 4 + 3, plus 1
    full = 4 + 6 * 7 + 7 * 3 + 1
    assert fitting_columns(columns, rows, cells, full) == (list(range(7)), [4, *([7] * 6)])
    assert fitting_columns(columns, rows, cells, full - 1)[0] == [0, 1, 2, 3, 4, 5]
    assert fitting_columns(columns, rows, cells, full - 10)[0] == [0, 1, 2, 3, 4, 5]
    assert fitting_columns(columns, rows, cells, full - 11)[0] == [0, 1, 2, 3, 4]
    assert fitting_columns(columns, rows, cells, 4 + 3 * 7 + 4 * 3 + 1)[0] == [0, 1, 2, 3]   # half of six dropped
    assert fitting_columns(columns, rows, cells, 4 + 3 * 7 + 4 * 3) is None   # more than half: stacked instead


def test_stacked_form_by_hand():
    from mlsyscalc.cli.render_rich import _stacked

    from .test_render_80col import _text

    cells = [["row one", "1", "", "333"], ["row two", "4", "5", "6"]]
    text = _text(_stacked("title", ["name", "a", "b", "c"], cells, 80))
    assert text.splitlines() == ["title", "name: row one", "  a: 1   c: 333", "name: row two", "  a: 4   b: 5   c: 6"]
    narrow = _text(_stacked("t", ["name", "alpha", "beta"], [["r", "1" * 8, "2" * 8]], 20), 20)
    assert narrow.splitlines() == ["t", "name: r", "  alpha: 11111111", "  beta: 22222222"]   # pairs never split


# ---- the notes every prediction can carry ------------------------------------------------------------------------

def test_datasheet_note_only_off_the_measured_cards(run_cli, tmp_path):
    serve = ("serve", "llama2-7b", "--requests", "10", "--rate", "2", "--gpu")
    b200 = run_cli.json(*serve, "b200")
    note = ("B200: no measured ceiling; a datasheet prediction (its peaks x the default efficiencies, measured on "
            "H100/H200; --calibration with a `mlsys bench ceilings` file of the card replaces them)")
    assert note in b200["notes"]
    for gpu in ("h100", "h200"):
        assert not any("no measured ceiling" in n for n in run_cli.json(*serve, gpu)["notes"])


def test_held_out_interval_beside_the_train_step(run_cli):
    import json
    from pathlib import Path

    data = run_cli.json("train", "qwen2.5-0.5b", "--gpus", "8", "--global-batch", "64")
    spec = json.loads((Path(__file__).resolve().parents[1] / "model_specs" / "intervals.json").read_text())["intervals"]
    train, step = spec["train"], data["step_time_s"]
    got = data["interval"]
    assert got["low_s"] == pytest.approx(step * (1 + train["low"])) and got["high_s"] == pytest.approx(step * (1 + train["high"]))
    assert got["median_s"] == pytest.approx(step * (1 + train["median"]))
    assert (got["runs"], got["coverage"], got["low_rel"], got["high_rel"]) == (train["runs"], train["coverage"], train["low"],
                                                                              train["high"])
    text = (f"step_time_s {step:.3g} s, likely {step * (1 + train['low']):.3g}-{step * (1 + train['high']):.3g} s: "
            f"{100 * train['coverage']:.0f}% of {train['runs']} unseen runs took {100 * train['low']:+.0f}% / "
            f"{100 * train['high']:+.0f}% of the prediction ({train['note']}; model_specs/intervals.json)")
    assert text in data["notes"]


def test_a_command_without_a_held_out_set_says_so():
    from mlsyscalc.cli.intervals import with_interval

    out = with_interval(render.Output({"a": 1}, (), ("n",)), "no_such_key", 2.0, label="ttft")
    assert out.notes == ("n", "ttft: no held-out set scores this prediction (no_such_key), so no range is given")
    assert out.data == {"a": 1}
