"""Terminal tables that never cut a number, at any width from 80 columns up.

Numbers (int and float cells) keep their whole width; text cells wrap at spaces, and words
longer than MAX_WORD fold. Column widths are chosen here rather than by rich, so rich never
truncates with an ellipsis. A table whose numbers cannot all fit side by side is shown in
stacked form instead: one block per row, each cell on its own `column  value` line.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

MAX_WORD = 16  # text words up to this long are never split across lines
STACK_INDENT, STACK_GAP = "  ", "   "
BORDER = 3  # per column: a vertical rule and one space of padding on each side (plus 1 for the table)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _longest_word(text: str) -> int:
    return max((len(word) for word in text.split()), default=0)


def column_widths(columns: Sequence[str], rows: Sequence[Sequence[Any]], cells: Sequence[Sequence[str]],
                  width: int) -> list[int] | None:
    """Widths that show every number whole within `width`, or None if the table cannot fit."""
    minimum, maximum = [], []
    for i, header in enumerate(columns):
        texts = [row[i] for row in cells]
        numbers = [len(text) for value, text in zip((r[i] for r in rows), texts) if _is_number(value)]
        words = [min(_longest_word(text), MAX_WORD) for value, text in zip((r[i] for r in rows), texts)
                 if not _is_number(value)]
        minimum.append(max([1, min(_longest_word(header), MAX_WORD), *numbers, *words]))
        maximum.append(max([len(header), *(len(text) for text in texts)]))
    available = width - BORDER * len(columns) - 1
    if sum(minimum) > available:
        return None
    widths = list(minimum)
    spare = available - sum(widths)
    while spare > 0:  # give each column room up to its widest cell, the most cramped first
        gaps = [(maximum[i] - widths[i], i) for i in range(len(widths)) if widths[i] < maximum[i]]
        if not gaps:
            break
        widths[max(gaps)[1]] += 1
        spare -= 1
    return widths


def rich_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], cell: Callable[[Any], str],
               width: int):
    """A rich renderable of the rows: a table if every number fits side by side in `width`, else stacked."""
    from rich.table import Table
    from rich.text import Text

    cells = [[cell(v) for v in row] for row in rows]
    widths = column_widths(columns, rows, cells, width)
    if widths is None:
        return _stacked(title, columns, cells, width)
    table = Table(title=title, title_justify="left", header_style="bold")
    for i, (header, w) in enumerate(zip(columns, widths)):
        table.add_column(header, justify="left" if i == 0 else "right", width=w, overflow="fold")
    for row in cells:
        table.add_row(*(Text(text) for text in row))  # Text: a cell's "[...]" is not rich markup
    return table


def _stacked(title: str, columns: Sequence[str], cells: Sequence[Sequence[str]], width: int):
    """One block per row: its first cell as a heading, then `column: value` pairs packed into lines.

    A pair is never split across lines unless it is wider than the whole line by itself.
    """
    from rich.console import Group
    from rich.text import Text

    lines = [Text(title, style="italic")]
    for row in cells:
        lines.append(Text(f"{columns[0]}: {row[0]}", style="bold"))
        pairs = [f"{header}: {text}" for header, text in zip(columns[1:], row[1:]) if text]
        line = ""
        for pair in pairs:
            if line and len(line) + len(STACK_GAP) + len(pair) > width - len(STACK_INDENT):
                lines.append(Text(STACK_INDENT + line))
                line = ""
            line = f"{line}{STACK_GAP}{pair}" if line else pair
        if line:
            lines.append(Text(STACK_INDENT + line))
    return Group(*lines)
