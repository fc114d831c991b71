"""`mlsys bench report` (every measured page from its rows) and `mlsys bench rows` (rows as a table or CSV)."""

from __future__ import annotations

from pathlib import Path

import click

from . import render


@click.command()
@click.argument("rows_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="reports folder to write into (default: ROWS_DIR itself, regenerating in place).")
@click.option("--family", "families", multiple=True,
              type=click.Choice(["matmul", "quant", "attention", "comm", "memory"]),
              help="Repeatable; default every family with a rows.jsonl under ROWS_DIR.")
@render.output_options
def report(rows_dir, out_dir, families, fmt, as_json):
    """Write every measured report page from ROWS_DIR/<family>/rows.jsonl (the layout of reports/).

    `mlsys bench report reports` regenerates the committed pages in place; after a GPU run,
    `mlsys bench report OUT --out reports` copies the fetched rows in and rewrites the pages.
    """
    from ..report import bench as pages

    written = pages.regenerate(Path(rows_dir), Path(out_dir) if out_dir else None, families or pages.FAMILIES)
    render.emit(render.Output(data={"written": [str(p) for p in written]},
                              tables=(render.table("pages written", ["path"], [[str(p)] for p in written]),)),
                fmt, as_json)


@click.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@render.output_options
def rows(path, fmt, as_json):
    """Show the benchmark rows stored in PATH (.jsonl or .csv), every field; --format csv derives the CSV."""
    from ..bench.rows import ResultStore

    flat = [row.flat() for row in ResultStore(path).rows()]
    columns = list(dict.fromkeys(key for row in flat for key in row))   # every key, first-seen order
    render.emit(render.Output(data={"rows": flat},
                              tables=(render.table(Path(path).name, columns, [[r.get(c) for c in columns] for r in flat]),)),
                fmt, as_json)
