"""What GPU time costs: one rule for every command that takes `--price-per-gpu-hour`.

    cost = GPUs x seconds / 3600 x price per GPU-hour

in the price's own unit (any currency). The price has no default: without one a command prints no cost column
and its JSON no `cost` object (`mlsys scaling budget`'s `cost` key, older than this rule, stays null). A training
step costs its GPUs for the step time; a run of `tokens` costs tokens / tokens-per-step steps (a fraction of a
step counts as that fraction); serving costs its GPUs for the seconds a million tokens take at the simulated
throughput.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import require
from ...validate import positive

MILLION = 1e6


def check_price(price_per_gpu_hour: float) -> float:
    """A price per GPU-hour: a positive finite number (exit 2 otherwise)."""
    return positive(price_per_gpu_hour, "--price-per-gpu-hour")


def gpu_seconds_cost(price_per_gpu_hour: float, gpus: int, seconds: float) -> float:
    """The cost of `gpus` GPUs for `seconds`."""
    require(gpus >= 1, f"GPUs must be at least 1, got {gpus}")
    return check_price(price_per_gpu_hour) * gpus * seconds / 3600.0


@dataclass(frozen=True)
class TrainingCost:
    """A training step's cost, per million training tokens, and (with the run's tokens) the run's."""

    price_per_gpu_hour: float
    gpus: int
    step_s: float
    tokens_per_step: float
    run_tokens: float | None = None  # tokens of the whole run (None: no run priced)

    @property
    def cost_per_step(self) -> float:
        return gpu_seconds_cost(self.price_per_gpu_hour, self.gpus, self.step_s)

    @property
    def cost_per_million_tokens(self) -> float:
        return self.cost_per_step * MILLION / self.tokens_per_step

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"price_per_gpu_hour": self.price_per_gpu_hour, "gpus": self.gpus,
                                "gpu_hours_per_step": self.gpus * self.step_s / 3600.0,
                                "cost_per_step": self.cost_per_step,
                                "cost_per_million_tokens": self.cost_per_million_tokens}
        if self.run_tokens is not None:
            data.update(run_cost(self.price_per_gpu_hour, self.gpus, self.step_s, self.tokens_per_step,
                                 self.run_tokens))
        return data


def run_cost(price_per_gpu_hour: float | None, gpus: int, step_s: float, tokens_per_step: float,
             run_tokens: float) -> dict[str, float]:
    """A run of `run_tokens` at this step: its steps, wall seconds, GPU-hours and (with a price) cost."""
    positive(run_tokens, "--train-tokens")
    steps = run_tokens / tokens_per_step
    out = {"run_tokens": run_tokens, "run_steps": steps, "run_wall_s": steps * step_s,
           "run_gpu_hours": gpus * steps * step_s / 3600.0}
    if price_per_gpu_hour is not None:
        out["cost_per_run"] = gpu_seconds_cost(price_per_gpu_hour, gpus, steps * step_s)
    return out


@dataclass(frozen=True)
class ServingCost:
    """What serving costs per million tokens at the simulated throughput of `gpus` GPUs."""

    price_per_gpu_hour: float
    gpus: int
    output_tokens_per_s: float
    input_tokens_per_s: float

    def as_dict(self) -> dict[str, Any]:
        per_s = gpu_seconds_cost(self.price_per_gpu_hour, self.gpus, 1.0)
        total = self.output_tokens_per_s + self.input_tokens_per_s
        return {"price_per_gpu_hour": self.price_per_gpu_hour, "gpus": self.gpus,
                "cost_per_hour": per_s * 3600.0,
                "cost_per_million_output_tokens": per_s * MILLION / self.output_tokens_per_s
                if self.output_tokens_per_s > 0 else None,
                "cost_per_million_tokens": per_s * MILLION / total if total > 0 else None}
