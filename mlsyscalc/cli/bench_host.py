"""`mlsys bench host [MODEL]`: what an eager step costs this machine's host (bench.cases.host)."""

from __future__ import annotations

import click

from . import render
from .options import resolve_model

HOST_MODEL = "llama2-7b"  # a Llama-family decoder (the probe shrinks its widths, keeps its 32 layers)


@click.command()
@click.argument("model", metavar="[MODEL]", required=False)
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a config.json key of MODEL.")
@click.option("--gpu", help="Datasheet the probe's kernels are priced with (default: the card torch reports).")
@click.option("--reps", type=click.IntRange(min=1), default=5, show_default=True, help="Timed steps per probe (median).")
@click.option("--cpu", is_flag=True, help="Run on the CPU: a smoke test of the path, not a host cost.")
@click.option("--out", type=click.Path(dir_okay=False), help="Append the rows to this .jsonl/.csv.")
@render.output_options
def host(model, overrides, gpu, reps, cpu, out, fmt, as_json):
    """Host seconds per priced kernel (eager training) and per decoder layer (eager decode), and per launch.

    Times an eager training step (B1 S64) and an eager decode step (B1, 64 cached tokens) of MODEL
    (default llama2-7b) with every width shrunk to 128 (the same layers and kernels; the GPU waits on the host), and
    divides by the kernels `mlsys roofline --impl torch` prices for that step and by the decoder
    layers. The JSON's `host` object is a calibration file's `host` section; or pass the two costs
    to `mlsys roofline --host-us-per-kernel/--host-ms-per-layer` (docs/roofline.md, "Host path").
    """
    from ..bench import harness
    from ..bench.cases.host import host_rows, probe
    from ..bench.model_report import ceilings_for
    from ..bench.rows import ResultStore

    spec = resolve_model(model or HOST_MODEL, overrides)
    device, ceilings = ceilings_for(gpu, None, cpu)
    fields = probe(spec, ceilings, device, reps)
    rows = host_rows(spec, fields, dict(harness.env_metadata()), harness.now())
    store = ResultStore(out)
    for row in rows:
        store.append(row)
    section = {"s_per_kernel": fields["host_s_per_kernel"], "s_per_layer": fields["host_s_per_layer"],
               "launch_s": fields["host_launch_s"], "model": fields["host_probe_model"], "device": device,
               "source": "mlsys bench host"}
    table = [[r.kernel, r.shape, r.median_ms, r.extra.get("kernels") or r.extra.get("layers") or r.extra.get("launches"),
              1e6 * (r.extra.get("host_s_per_kernel") or r.extra.get("host_s_per_layer") or r.extra["host_launch_s"])]
             for r in rows]
    output = render.Output(
        data={"model": spec.name, "gpu": ceilings.gpu.name, "host": section, "rows": [r.flat() for r in rows]},
        tables=(render.table("host probe", ["probe", "shape", "measured ms", "kernels/layers/launches",
                                            "us per unit"], table),),
        calculated=False,
        notes=(f"host: {section['s_per_kernel'] * 1e6:.3g} us per priced kernel, {section['s_per_layer'] * 1e3:.3g} ms "
               f"per decoder layer, {section['launch_s'] * 1e6:.3g} us per launch ({fields['host_probe_model']} on "
               f"{device}); pass them as --host-us-per-kernel / --host-ms-per-layer or a calibration's host object",))
    render.emit(output, fmt, as_json)
