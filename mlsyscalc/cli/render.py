"""The one renderer: every command builds an `Output` and hands it here.

`Output.data` is the JSON contract (raw numbers in base units, the unit in the key name);
`Output.tables` are the human views of the same numbers; `Output.notes` carry the conventions
and assumptions behind them, printed under tables and included in JSON as `notes`. The answer
lines (`cli/answers.py`, from the JSON payload) come first in table and markdown output, are
`answer` in JSON, and are all that `--brief` prints. Human output writes numbers with engineering
suffixes (`cli/render_units.py`), never in scientific notation.
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import click

from ..report.markdown import markdown_table
from ..errors import MlsysError
from .render_units import number, plain_text

FORMATS = ("table", "json", "csv", "markdown")


@dataclass(frozen=True)
class Table:
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    importance: tuple[str, ...] | None = None  # columns most important first: a narrow terminal drops the others first


@dataclass(frozen=True)
class Output:
    data: dict[str, Any]
    tables: tuple[Table, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    records: str | None = None  # a key of data holding a list of objects: CSV has one row per item
    calculated: bool = True  # a calculator's result: check_numbers refuses NaN/inf/negatives (not measurements)


def table(title: str, columns: list[str] | tuple[str, ...], rows: list[list[Any]] | list[tuple],
          importance: list[str] | tuple[str, ...] | None = None) -> Table:
    """A table; importance (column names, most important first) decides what a narrow terminal drops first."""
    return Table(title, tuple(columns), tuple(tuple(r) for r in rows), None if importance is None else tuple(importance))


BRIEF = "mlsyscalc.brief"  # ctx.meta key: --brief was given


def _brief(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        from .answers import lookup

        if lookup(_command_name(ctx)) is None:
            raise click.BadParameter("this command has no answer line; use --format", ctx, param)
        ctx.meta[BRIEF] = True


def output_options(func: Callable) -> Callable:
    """Add --format table|json|csv|markdown, the --json shortcut and --brief (the answer lines only)."""
    func = click.option("--brief", is_flag=True, expose_value=False, callback=_brief,
                        help="Print only the answer lines (what the tables add up to).")(func)
    func = click.option("--json", "as_json", is_flag=True, help="Shortcut for --format json.")(func)
    func = click.option(
        "--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
        help="Output format; json carries raw numbers in base units.",
    )(func)
    return func


# Keys whose value is a size, count, time or rate: never negative. Signed quantities (headroom,
# prediction errors, excess loss) carry one of the _SIGNED words in their name.
_UNSIGNED_ENDINGS = ("_bytes", "bytes", "_flops", "flops", "_s", "_params", "params", "tokens", "_GBps", "_Bps")
_SIGNED = ("headroom", "error", "excess", "delta", "diff", "residual", "slack", "margin", "log")


def check_numbers(value: Any, path: str = "") -> None:
    """Raise MlsysError if the result holds NaN, an infinity or a negative size/count/time.

    Inputs are checked where they enter, so this is the last guard: a result like that means the
    inputs, though each in range, make no physical sense together; nothing is printed then.
    """
    if isinstance(value, dict):
        for key, item in value.items():
            check_numbers(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_numbers(item, f"{path}[{i}]")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise MlsysError(f"these inputs give a non-finite {path} ({value}); check the numeric options")
        key = path.rsplit(".", 1)[-1].split("[")[0]
        if value < 0 and key.endswith(_UNSIGNED_ENDINGS) and not any(w in key for w in _SIGNED):
            raise MlsysError(f"these inputs give a negative {path} ({value:g}); check the sizes given")


def _command_name(ctx: click.Context | None) -> str:
    """The command's path under `mlsys`: "memory train", "roofline model", "params"."""
    return " ".join(ctx.command_path.split()[1:]) if ctx is not None else ""


def emit(output: Output, fmt: str, as_json: bool = False) -> None:
    """Render to stdout in the chosen format (after check_numbers on the JSON data)."""
    from .answers import answer

    if output.calculated:
        check_numbers(output.data)
    ctx = click.get_current_context(silent=True)
    lines = answer(_command_name(ctx), _jsonable(output.data))
    fmt = "json" if as_json else fmt
    if ctx is not None and ctx.meta.get(BRIEF):
        if fmt in ("json", "csv"):
            raise click.UsageError("--brief prints the answer lines only; it does not combine with --json or "
                                   "--format json|csv (JSON carries them as `answer`)", ctx)
        click.echo("\n".join(lines))
        return
    if fmt == "json":
        payload = dict(output.data)
        if output.notes and "notes" not in payload:
            payload["notes"] = list(output.notes)
        if lines and "answer" not in payload:
            payload["answer"] = lines
        click.echo(json.dumps(_jsonable(payload), indent=2))
    elif fmt == "csv":
        from .render_csv import to_csv

        click.echo(to_csv(_jsonable(output.data), output.records or _only_list(output.data)), nl=False)
    elif fmt == "markdown":
        click.echo(_markdown(output, lines))
    else:
        _rich(output, lines)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return value.item()
    return value


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return number(value)
    return plain_text(str(value))


def _only_list(data: dict[str, Any]) -> str | None:
    """The key of data's one value, when that is a list of objects (`mlsys gpus`: "gpus")."""
    if len(data) == 1:
        (key, value), = data.items()
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            return key
    return None


def _markdown(output: Output, answer: Sequence[str] = ()) -> str:
    parts = [*(f"**{line}**  " for line in answer), ""] if answer else []
    for tab in output.tables:
        parts.append(f"### {plain_text(tab.title)}\n")
        parts.extend(markdown_table(tab.columns, [[_cell(v) for v in row] for row in tab.rows], "l" * len(tab.columns)))
        parts.append("")
    if output.notes:
        parts.extend(f"- {plain_text(note)}" for note in output.notes)
    return "\n".join(parts).rstrip() + "\n"


def console(stderr: bool = False):
    """The one rich Console (stdout for results, stderr for progress).

    Width: $COLUMNS when set, else the terminal's, else 120 when writing to a pipe or file.
    """
    from rich.console import Console

    return Console(stderr=stderr, soft_wrap=False, width=_width())


def _width() -> int | None:
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns > 0:
        return max(columns, 40)
    return None if sys.stdout.isatty() else 120


def note(line: str, warning: bool = False) -> None:
    """One note on stderr, wrapped at the terminal's width ($COLUMNS, else at most 80), continuation lines
    indented; a command it ends with (`: mlsys ...`) goes on a line of its own, unwrapped, to be copied whole."""
    import shutil
    import textwrap

    width = _width() if os.environ.get("COLUMNS") else min(shutil.get_terminal_size((80, 24)).columns, 80)
    text, sep, cmd = (("warning: " if warning else "") + line).partition(": mlsys ")
    lines = textwrap.wrap(text + sep[:1], width=max(width or 80, 40), subsequent_indent="  ",
                          break_long_words=False, break_on_hyphens=False)
    if sep:
        lines.append("  mlsys " + cmd)
    click.echo("\n".join(lines), err=True)


def _rich(output: Output, answer: Sequence[str] = ()) -> None:
    from .render_rich import rich_table

    out = console()
    for line in answer:
        out.print(line, style="bold", highlight=False, markup=False)
    for tab in output.tables:
        out.print(rich_table(plain_text(tab.title), tab.columns, tab.rows, _cell, out.width, tab.importance))
    for note in output.notes:
        out.print(f"- {plain_text(note)}", style="dim", highlight=False, markup=False)
