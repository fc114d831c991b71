"""Scaling-law calculators: compute-optimal sizing, loss prediction, the paper's tables, GPU budgets.

Pure functions over the laws in `scaling_laws`; each returns a frozen dataclass. The loss of a
prediction is the sum of its three terms (E + A/N^alpha + B/D^beta), which the results carry.
Fitting your own runs lives in `scaling_fit` (it needs scipy).
"""

from __future__ import annotations

import math
from typing import Iterable
from dataclasses import dataclass

from ...errors import MlsysError, require
from .laws import (
    CHINCHILLA_TABLE3,
    CHINCHILLA_TABLE_A3_APPROACH2,
    CHINCHILLA_TABLE_A3_APPROACH3,
    FLOPS_PER_PARAM_TOKEN,
    LAW_NAMES,
    Law,
    Parametric,
    get_law,
    loss_model,
)

DEFAULT_LAW = "approach1"
# Approaches 1 and 2 and the 20x rule predict N and D only; their loss comes from the same paper's
# parametric fit (approach 3) unless the caller picks another loss model.
DEFAULT_LOSS_LAW = "approach3"


@dataclass(frozen=True)
class LossTerms:
    """L = irreducible + params_term + data_term (nats per token)."""

    irreducible: float
    params_term: float
    data_term: float

    @property
    def total(self) -> float:
        return self.irreducible + self.params_term + self.data_term


def loss_terms(model: Parametric, params: float, tokens: float) -> LossTerms:
    return LossTerms(model.E, model.params_term(params), model.data_term(tokens))


@dataclass(frozen=True)
class Optimum:
    law: Law
    given: str  # which input fixed the point: compute, params or tokens
    compute_flops: float
    params: float
    tokens: float
    loss_law: str
    loss: LossTerms

    @property
    def tokens_per_param(self) -> float:
        return self.tokens / self.params


def _positive(value: float, what: str) -> float:
    require(math.isfinite(value) and value > 0, f"{what} must be a positive finite number, got {value!r}")
    return float(value)


def optimal(law: str = DEFAULT_LAW, *, compute_flops: float | None = None, params: float | None = None,
            tokens: float | None = None, loss_law: str | None = None) -> Optimum:
    """The compute-optimal (N, D, C) point of `law` fixed by exactly one of compute, params, tokens."""
    given = {k: v for k, v in (("compute", compute_flops), ("params", params), ("tokens", tokens)) if v is not None}
    require(len(given) == 1, "give exactly one of compute, params or tokens")
    (kind, value), = given.items()
    value = _positive(value, kind)
    frontier = get_law(law)
    try:
        if kind == "compute":
            compute = value
        elif kind == "params":
            compute = frontier.compute_for_params(value)
        else:
            compute = frontier.compute_for_tokens(value)
        n = value if kind == "params" else frontier.params_for_compute(compute)
        d = value if kind == "tokens" else compute / (FLOPS_PER_PARAM_TOKEN * n)
    except (OverflowError, ZeroDivisionError):
        compute = n = d = math.nan
    require(all(math.isfinite(x) and x > 0 for x in (compute, n, d)),
            f"{kind} {value:g} is out of range for {frontier.name}: the optimum lies beyond the range of a float")
    loss_name = loss_law or (frontier.name if frontier.parametric else DEFAULT_LOSS_LAW)
    return Optimum(frontier, kind, compute, n, d, loss_name, loss_terms(loss_model(loss_name), n, d))


@dataclass(frozen=True)
class LossPrediction:
    law: str
    params: float
    tokens: float
    loss: LossTerms
    optimum: Optimum  # the same law's compute-optimal point at the same compute

    @property
    def compute_flops(self) -> float:
        return FLOPS_PER_PARAM_TOKEN * self.params * self.tokens

    @property
    def excess_loss(self) -> float:
        """How much worse than the compute-optimal split of the same FLOPs (>= 0)."""
        return self.loss.total - self.optimum.loss.total


def predict_loss(law: str, params: float, tokens: float) -> LossPrediction:
    """L(N, D) under a parametric law, beside its compute-optimal point at C = 6ND."""
    model = loss_model(law)
    n, d = _positive(params, "params"), _positive(tokens, "tokens")
    best = optimal(law, compute_flops=FLOPS_PER_PARAM_TOKEN * n * d)
    return LossPrediction(get_law(law).name, n, d, loss_terms(model, n, d), best)


@dataclass(frozen=True)
class TableRow:
    law: str
    reference: str  # which printed table the paper_* values come from
    compute_flops: float  # the printed FLOPs, used as the budget
    paper_params: float
    paper_tokens: float
    params: float
    tokens: float

    @property
    def params_ratio(self) -> float:
        return self.params / self.paper_params

    @property
    def tokens_ratio(self) -> float:
        return self.tokens / self.paper_tokens


REFERENCE_TABLES = {
    "approach1": ("Table 3", CHINCHILLA_TABLE3),
    "approach2": ("Table A3 (approach 2)", CHINCHILLA_TABLE_A3_APPROACH2),
    "approach3": ("Table A3 (approach 3)", CHINCHILLA_TABLE_A3_APPROACH3),
}


@dataclass(frozen=True)
class PaperComparison:
    rows: tuple[TableRow, ...]  # every law at Table 3's budgets
    own_rows: tuple[TableRow, ...]  # a Chinchilla approach at the budgets of its own printed table


def _rows(law: Law, reference: str, table: Iterable[tuple[float, float, float]]) -> tuple[TableRow, ...]:
    return tuple(
        TableRow(law.name, reference, c, n, d, law.params_for_compute(c), law.tokens_for_compute(c))
        for n, c, d in table
    )


def paper_table(law: str = DEFAULT_LAW) -> PaperComparison:
    """Chinchilla Table 3 (and the law's own Table A3 columns) recomputed by `law`; 'all' for every law."""
    names = LAW_NAMES if law.strip().lower() == "all" else (get_law(law).name,)
    rows: list[TableRow] = []
    own: list[TableRow] = []
    for name in names:
        frontier = get_law(name)
        rows.extend(_rows(frontier, "Table 3", CHINCHILLA_TABLE3))
        if name in REFERENCE_TABLES and name != "approach1":
            own.extend(_rows(frontier, *REFERENCE_TABLES[name]))
    return PaperComparison(tuple(rows), tuple(own))


def peak_from_tflops(tflops: float) -> float:
    """A peak typed in TFLOP/s, in FLOP/s."""
    return _positive(tflops, "peak TFLOP/s") * 1e12


@dataclass(frozen=True)
class BudgetOptions:
    # Model FLOPs utilisation, achieved / peak (defined in Chowdhery et al. 2022, PaLM, App. B).
    # 0.4 is an assumed, typical large-run value, not a measurement.
    mfu: float = 0.4
    gpus: int = 1
    dtype: str = "bf16"


@dataclass(frozen=True)
class Budget:
    compute_flops: float
    peak_flops_per_s: float  # one GPU, dense datasheet peak
    mfu: float
    gpus: int
    price_per_gpu_hour: float | None
    optimum: Optimum  # the compute-optimal model for this budget

    @property
    def sustained_flops_per_s(self) -> float:
        return self.peak_flops_per_s * self.mfu * self.gpus

    @property
    def gpu_hours(self) -> float:
        return self.compute_flops / (self.peak_flops_per_s * self.mfu) / 3600.0

    @property
    def wall_s(self) -> float:
        return self.compute_flops / self.sustained_flops_per_s

    @property
    def wall_days(self) -> float:
        return self.wall_s / 86400.0

    @property
    def cost(self) -> float | None:
        return None if self.price_per_gpu_hour is None else self.gpu_hours * self.price_per_gpu_hour

    @property
    def cost_per_million_tokens(self) -> float | None:
        """The cost of training on a million of the compute-optimal model's tokens (None without a price)."""
        return None if self.cost is None else self.cost / self.optimum.tokens * 1e6


def budget(peak_flops_per_s: float, *, compute_flops: float | None = None, gpu_hours: float | None = None,
           wall_days: float | None = None, cost: float | None = None, options: BudgetOptions = BudgetOptions(),
           price_per_gpu_hour: float | None = None, law: str = DEFAULT_LAW) -> Budget:
    """Compute <-> GPU-hours, wall-clock days and cost; exactly one of the four fixes the budget.

    gpu_hours = C / (peak * MFU) / 3600; wall = gpu_hours / gpus; cost = gpu_hours * price.
    """
    peak = _positive(peak_flops_per_s, "peak FLOP/s")
    require(0 < options.mfu <= 1, f"MFU must be in (0, 1], got {options.mfu!r}")
    require(options.gpus >= 1, f"gpus must be at least 1, got {options.gpus!r}")
    if price_per_gpu_hour is not None:
        _positive(price_per_gpu_hour, "price per GPU-hour")
    given = {k: v for k, v in (("compute", compute_flops), ("gpu_hours", gpu_hours),
                               ("days", wall_days), ("cost", cost)) if v is not None}
    require(len(given) == 1, "give exactly one of compute, GPU-hours, days or cost")
    (kind, value), = given.items()
    value = _positive(value, kind)
    per_gpu_hour_flops = peak * options.mfu * 3600.0
    if kind == "compute":
        compute = value
    elif kind == "gpu_hours":
        compute = value * per_gpu_hour_flops
    elif kind == "days":
        compute = value * 24.0 * options.gpus * per_gpu_hour_flops
    else:
        if price_per_gpu_hour is None:
            raise MlsysError("a cost budget needs a price per GPU-hour")
        compute = value / price_per_gpu_hour * per_gpu_hour_flops
    best = optimal(law, compute_flops=compute)
    return Budget(compute, peak, options.mfu, options.gpus, price_per_gpu_hour, best)
