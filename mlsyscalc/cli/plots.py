"""How every `--plot FILE` reports what it wrote: the path in JSON (`plot`) and in a note under the tables."""

from __future__ import annotations

from . import render


def plot_note(path: str) -> str:
    return f"Plot written to {path}."


def with_plot(output: render.Output, path: str) -> render.Output:
    """`output` with the figure's path added to its JSON data and its notes."""
    return render.Output({**output.data, "plot": str(path)}, output.tables, (*output.notes, plot_note(path)))
