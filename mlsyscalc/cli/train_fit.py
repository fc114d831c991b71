"""`mlsys train` on a layout that does not fit (docs/train.md, "A layout that does not fit").

No layout flags: the default layout (tp1 x dp = gpus) when it fits, else the best fitting layout `mlsys plan`
would pick, said so in the output. Explicit layout flags: the layout is priced as given (a what-if), and a
warning on stderr and in the JSON's `warnings` names the excess and the layout plan would pick, with the
command that prices it. The search runs only when the layout does not fit.
"""

from __future__ import annotations

from dataclasses import dataclass

import click

from ..calc.train.step import TrainStep, train_step
from ..errors import MlsysError
from ..units import fmt_bytes
from .options import given

# the options of `mlsys train` that set the layout (click's parameter names)
LAYOUT_FLAGS = ("tp", "pp", "dp", "cp", "ep", "etp", "vp", "micro_batch", "zero", "fsdp", "recompute",
                "first", "last", "embedding", "loss")
# the options a suggested command repeats when the user gave them (parameter name -> flag)
_REPEATED = (("gpus", "--gpus"), ("gpu", "--gpu"), ("cluster", "--cluster"), ("seq", "--seq"),
             ("global_batch", "--global-batch"), ("dtype", "--dtype"), ("framework", "--framework"))


@dataclass(frozen=True)
class Fitted:
    step: TrainStep  # the step priced
    choice: str  # "given" (layout flags), "default" (tp1 x dp = gpus), "plan" (the default did not fit)
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def fit_layout(spec, ceilings, cluster, opts) -> Fitted:
    """The step `mlsys train` reports, how its layout was chosen, and the warnings and notes that say so."""
    ctx = click.get_current_context()
    explicit = any(given(ctx, name) for name in LAYOUT_FLAGS)
    choice = "given" if explicit else "default"
    try:
        step = train_step(spec, ceilings, cluster, opts)
    except MlsysError as exc:
        if explicit:
            raise
        return _default_breaks_a_rule(spec, ceilings, cluster, opts, exc)
    if step.fits:
        return Fitted(step, choice)
    from ..calc.plan.fit import best_fitting  # the search loads only when a layout does not fit

    best = best_fitting(spec, ceilings, cluster, opts)
    over = (f"{short_layout(step.options.layout())} needs {fmt_bytes(step.memory_bytes_per_gpu)} per GPU, "
            f"{fmt_bytes(step.memory_bytes_per_gpu - step.usable_bytes)} over the {fmt_bytes(step.usable_bytes)} usable")
    if best is None:
        return Fitted(step, choice, (f"does not fit: {over}; no layout of {opts.gpus} GPUs fits (`mlsys plan` finds "
                                     "none): more GPUs, a smaller --global-batch or --seq, or a smaller --reserve",))
    if not explicit:
        note = (f"layout chosen by plan: {short_layout(best.options.layout())} ({best.step_time_s:.4g} s per step); "
                f"the default {over}")
        return Fitted(best, "plan", notes=(note,))
    return Fitted(step, choice, (f"does not fit: {over}; the best fitting layout `mlsys plan` picks is "
                                 f"{short_layout(best.options.layout())} ({best.step_time_s:.4g} s per step): "
                                 f"{command(ctx, {**best.options.layout(), **best.options.pipeline_split.as_dict()})}",))


def _default_breaks_a_rule(spec, ceilings, cluster, opts, exc: MlsysError) -> Fitted:
    """No layout flags and the default layout cannot run (global batch 512 over dp 1024): plan's best fitting
    layout, said so; when plan finds none (or fails too), the default's own error."""
    from ..calc.plan.fit import best_fitting

    try:
        best = best_fitting(spec, ceilings, cluster, opts)
    except MlsysError:
        best = None
    if best is None:
        raise exc
    note = (f"layout chosen by plan: {short_layout(best.options.layout())} ({best.step_time_s:.4g} s per step); "
            f"the default tp1 pp1 dp{opts.gpus} cannot run ({exc})")
    return Fitted(best, "plan", notes=(note,))


def short_layout(lay: dict) -> str:
    """'tp2 pp4 dp1 cp8 ep1 vp2, micro-batch 1, ZeRO-1, recompute none'."""
    return (f"tp{lay['tp']} pp{lay['pp']} dp{lay['dp']} cp{lay['cp']} ep{lay['ep']} vp{lay['vp']}, micro-batch "
            f"{lay['micro_batch']}, ZeRO-{lay['zero']}, recompute {lay['recompute']}")


def command(ctx: click.Context, lay: dict) -> str:
    """The `mlsys train` command line that prices layout lay for the job the user described."""
    words = ["mlsys train", str(ctx.params["model"])]
    words += [f"{flag} {ctx.params[name]}" for name, flag in _REPEATED
              if ctx.params.get(name) is not None and (name == "gpus" or given(ctx, name))]
    words += [f"--{k.replace('_', '-')} {lay[k]}" for k in ("tp", "pp", "dp", "cp", "ep", "vp", "micro_batch", "zero",
                                                             "recompute")]
    if lay["etp"] != lay["tp"]:
        words.append(f"--etp {lay['etp']}")
    split = {"decoder_first_pipeline_num_layers": "--decoder-first-pipeline-num-layers",
             "decoder_last_pipeline_num_layers": "--decoder-last-pipeline-num-layers"}
    words += [f"{flag} {lay[k]}" for k, flag in split.items() if lay.get(k) is not None]
    words += [f"--{k.replace('_', '-')}" for k in ("account_for_embedding_in_pipeline_split",
                                                  "account_for_loss_in_pipeline_split") if lay.get(k)]
    return " ".join(words)


def with_fit(output, fitted: Fitted):
    """output with `layout_choice` and `warnings` in its JSON (additive keys) and the fit notes first."""
    from dataclasses import replace

    data = {**output.data, "layout_choice": fitted.choice, "warnings": list(fitted.warnings)}
    return replace(output, data=data, notes=(*fitted.notes, *fitted.warnings, *output.notes))
