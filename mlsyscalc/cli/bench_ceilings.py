"""`mlsys bench ceilings`: measure achievable matmul peaks and HBM bandwidth; write calibration JSON."""

from __future__ import annotations

import json
from pathlib import Path

import click

from . import render


@click.command()
@click.option("--out", "out", type=click.Path(dir_okay=False),
              help="Write the calibration JSON here (the roofline calculator reads it).")
@click.option("--sustained", is_flag=True,
              help="Also run each ceiling back to back until power and clocks settle (--seconds each) and record "
                   "the steady rates, clocks, power and throttle reasons; train and plan price hours-long runs "
                   "at the steady rates (docs/bench.md, \"Sustained ceilings\").")
@click.option("--seconds", type=click.FloatRange(1.0, 600.0), default=20.0, show_default=True,
              help="--sustained: seconds each workload runs back to back.")
@click.option("--interpret", is_flag=True, help="Tiny sizes on the CPU: checks the code path only.")
@render.output_options
def ceilings(out, sustained, seconds, interpret, fmt, as_json):
    """Achievable peak FLOP/s per dtype (best of large cuBLAS matmuls) and read/write/copy bandwidth."""
    from ..bench import harness
    from ..bench.cases import ceilings as measure_ceilings

    if sustained and interpret:
        raise click.UsageError("--sustained needs a CUDA GPU (it times the card's steady state), not --interpret")
    backend = harness.use_backend(interpret)
    record = measure_ceilings.measure(small=backend == "interpret")
    tables = []
    if sustained:
        from ..bench.cases import sustained as measure_sustained

        record["sustained"] = measure_sustained.measure(seconds)
        record["sustained_fraction"] = measure_sustained.datasheet_fractions(record["sustained"])
        tables.append(render.table(f"sustained ceilings on {record['gpu']} ({seconds:g} s each, back to back)",
                                   ["workload", "burst", "steady", "steady/burst", "SM MHz", "W", "throttle"],
                                   measure_sustained.table_rows(record["sustained"])))
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(record, indent=2) + "\n")
    peaks = [[dtype, value / 1e12 if value else None] for dtype, value in record["peak_flops"].items()]
    bws = [[kind, value / 1e9] for kind, value in record["bandwidth_Bps"].items()]
    render.emit(render.Output(
        data=record,
        tables=(render.table(f"matmul peak on {record['gpu']}", ["dtype", "TFLOP/s"], peaks),
                render.table("memory bandwidth", ["access", "GB/s"], bws), *tables),
        notes=("peak = best of the shapes in matmul_runs (do_bench median); copy counts read + write bytes",
               *(("steady = median rate over the last half of each back-to-back run (TFLOP/s; GB/s for the copy)",)
                 if sustained else ())),
    ), fmt, as_json)
