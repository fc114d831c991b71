"""`mlsys bench`: run Triton kernels and their torch baselines on the GPU and record the rows.

Subcommands load lazily from BENCH_COMMANDS ("name": "module:attribute", full module path), so
`mlsys --help` imports neither torch nor triton, and a new kernel family adds one line here.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import asdict
from typing import Callable, Iterator

import click

from . import render
from .main import LazyGroup

BENCH_COMMANDS = {
    "matmul": "mlsyscalc.cli.bench_kernels:matmul",
    "quant": "mlsyscalc.cli.bench_kernels:quant",
    "ceilings": "mlsyscalc.cli.bench_ceilings:ceilings",
    "attention": "mlsyscalc.cli.bench_attention:attention",
    "fused": "mlsyscalc.cli.bench_fused:fused",
    "comm": "mlsyscalc.cli.bench_comm:comm",
    "report": "mlsyscalc.cli.bench_report:report",
    "rows": "mlsyscalc.cli.bench_report:rows",
    "model": "mlsyscalc.cli.bench_model:model",
    "host": "mlsyscalc.cli.bench_host:host",
}


class _LazyBenchGroup(LazyGroup):
    lazy_commands = BENCH_COMMANDS


@click.group(cls=_LazyBenchGroup)
def bench() -> None:
    """Measure Triton kernels against torch baselines on a CUDA GPU.

    Each case is checked against a torch reference before it is timed (do_bench median, L2
    flushed); rows are appended to --out as they finish, and a rerun skips what is done.
    Without a GPU this exits 2; --interpret runs small shapes through TRITON_INTERPRET=1.
    """


def sweep_options(func: Callable) -> Callable:
    """--interpret, --out, --quiet and the output format, shared by the kernel subcommands."""
    func = click.option("--quiet", is_flag=True, help="No progress bar on stderr.")(func)
    func = click.option("--out", "out", type=click.Path(dir_okay=False),
                        help="Append rows to this .jsonl or .csv file; a rerun skips rows already there.")(func)
    func = click.option("--interpret", is_flag=True,
                        help="Run small shapes on the CPU through TRITON_INTERPRET=1 (a smoke test, not a speed).")(func)
    return render.output_options(func)


@contextlib.contextmanager
def progress_bar(quiet: bool) -> Iterator[Callable[[int, int, str], None] | None]:
    """A rich progress bar on stderr (stdout stays parseable) fed by the sweep's callback; None when quiet."""
    if quiet:
        yield None
        return
    from .progress import rich_bar

    bar = rich_bar()
    task = bar.add_task("bench", total=None)

    def advance(finished: int, total: int, description: str) -> None:
        if finished == 0:
            bar.start()
        bar.update(task, completed=finished, total=total, description=description)

    try:
        yield advance
    finally:
        bar.stop()


def run_sweep(cases, out: str | None, quiet: bool) -> list:
    """Run harness cases into the --out store with the progress bar; the rows of this sweep."""
    from ..bench.rows import ResultStore
    from ..bench.sweep import run_cases

    with progress_bar(quiet) as progress:
        return run_cases(cases, ResultStore(out), progress)


def _notes() -> tuple[str, ...]:
    notes: tuple[str, ...] = ("times are triton.testing.do_bench medians with L2 flushed; a row with an error was not timed",)
    if os.environ.get("TRITON_INTERPRET") == "1":
        notes += ("--interpret: the kernels ran in Triton's CPU interpreter, so the times, rates and "
                  "speedups measure numpy on the CPU, not the kernels; only the correctness columns count",)
    return notes


def emit_rows(rows, fmt: str, as_json: bool, title: str) -> None:
    """Render a sweep: the per-group summary, then every row (JSON carries all raw fields)."""
    from ..bench.summary import summarize

    groups = summarize(rows)
    columns = ["kernel", "dtype", "shape", "variant", "ok", "rel_err", "median_ms", "baseline_median_ms",
               "tflops_per_s", "GBps", "speedup", "error"]
    detail = [[getattr(r, c) for c in columns] for r in rows]
    summary = [[g.kernel, g.baseline, g.dtype, g.timed, g.failed, g.geomean_speedup, g.min_speedup,
                g.worst_shape] for g in groups]
    output = render.Output(
        data={"rows": [r.flat() for r in rows], "summary": [asdict(g) for g in groups]},
        tables=(render.table(title, columns, detail),
                render.table("summary (speedup = baseline ms / kernel ms)",
                             ["kernel", "baseline", "dtype", "timed", "failed", "geomean", "min", "worst shape"],
                             summary)),
        notes=_notes(),
        records="rows", calculated=False,  # measurements: a failed correctness check has rel_err NaN
    )
    render.emit(output, fmt, as_json)
