"""`mlsys calibrate`: fit the roofline's efficiency ceilings to measured whole-model rows."""

from __future__ import annotations

import click

from . import render


@click.command()
@click.argument("rows", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--hold-out", default=None, help="Comma-separated model names kept out of the fit (their error is the check).")
@click.option("--gpu", help="GPU datasheet (default: the one the rows were measured on).")
@click.option("--base", type=click.Path(exists=True, dir_okay=False),
              help="Start from these ceilings (e.g. `mlsys bench ceilings` output) instead of the datasheet.")
@click.option("--fit-only", "fit_only", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="Fit only the rows of these files (the other ROWS are scored, not fitted); repeatable.")
@click.option("--steps-only", is_flag=True, help="Fit the step times only (not the rows' per-linear profiler times).")
@click.option("--out", "out", type=click.Path(dir_okay=False), help="Write the calibration file here (for --calibration).")
@render.output_options
def calibrate(rows, hold_out, gpu, base, fit_only, steps_only, out, fmt, as_json):
    """Fit matmul, attention and memory efficiencies and the per-kernel fixed cost to `mlsys bench
    model` rows (graph-mode prefill/decode and train steps), minimising the squared log error of
    the step times. Models in --hold-out are predicted with the fitted file but never fitted.
    """
    from ..bench.model_calibrate import calibrate as fit_rows
    from ..bench.model_calibrate import write_record
    from ..bench.rows import ResultStore
    from ..calc.roofline.calibration import load_ceilings, match_gpu
    from ..errors import MlsysError, require

    measured = [r for path in (*rows, *fit_only) for r in ResultStore(path).rows()]
    fit_keys = {r.key for path in fit_only for r in ResultStore(path).rows()} if fit_only else None
    require(bool(measured), f"calibrate: no rows in {', '.join(rows)}")
    held = {m.strip() for m in (hold_out or "").split(",") if m.strip()}
    models = {r.extra.get("model") for r in measured}
    for name in sorted(held - models):
        raise MlsysError(f"--hold-out {name}: no row of that model (models in the rows: "
                         f"{', '.join(sorted(map(str, models - {None}))) or 'none'})")
    name = gpu or match_gpu(next((str(r.env["gpu"]) for r in measured if r.env.get("gpu")), "")).name
    result = fit_rows(measured, load_ceilings(name, base), held, fit_keys, per_op=not steps_only)
    if out:
        write_record(out, result["record"])
    columns = ["model", "phase", "shape", "held_out", "fitted", "measured_s", "uncalibrated_error", "error"]
    output = render.Output(
        data=result,
        tables=(render.table("fit", ["parameter", "value"], sorted(result["params"].items())),
                render.table("rows (error = (measured - predicted) / predicted)", columns,
                             [[r[c] for c in columns] for r in result["rows"]]),
                render.table("summary", ["rows", "n", "median |error|", "max |error|", "uncalibrated median", "uncalibrated max"],
                             [[k, v["rows"], v["median_abs_error"], v["max_abs_error"], v["uncalibrated_median_abs_error"],
                               v["uncalibrated_max_abs_error"]] for k, v in result["summary"].items()])),
        notes=("fitted on graph-mode prefill/decode and train rows (step times"
               + ("" if steps_only else " and per-linear profiler times") + "); eager rows are left out",
               f"calibration written to {out}" if out else "no --out: nothing written"))
    render.emit(output, fmt, as_json)
