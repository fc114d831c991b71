"""Edge cases of `mlsys scaling` found in review: each was a crash or a misleading error before its fix."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from mlsyscalc.calc.scaling.calculators import optimal
from mlsyscalc.calc.scaling.fit import parse_runs
from mlsyscalc.cli.main import cli
from mlsyscalc.errors import MlsysError


@pytest.mark.parametrize("kind, value", [("params", 1e200), ("tokens", 1e300), ("params", 1e-300), ("tokens", 1e-300)])
def test_optimal_out_of_float_range_is_a_clear_error(kind, value):
    with pytest.raises(MlsysError, match=f"{kind}.*out of range"):
        optimal("approach1", **{kind: value})


@pytest.mark.parametrize("flag, value", [("--params", "1e200"), ("--tokens", "1e-300")])
def test_optimal_out_of_range_exits_2_with_one_line(flag, value):
    result = CliRunner().invoke(cli, ["scaling", "optimal", flag, value])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and "out of range" in result.output


def test_fit_csv_headers_with_spaces_capitals_or_a_bom():
    rows = [{" Params": "1B", "TOKENS ": "20B", "loss": "2.5"}, {"\ufeffparams": "2B", " tokens": "40B", "Loss": "2.4"}]
    runs = parse_runs(rows)
    assert runs.params == (1e9, 2e9) and runs.tokens == (20e9, 40e9) and runs.loss == (2.5, 2.4)


def test_fit_cli_reads_an_excel_csv_with_a_bom(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text("params,tokens,loss\n1e8,1e9,3.5\n", encoding="utf-8-sig")
    result = CliRunner().invoke(cli, ["scaling", "fit", str(path)])
    assert result.exit_code == 2
    assert "need at least 8 runs" in result.output  # the header was read: the error is about the row count
