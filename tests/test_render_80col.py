"""Every command's table at 80 columns: no line wider than the terminal, no number cut."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from mlsyscalc.cli import render
from mlsyscalc.cli.main import cli
from mlsyscalc.cli.render_rich import fitting_columns, rich_table

from .cli_cases import COMMANDS, invocations


def _numbers(output: render.Output, width: int) -> list[str]:
    """Every number of every table, as printed: in a shown column, as a dropped column's one value
    ("zero 1"), or the name of a dropped column the line under the table lists."""
    out = []
    for tab in output.tables:
        cells = [[render._cell(v) for v in row] for row in tab.rows]
        fitted = fitting_columns(tab.columns, tab.rows, cells, width, tab.importance)
        keep = fitted[0] if fitted else range(len(tab.columns))
        for row in tab.rows:
            for i, value in enumerate(row):
                if not isinstance(value, (int, float)) or isinstance(value, bool):
                    continue
                if i in keep:
                    out.append(render._cell(value))
                elif len(tab.rows) > 1 and len({r[i] for r in cells}) == 1:
                    out.append(f"{tab.columns[i]} {render._cell(value)}")
                else:
                    out.append(tab.columns[i])
    return out


@pytest.mark.parametrize("index", range(len(COMMANDS)), ids=[" ".join(c[:3]) for c in COMMANDS])
@pytest.mark.parametrize("width", [80, 100])
def test_every_number_whole_at_80_columns(index, width, tmp_path, monkeypatch):
    args = invocations(tmp_path)[index]
    seen = []
    rich = render._rich
    monkeypatch.setattr(render, "_rich", lambda output, *answer: (seen.append(output), rich(output, *answer)))
    monkeypatch.setenv("COLUMNS", str(width))
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "…" not in text  # rich's truncation mark
    assert max(len(line) for line in text.splitlines()) <= width
    flowing = " ".join(text.split())  # the line under a table wraps at spaces
    for number in _numbers(seen[0], width):
        assert number in text or number in flowing, f"{number!r} cut in `mlsys {' '.join(args)}`:\n{text}"
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


def _text(renderable, width: int = 80) -> str:
    from rich.console import Console

    console = Console(width=width, record=True)
    console.print(renderable)
    return console.export_text()


PLAN_COLUMNS = ["#", "tp", "pp", "split", "dp", "cp", "ep", "etp", "vp", "mb", "m", "zero", "recompute", "step s",
                "MFU", "memory"]
PLAN_ROWS = [[i, 2, 4, "even", 1, 8, 1, 2, vp, 1, 128, 1, "none", 14.18 + i / 10, 0.5245 - i / 100, f"{64 - i}.92 GiB"]
             for i, vp in enumerate((2, 4, 5, 1, 10), 1)]


def _header(text: str) -> list[str]:
    """The column names of the first table in text (one header line each)."""
    line = next(line for line in text.splitlines() if line.startswith("┃"))
    return [cell.strip() for cell in line.strip("┃").split("┃")]


def test_wide_table_drops_columns_that_lose_nothing_and_states_them():
    text = _text(rich_table("plan", PLAN_COLUMNS, PLAN_ROWS, render._cell, 80))
    assert max(len(line) for line in text.splitlines()) <= 80
    assert _header(text) == ["#", "tp", "pp", "split", "dp", "cp", "ep", "etp", "vp", "step s", "MFU", "memory"]
    assert "every row: mb 1, m 128, zero 1, recompute none" in " ".join(text.split())
    assert "63.92 GiB" in text  # on one line: nothing wraps once the constant columns are gone
    wide = _text(rich_table("plan", PLAN_COLUMNS, PLAN_ROWS, render._cell, 160), 160)
    assert "every row" not in wide and _header(wide) == PLAN_COLUMNS  # a wide terminal keeps every column


def test_informative_columns_go_from_the_right_unless_ranked():
    columns = ["name", *(f"m{i}" for i in range(1, 13))]
    rows = [["a", *(1000.5 + i + j for i in range(12))] for j in range(3)]
    right = _text(rich_table("t", columns, rows, render._cell, 80))
    kept = _header(right)
    assert kept == columns[:len(kept)] and len(kept) < len(columns)
    assert f"not shown at 80 columns: {', '.join(columns[len(kept):])} " in " ".join(right.split())
    ranked = _text(rich_table("t", columns, rows, render._cell, 80, importance=["m12", "m11"]))
    assert _header(ranked)[-2:] == ["m11", "m12"] and len(_header(ranked)) == len(kept)


def test_too_wide_even_after_dropping_half_goes_stacked():
    columns = ["name", *(f"m{i}" for i in range(1, 13))]
    rows = [["a", *(123_456_789_012 + i + j for i in range(12))] for j in range(3)]  # ints print whole
    text = _text(rich_table("t", columns, rows, render._cell, 80))
    assert "┃" not in text and "name: a" in text and "m12: " in text


def test_title_wraps_at_spaces_never_inside_a_word():
    title = "llama3-70b on 64 x H100-SXM (hgx-h100), seq 8192, global batch 128: 42,180 layouts timed, 12,058 fit"
    text = _text(rich_table(title, ["quantity", "value"], [["step", 1.5]], render._cell, 80))
    words = [word for line in text.splitlines()[:3] for word in line.split()]
    assert words[:len(title.split())] == title.split()
