"""`mlsys bench model`: time a whole model's prefill, decode step or training step on the GPU
beside the roofline's prediction and the memory calculator's peak."""

from __future__ import annotations

import click

from . import render
from .options import model_argument, resolve_model

PHASES = ("prefill", "decode", "train")


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise click.BadParameter(f"expected positive integers, got {text!r}")
    return values


@click.command()
@model_argument
@click.option("--phase", type=click.Choice(PHASES), required=True, help="prefill (TTFT), decode (one token), train (step).")
@click.option("--batch", default="1", show_default=True, help="Sequences; comma list for a sweep (e.g. 1,16,64).")
@click.option("--seq", default="2048", show_default=True,
              help="prefill/train: tokens per sequence; decode: cached tokens (the context). Comma list allowed.")
@click.option("--layers", type=click.IntRange(min=1), help="Build only the first N decoder layers (models too big "
              "for the card); the prediction uses the same N layers, and the full-depth time is estimated.")
@click.option("--kernels", type=click.Choice(["torch", "triton"]), default="torch", show_default=True,
              help="triton: the project's flash attention, paged decode attention and weight-only GEMVs.")
@click.option("--dtype", type=click.Choice(["bf16", "int8", "int4"]), default="bf16", show_default=True,
              help="Weights: bf16, or int8/int4 weight-only (inference, --kernels triton).")
@click.option("--mode", "modes", multiple=True, type=click.Choice(["graph", "eager"]),
              help="The step captured in a CUDA graph and replayed, and/or issued eagerly (default both rows; a "
                   "multi-GPU training step runs eagerly).")
@click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True,
              help="Tensor parallel over N GPUs (DTensor); launch with torchrun --nproc-per-node N.")
@click.option("--fsdp", is_flag=True, help="Train with FSDP2 over every torchrun process (ZeRO-3).")
@click.option("--gpu", help="Datasheet to predict with (default: the card torch reports).")
@click.option("--calibration", type=click.Path(exists=True, dir_okay=False), help="Ceilings file (mlsys calibrate / bench ceilings).")
@click.option("--reps", type=click.IntRange(min=1), default=10, show_default=True, help="Timed calls per case (median).")
@click.option("--no-profile", is_flag=True, help="Skip the torch.profiler per-kernel table.")
@click.option("--no-host-probe", is_flag=True, help="Skip the host probe (`mlsys bench host`) that prices the "
              "rows' eager host path (the default host costs instead; --cpu and --tp/--fsdp runs skip it).")
@click.option("--cpu", is_flag=True, help="Run on the CPU: a smoke test of the path, not a GPU time.")
@click.option("--out", type=click.Path(dir_okay=False), help="Append rows to this .jsonl/.csv; a rerun skips done rows.")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@render.output_options
def model(model, overrides, phase, batch, seq, layers, kernels, dtype, modes, tp, fsdp, gpu, calibration, reps,
          no_profile, no_host_probe, cpu, out, quiet, fmt, as_json):
    """Measured vs predicted time, per-op kernel times and peak memory of a whole model.

    The model is plain torch built from the spec (random weights): SDPA attention, decode under
    a CUDA graph plus an eager row (training too), training with fused AdamW. Each row carries the roofline's
    prediction for the same spec and shapes (`mlsys roofline MODEL --phase ...`), its error,
    `max_memory_allocated` against `mlsys memory`, and (on a GPU) the profiler's kernel time per
    kind and per linear beside the roofline's op table. A one-GPU run first probes the host (`mlsys
    bench host`: eager steps of a tiny model of the same family) and prices the rows' host path with it.
    """
    from ..bench.cases.host import probe_once
    from ..bench.cases.model import model_cases, run_model_cases
    from ..bench.model_report import CASE_COLUMNS, OP_COLUMNS, case_table, ceilings_for, notes, op_table
    from ..bench.model_parallel import check_parallel, world
    from ..bench.rows import ResultStore

    spec = resolve_model(model, overrides)
    rank, size = world()
    check_parallel(spec, tp, fsdp, size)
    device, ceilings = ceilings_for(gpu, calibration, cpu)
    cases = model_cases(phase, _ints(batch), _ints(seq), modes or ("graph", "eager"), kernels, dtype, layers, tp,
                        size if fsdp else 1)
    progress = None if quiet or rank else (lambda msg: click.echo(f"running {msg}", err=True))
    source = {"model_ref": model, "overrides": list(overrides)}
    store = ResultStore(out if rank == 0 else None)  # rank 0 writes and prints
    host_probe = None if no_host_probe or size > 1 or cpu else probe_once  # a CPU time is no host cost
    rows = run_model_cases(spec, cases, ceilings, store, device, reps, not no_profile, progress, source, host_probe)
    if rank:
        return
    output = render.Output(
        data={"model": spec.name, "phase": phase, "gpu": ceilings.gpu.name, "ceilings": ceilings.source,
              "rows": [r.flat() for r in rows]},
        tables=(render.table("whole model: measured vs predicted", CASE_COLUMNS, case_table(rows)),
                render.table("per op (profiler kernels vs roofline rows)", OP_COLUMNS, op_table(rows))),
        notes=tuple(notes(rows)))
    render.emit(output, fmt, as_json)
