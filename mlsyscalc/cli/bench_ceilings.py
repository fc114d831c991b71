"""`mlsys bench ceilings`: measure achievable matmul peaks and HBM bandwidth; write calibration JSON."""

from __future__ import annotations

import json
from pathlib import Path

import click

from . import render


@click.command()
@click.option("--out", "out", type=click.Path(dir_okay=False),
              help="Write the calibration JSON here (the roofline calculator reads it).")
@click.option("--interpret", is_flag=True, help="Tiny sizes on the CPU: checks the code path only.")
@render.output_options
def ceilings(out, interpret, fmt, as_json):
    """Achievable peak FLOP/s per dtype (best of large cuBLAS matmuls) and read/write/copy bandwidth."""
    from ..bench import harness
    from ..bench.cases import ceilings as measure_ceilings

    backend = harness.use_backend(interpret)
    record = measure_ceilings.measure(small=backend == "interpret")
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(record, indent=2) + "\n")
    peaks = [[dtype, value / 1e12 if value else None] for dtype, value in record["peak_flops"].items()]
    bws = [[kind, value / 1e9] for kind, value in record["bandwidth_Bps"].items()]
    render.emit(render.Output(
        data=record,
        tables=(render.table(f"matmul peak on {record['gpu']}", ["dtype", "TFLOP/s"], peaks),
                render.table("memory bandwidth", ["access", "GB/s"], bws)),
        notes=("peak = best of the shapes in matmul_runs (do_bench median); copy counts read + write bytes",),
    ), fmt, as_json)
