"""`mlsys plan MODEL --gpus N ...`: the fastest training layouts that fit."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

import click

from ..calc.memory.schedule import FRAMEWORKS
from ..calc.plan.search import plan as search
from ..calc.plan.space import AXES, PlanOptions, parse_fix
from ..units import fmt_bytes
from . import render
from .intervals import train_interval_key, with_interval
from .options import model_argument, positive_int, resolve_model
from .cost_views import run_options, step_cost
from .hardware_notes import with_ceilings_note
from .train import cluster_options, fp8_options, reject_step_unused, step_options

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

D = PlanOptions


def _terminal() -> bool:
    return sys.stderr.isatty()


class _Progress:
    """A progress bar on stderr once the search has run for `delay_s`, only when stderr is a terminal:
    a pipe or file gets nothing, and stdout carries the result alone (--json included)."""

    delay_s = 1.0

    def __init__(self, enabled: bool):
        self.enabled, self.start = enabled and _terminal(), time.perf_counter()
        self.bar: Progress | None = None
        self.task: TaskID | None = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or (self.bar is None and time.perf_counter() - self.start < self.delay_s):
            return
        if self.bar is None:
            from rich.progress import Progress

            self.bar = Progress(console=render.console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("layouts", total=total)
            self.bar.refresh()  # drawn now, not at the next tick of rich's refresh thread
        assert self.task is not None
        self.bar.update(self.task, completed=done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


@click.command()
@model_argument
@cluster_options
@positive_int("--top", D.top, "Layouts to show.")
@click.option("--fix", multiple=True, metavar="AXIS=VALUE",
              help=f"Pin an axis ({', '.join(AXES)}), e.g. --fix tp=8 --fix recompute=selective.")
@step_options
@positive_int("--max-micro-batch", D.max_micro_batch, "Largest micro-batch searched.")
@positive_int("--max-cp", D.max_cp, "Largest context-parallel size searched.")
@click.option("--framework", type=click.Choice(FRAMEWORKS), default=D.framework, show_default=True,
              help="The training code whose memory and host time are priced, as `mlsys train --framework`; torch "
                   "leaves out what it cannot run (ep > 1, ZeRO-1; docs/train.md).")
@click.option("--comm-sms", type=click.IntRange(min=0), default=D.comm_sms, show_default=True,
              help="SMs NCCL holds while overlapped traffic runs, as `mlsys train --comm-sms`.")
@click.option("--even-splits-only", is_flag=True,
              help="Search only pipelines whose stages hold equal layers (by default Megatron-LM's uneven splits near "
                   "the even one are searched too: docs/plan.md).")
@click.option("--all-variants", is_flag=True,
              help="Show every layout in the top K (by default each (tp, pp, dp, cp, ep, micro-batch) appears once, the "
                   "best of its variants in vp, recompute, ZeRO, etp and split; `variants` counts them).")
@click.option("--quiet", is_flag=True, help="No progress bar (otherwise on stderr, when it is a terminal and the "
                                           "search takes over a second).")
@fp8_options
@run_options
@render.output_options
def plan(model, overrides, gpus, cluster, ceilings, host_costs, host_source, seq, global_batch, top, fix, dtype, overlap, capacity_factor,
         reserve, attention, clocks, loss_kernels, dropout, grad_reduce, clip_grad, max_micro_batch, max_cp, framework, comm_sms,
         even_splits_only, all_variants, quiet, fp8_recipe, fp8_params, price_per_gpu_hour, train_tokens, fmt, as_json):
    """Search every TP x PP x DP x CP x EP x ETP x VP x micro-batch x ZeRO x recompute layout of MODEL on
    --gpus GPUs that obeys the divisibility and node rules, drop those that do not fit in memory, and
    rank the rest by `mlsys train`'s step time; shows the top K and why the best wins (docs/train.md).
    """
    reject_step_unused(dtype, framework)
    spec = resolve_model(model, overrides)
    opts = PlanOptions(gpus=gpus, seq=seq, global_batch=global_batch, dtype=dtype, top=top, fix=parse_fix(fix),
                       overlap=overlap, capacity_factor=capacity_factor, reserve=reserve, attention=attention,
                       max_micro_batch=max_micro_batch, max_cp=max_cp, framework=framework, host_costs=host_costs,
                       host_source=host_source, fp8_recipe=fp8_recipe, fp8_params=fp8_params,
                       even_splits_only=even_splits_only, comm_sms=comm_sms, clocks=clocks,
                       loss=loss_kernels, dropout=dropout, clip_grad=clip_grad, grad_reduce=grad_reduce,
                       all_variants=all_variants)
    progress = _Progress(not quiet)
    try:
        result = search(spec, ceilings, cluster, opts, progress)
    finally:
        progress.close()
    output = plan_output(result, price_per_gpu_hour, train_tokens)
    if result.candidates:  # the best layout's step, priced as `mlsys train` prices it
        output = with_interval(output, train_interval_key(spec), result.candidates[0].step_time_s,
                               label="best step_time_s")
    render.emit(with_ceilings_note(output, ceilings), fmt, as_json)


def _folded_note(result) -> str:
    """What the top K shows: one row per (tp, pp, dp, cp, ep, micro-batch), or every layout (--all-variants)."""
    if result.options.all_variants:
        return "every fitting layout is a row (--all-variants): rows may differ only in vp, recompute, ZeRO, etp or split"
    counts = ", ".join(f"#{rank} {n:,}" for rank, n in enumerate(result.variants, 1))
    return (f"one row per tp, pp, dp, cp, ep and micro-batch, the fastest of its variants (vp, recompute, ZeRO, etp, "
            f"split) that fit: {counts or 'none'}; --all-variants shows them all")


def _split(lay: dict) -> str:
    """Megatron-LM's split options of a layout, short: even, first=N, last=N, emb, loss."""
    parts = [f"{name}={lay[key]}" for name, key in (("first", "decoder_first_pipeline_num_layers"),
                                                    ("last", "decoder_last_pipeline_num_layers")) if lay[key] is not None]
    parts += [name for name, key in (("emb", "account_for_embedding_in_pipeline_split"),
                                     ("loss", "account_for_loss_in_pipeline_split")) if lay[key]]
    return "+".join(parts) or "even"


def plan_output(result, price: float | None = None, run_tokens: float | None = None) -> render.Output:
    data = result.as_dict()
    for c, step in zip(data["candidates"], result.candidates):  # each candidate's cost and run (calc.cost.gpu_hours)
        c.update(step_cost(step, price, run_tokens))
    rows = []
    for rank, c in enumerate(data["candidates"], 1):
        lay = c["layout"]
        rows.append([rank, lay["tp"], lay["pp"], _split(lay), lay["dp"], lay["cp"], lay["ep"], lay["etp"], lay["vp"],
                     lay["micro_batch"], lay["num_micro_batches"], lay["zero"], lay["recompute"], c["step_time_s"],
                     c["mfu"], fmt_bytes(c["memory_bytes_per_gpu"]),
                     *([c["cost"]["cost_per_step"]] if price is not None else []),
                     *([c["run"]["run_wall_s"] / 86400] if run_tokens is not None else []),
                     *([c["run"]["cost_per_run"]] if price is not None and run_tokens is not None else [])])
    title = (f"{result.model} on {result.options.gpus} x {result.gpu} ({result.cluster}), seq {result.options.seq}, "
             f"global batch {result.options.global_batch}: {result.searched:,} layouts timed, {result.feasible:,} fit")
    columns = ["#", "tp", "pp", "split", "dp", "cp", "ep", "etp", "vp", "mb", "m", "zero", "recompute", "step s", "MFU", "memory",
               *(["cost/step"] if price is not None else []), *(["run days"] if run_tokens is not None else []),
               *(["cost/run"] if price is not None and run_tokens is not None else [])]
    tables = [render.table(title, columns, rows)]
    if data["candidates"]:
        best = data["candidates"][0]["breakdown"]
        tables.append(render.table("best layout: step time", ["part", "seconds"], [[k, v] for k, v in best.items()]))
    notes = (f"why: {result.why}", f"searched in {result.search_s:.2f} s", _folded_note(result),
             "candidates are re-evaluated by `mlsys train`; sp is on with tp > 1 unless --fix sp=off",
             "split: Megatron-LM's pipeline split (first=N / last=N: --decoder-first/last-pipeline-num-layers; "
             "emb / loss: --account-for-embedding/loss-in-pipeline-split)",
             *(f"left out with --framework {result.options.framework}: {e['axis']} {e['values']} ({e['reason']})"
               for e in data["excluded"]))
    return render.Output(data, tuple(tables), notes)
