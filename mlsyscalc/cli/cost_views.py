"""`--price-per-gpu-hour` (and `--train-tokens`) on train, plan, serve: the options and how cost is shown.

One rule (calc.cost.gpu_hours): without a price there is no cost column and no `cost` object in the JSON.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import click

from ..calc.cost.gpu_hours import ServingCost, TrainingCost, run_cost
from . import render
from .options import POSITIVE

PRICE_HELP = ("Price of one GPU-hour, any currency: adds the cost (per step, per million tokens; serve: per million "
              "tokens served) in that unit. No price, no cost columns.")


def price_option(func: Callable) -> Callable:
    return click.option("--price-per-gpu-hour", type=POSITIVE, default=None, help=PRICE_HELP)(func)


def run_options(func: Callable) -> Callable:
    """--price-per-gpu-hour and --train-tokens (the run whose wall time, GPU-hours and cost follow from the step)."""
    @price_option
    @click.option("--train-tokens", default=None, metavar="T",
                  help="Tokens of the whole training run (e.g. 15T): its steps, wall time, GPU-hours and, with a price, "
                       "its cost.")
    @functools.wraps(func)
    def wrapper(*args, train_tokens, **kwargs):
        from ..units import parse_count

        tokens = None if train_tokens is None else parse_count(train_tokens, "--train-tokens")
        return func(*args, train_tokens=tokens, **kwargs)
    return wrapper


def step_cost(step: Any, price: float | None, run_tokens: float | None = None) -> dict[str, Any]:
    """The JSON additions of one training step: `cost` with a price, `run` with the run's tokens."""
    tokens = step.options.global_batch * step.options.seq
    out: dict[str, Any] = {}
    if price is not None:
        out["cost"] = TrainingCost(price, step.options.gpus, step.step_time_s, tokens, run_tokens).as_dict()
    if run_tokens is not None:
        out["run"] = run_cost(price, step.options.gpus, step.step_time_s, tokens, run_tokens)
    return out


def with_step_cost(output: render.Output, step: Any, price: float | None, run_tokens: float | None) -> render.Output:
    """`output` of `mlsys train` with its cost and run table (nothing without a price or run tokens)."""
    extra = step_cost(step, price, run_tokens)
    if not extra:
        return output
    rows: list[list[Any]] = []
    if "cost" in extra:
        c = extra["cost"]
        rows += [["price per GPU-hour", c["price_per_gpu_hour"]], ["cost per step", c["cost_per_step"]],
                 ["cost per 1M training tokens", c["cost_per_million_tokens"]]]
    if "run" in extra:
        r = extra["run"]
        rows += [["run tokens", r["run_tokens"]], ["run steps", r["run_steps"]], ["run days", r["run_wall_s"] / 86400],
                 ["run GPU-hours", r["run_gpu_hours"]]]
        rows += [["cost per run", r["cost_per_run"]]] if "cost_per_run" in r else []
    table = render.table("cost (price units)" if "cost" in extra else "run", ["", "value"], rows)
    return render.Output({**output.data, **extra}, (*output.tables, table), output.notes)


def with_serving_cost(output: render.Output, metrics: dict[str, Any], gpus: int, price: float | None) -> render.Output:
    """`output` of `mlsys serve` with the cost of its GPUs per million tokens served (nothing without a price)."""
    if price is None:
        return output
    cost = ServingCost(price, gpus, metrics["throughput_tokens_per_s"], metrics["input_tokens_per_s"]).as_dict()
    rows = [["price per GPU-hour", price], ["GPUs", gpus], ["cost per hour", cost["cost_per_hour"]],
            ["cost per 1M output tokens", cost["cost_per_million_output_tokens"]],
            ["cost per 1M tokens (prompt + output)", cost["cost_per_million_tokens"]]]
    return render.Output({**output.data, "cost": cost}, (*output.tables, render.table("cost (price units)", ["", "value"],
                                                                                       rows)), output.notes)
