"""The one markdown-table helper: every page in reports/ and every `--format markdown` table uses it."""

from __future__ import annotations

from typing import Any, Iterable, Sequence


def markdown_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], align: str | None = None) -> list[str]:
    """Lines of a GitHub markdown table. `align` has one letter per column: l, r or c (default: the
    first column left, the others right). Cells are str()-ed; None prints as empty; '|' is escaped."""
    columns = list(columns)
    align = align or ("l" + "r" * (len(columns) - 1))
    if len(align) != len(columns):
        raise ValueError(f"align {align!r} has {len(align)} letters for {len(columns)} columns")
    rule = {"l": ":---", "r": "---:", "c": ":---:"}
    lines = ["| " + " | ".join(_cell(c) for c in columns) + " |",
             "| " + " | ".join(rule[a] for a in align) + " |"]
    for row in rows:
        row = list(row)
        if len(row) != len(columns):
            raise ValueError(f"row has {len(row)} cells for {len(columns)} columns: {row!r}")
        lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
    return lines


def _cell(value: Any) -> str:
    return "" if value is None else str(value).replace("|", "\\|").replace("\n", " ")
