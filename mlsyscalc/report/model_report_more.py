"""Scaling and measured sections: where the model sits against the compute-optimal frontier, and
predicted vs measured rows of `mlsys bench` for this model and card (`--measured DIR`)."""

from __future__ import annotations

from pathlib import Path

from ..errors import MlsysError
from .markdown import markdown_table
from .model_report import Context, Figure, Section, commands_block

MAX_MEASURED_ROWS = 20


def scaling_section(ctx: Context, sect: Section) -> None:
    params = sect.run("params", *ctx.model_args())
    moe = params.data["active_params"] != params.data["total_params"]
    n = int(params.data["active_params"])
    opt = sect.run("scaling", "optimal", "--params", str(n))
    budget = sect.run("scaling", "budget", "--compute", repr(float(opt.data["compute_flops"])), "--gpu", ctx.gpu,
                      "--gpus", str(ctx.options.gpus))
    which = "active" if moe else "total"
    rows = [("parameters N (" + which + ")", sect.q(params, f"{which}_params", "count")),
            ("compute-optimal tokens D", sect.q(opt, "tokens", "count")),
            ("tokens per parameter", sect.q(opt, "tokens_per_param", "g")),
            ("training compute C = 6ND", sect.q(opt, "compute_flops", "g") + " FLOP"),
            (f"predicted loss ({opt.data['loss_law']}), nats/token", sect.q(opt, "loss", "g")),
            (f"GPU-hours at MFU {sect.q(budget, 'mfu', 'g')}", sect.q(budget, "gpu_hours", "rate")),
            (f"wall clock on {sect.q(budget, 'gpus', 'int')} x {ctx.gpu} (days)", sect.q(budget, "wall_days", "g"))]
    sect.add(f"Compute-optimal training for a model of this size by {opt.data['law_title']} "
             f"({opt.data['source']}):", "", *markdown_table(["quantity", "value"], rows), "")
    if moe:
        sect.add("- The laws were fitted on dense models; N here is the active parameters per token, which sets the "
                 "training FLOPs (C = 6ND) but not the memory or the quality of a mixture of experts.", "")
    sect.add(*[f"- {note}" for note in opt.data.get("notes", [])[-1:]], "")
    sect.figures.append(Figure("scaling_frontier", "frontier",
                               f"{ctx.options.model}: compute-optimal frontier ({opt.data['law']}) and this model "
                               f"(N = {sect.q(params, f'{which}_params', 'count')})",
                               {"law": opt.data["law"], "loss_law": opt.data["loss_law"],
                                "point": [opt.data["compute_flops"], opt.data["params"], opt.data["tokens"]]}))
    commands_block(sect, sect.calls)


def _rows_in(folder: Path) -> list:
    from ..bench.rows import row_from_flat
    from ..readers.measured import measured_records

    rows, seen = [], set()
    for path, lines in measured_records(folder):  # files of other records are skipped there
        latest = {}
        for line in lines:
            row = row_from_flat(line.record, from_text=path.suffix.lower() == ".csv")
            latest[row.key] = row
        for row in latest.values():
            same = (row.key, row.measured_at, row.median_ms)  # one run saved as both .jsonl and .csv counts once
            if same not in seen:
                seen.add(same)
                rows.append((path, row.finish()))
    return rows


def _matches_gpu(row, gpu: str) -> bool:
    card = str(row.env.get("gpu", "")).lower()
    return gpu.split("-")[0].lower() in card


def measured_section(ctx: Context, sect: Section) -> None:
    folder = ctx.options.measured
    if not folder:
        raise MlsysError("No measurements given: pass `--measured DIR` with rows written by `mlsys bench`.")
    path = Path(folder)
    rows = [(p, r) for p, r in _rows_in(path) if _matches_gpu(r, ctx.gpu) and r.median_ms]
    model = ctx.options.model.lower()
    own = [(p, r) for p, r in rows if model in " ".join(map(str, (r.shape, r.variant, *r.extra.values()))).lower()]
    chosen = own or [(p, r) for p, r in rows if r.predicted_ms]
    if not chosen:
        raise MlsysError(f"--measured {folder}: no timed rows for a {ctx.gpu} with a prediction beside them.")
    table = [(r.kernel, r.shape, r.dtype, f"{r.median_ms:.4g}", "" if r.predicted_ms is None else f"{r.predicted_ms:.4g}",
              "" if r.prediction_error is None else f"{100 * r.prediction_error:+.1f}%", r.env.get("gpu", ""),
              r.env.get("git_commit", ""), str(p.relative_to(path))) for p, r in chosen[:MAX_MEASURED_ROWS]]
    what = ("that name this model" if own else
            "that carry a roofline prediction (no rows name this model, so they are not specific to it)")
    sect.add(f"Rows measured on a {ctx.gpu} {what}, from `{folder}` ({len(chosen)} rows, the first "
             f"{len(table)} shown); the numbers come from the row files, not from a command:", "",
             *markdown_table(["kernel", "shape", "dtype", "measured (ms)", "predicted (ms)", "error", "card",
                              "commit", "file"], table), "")
