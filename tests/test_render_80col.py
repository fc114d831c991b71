"""Every command's table at 80 columns: no line wider than the terminal, no number cut."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from mlsyscalc.cli import render
from mlsyscalc.cli.main import cli
from mlsyscalc.cli.render_rich import rich_table

from .cli_cases import COMMANDS, invocations


def _numbers(output: render.Output) -> list[str]:
    return [render._cell(v) for tab in output.tables for row in tab.rows for v in row
            if isinstance(v, (int, float)) and not isinstance(v, bool)]


@pytest.mark.parametrize("index", range(len(COMMANDS)), ids=[" ".join(c[:3]) for c in COMMANDS])
@pytest.mark.parametrize("width", [80, 100])
def test_every_number_whole_at_80_columns(index, width, tmp_path, monkeypatch):
    args = invocations(tmp_path)[index]
    seen = []
    rich = render._rich
    monkeypatch.setattr(render, "_rich", lambda output: (seen.append(output), rich(output)))
    monkeypatch.setenv("COLUMNS", str(width))
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "…" not in text  # rich's truncation mark
    assert max(len(line) for line in text.splitlines()) <= width
    for number in _numbers(seen[0]):
        assert number in text, f"{number!r} cut in `mlsys {' '.join(args)}`:\n{text}"
    assert seen[0].tables


def test_wide_table_goes_stacked_and_keeps_numbers():
    from rich.console import Console

    columns = ["kernel", "dtype", "shape", "variant", "ok", "rel_err", "median_ms", "baseline_median_ms",
               "tflops_per_s", "GBps", "speedup", "error"]
    rows = [["matmul", "bf16", "8192x8192x8192", "persistent", True, 1.234e-3, 1.5432, 1.6012, 712.34, 1234.5,
             1.0376, None]] * 3
    for width in (80, 120):
        console = Console(width=width, record=True)
        console.print(rich_table("bench", columns, rows, render._cell, width))
        text = console.export_text()
        assert max(len(line) for line in text.splitlines()) <= width
        for value in rows[0]:
            if isinstance(value, float):
                assert render._cell(value) in text


def test_narrow_table_stays_a_table():
    from rich.console import Console

    console = Console(width=80, record=True)
    console.print(rich_table("t", ["quantity", "value"], [["forward", 29_261_612_187_648]], render._cell, 80))
    text = console.export_text()
    assert "┃ quantity" in text and "29,261,612,187,648" in text
