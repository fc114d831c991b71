"""Terminal tables that never cut a number, at any width from 80 columns up.

Numbers (int and float cells) keep their whole width; text cells wrap at spaces, and words
longer than MAX_WORD fold. Column widths are chosen here rather than by rich, so rich never
truncates with an ellipsis. A table too wide for the terminal first loses the columns that lose
nothing (empty, or one value in every row, stated under it), then its least important ones (the
table's `importance` order, else from the right; never the first column, at most half of them),
named in a line under it; one that still does not fit is shown in stacked form:
one block per row, its cells as `column: value` pairs. The title is a line of its own, wrapped
at spaces to the terminal's width (never to a narrow table's).
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
                  width: int, natural: bool = False) -> list[int] | None:
    """Widths that show every number whole within `width`, or None if the table cannot fit.

    natural: only widths that give every cell its whole width on one line (no text wraps).
    """
    minimum, maximum = [], []
    for i, header in enumerate(columns):
        texts = [row[i] for row in cells]
        numbers = [len(text) for value, text in zip((r[i] for r in rows), texts) if _is_number(value)]
        words = [min(_longest_word(text), MAX_WORD) for value, text in zip((r[i] for r in rows), texts)
                 if not _is_number(value)]
        minimum.append(max([1, min(_longest_word(header), MAX_WORD), *numbers, *words]))
        maximum.append(max([len(header), *(len(text) for text in texts)]))
    available = width - BORDER * len(columns) - 1
    if sum(maximum if natural else minimum) > available:
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


def drop_order(columns: Sequence[str], cells: Sequence[Sequence[str]],
               importance: Sequence[str] | None = None) -> tuple[list[int], int]:
    """(column indices in the order a narrow terminal drops them, how many of those lose nothing).

    First the columns that lose nothing: empty ones, then (with two rows or more) ones holding the
    same value in every row, which the line under the table states. Then the rest, least important
    first: importance names columns most important first, and columns it does not name go before
    any it names, the rightmost first. Column 0 (the row's name) is never dropped.
    """
    rank = {name: i for i, name in enumerate(importance or ())}
    candidates = range(1, len(columns))

    def same(i: int) -> bool:
        values = {row[i] for row in cells}
        return values == {""} or (len(cells) > 1 and len(values) == 1)
    free = sorted((i for i in candidates if same(i)), key=lambda i: (any(row[i] for row in cells), -i))
    rest = sorted((i for i in candidates if not same(i)), key=lambda i: (rank.get(columns[i], len(rank)), i),
                  reverse=True)
    return free + rest, len(free)


def fitting_columns(columns: Sequence[str], rows: Sequence[Sequence[Any]], cells: Sequence[Sequence[str]],
                    width: int, importance: Sequence[str] | None = None) -> tuple[list[int], list[int]] | None:
    """(indices kept, their widths) of the columns to show in width; None when even dropping half of the
    columns whose values differ between rows would leave a number cut."""
    order, free = drop_order(columns, cells, importance)

    def attempt(dropped: int, natural: bool = False) -> tuple[list[int], list[int] | None]:
        keep = sorted(set(range(len(columns))) - set(order[:dropped]))

        def pick(table: Sequence[Sequence[Any]]) -> list[list[Any]]:
            return [[row[i] for i in keep] for row in table]
        return keep, column_widths([columns[i] for i in keep], pick(rows), pick(cells), width, natural)

    for dropped in range(free + 1):  # columns that lose nothing go while the others' text would wrap
        if attempt(dropped, natural=True)[1] is not None:
            return attempt(dropped)  # type: ignore[return-value]
    informative = len(columns) - 1 - free
    for dropped in range(free, free + informative // 2 + 1):  # then as few others as keep every number whole
        keep, widths = attempt(dropped)
        if widths is not None:
            return keep, widths
    return None


def _dropped_line(columns: Sequence[str], cells: Sequence[Sequence[str]], keep: Sequence[int], width: int) -> str:
    """What the narrow table leaves out: the values every row shares, and the columns not shown."""
    dropped = [i for i in range(len(columns)) if i not in keep]
    same = [f"{columns[i]} {cells[0][i]}" for i in dropped if len(cells) > 1 and len({r[i] for r in cells}) == 1
            and cells[0][i]]
    other = [columns[i] for i in dropped if any(r[i] for r in cells) and f"{columns[i]} {cells[0][i]}" not in same]
    parts = [f"every row: {', '.join(same)}"] if same else []
    if other:
        parts.append(f"not shown at {width} columns: {', '.join(other)} (a wider terminal, --format markdown or "
                     "--json shows them)")
    return "; ".join(parts)


def rich_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], cell: Callable[[Any], str],
               width: int, importance: Sequence[str] | None = None):
    """A rich renderable of the rows: a table of the columns that fit side by side in `width`, else stacked."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    cells = [[cell(v) for v in row] for row in rows]
    fitted = fitting_columns(columns, rows, cells, width, importance)
    if fitted is None:
        return _stacked(title, columns, cells, width)
    keep, widths = fitted
    table = Table(header_style="bold")
    for n, (i, w) in enumerate(zip(keep, widths)):
        table.add_column(columns[i], justify="left" if n == 0 else "right", width=w, overflow="fold")
    for row in cells:
        table.add_row(*(Text(row[i]) for i in keep))  # Text: a cell's "[...]" is not rich markup
    parts: list[Any] = [Text(title, style="italic"), table]
    line = _dropped_line(columns, cells, keep, width) if len(keep) < len(columns) else ""
    if line:
        parts.append(Text(line, style="dim"))
    return Group(*parts)


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
