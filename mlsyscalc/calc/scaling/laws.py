"""Compute-optimal scaling laws: Chinchilla approaches 1-3, the Epoch AI replication, 20 tokens/param.

Every law here is a power law in the training compute C (FLOPs) under C = 6ND (Kaplan et al.
2020, eq. 2.1; Hoffmann et al. 2022 use it for their frontier):

    N_opt(C) = k * C**a          D_opt(C) = C / (6 * N_opt(C)) = C**(1 - a) / (6 * k)

so C = 6 * N_opt * D_opt holds exactly for every law. What differs is where k and a come from:

- approach1 / approach2 (Hoffmann et al. 2022, "Training Compute-Optimal Large Language
  Models", arXiv:2203.15556): the exponent a is Table 2's printed value (0.50 / 0.49); the paper
  prints no coefficient, so k is recovered from the paper's own projection table (Table 3 for
  approach 1, Table A3 for approach 2) by least squares in log space with a held fixed:
  log k = mean_i(log N_i - a * log C_i). See `recover_coefficient`.
- approach3 and epoch: a parametric loss L(N, D) = E + A/N^alpha + B/D^beta; minimising it under
  C = 6ND gives eq. (4) of Hoffmann et al.: N_opt = G (C/6)^a, a = beta/(alpha+beta),
  G = (alpha A / (beta B))^(1/(alpha+beta)), i.e. k = G * 6**-a.
- tpp20: D = 20 N (the rule of thumb read off Table 3), so N = sqrt(C / 120).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, TypeVar

from ...errors import MlsysError

if TYPE_CHECKING:
    import numpy as np

FLOPS_PER_PARAM_TOKEN = 6.0  # C = 6ND: forward 2ND + backward 4ND (Kaplan et al. 2020, eq. 2.1)

# Hoffmann et al. 2022, Table 3 (approach 1): (parameters, FLOPs, tokens) as printed.
CHINCHILLA_TABLE3 = (
    (400e6, 1.92e19, 8.0e9),
    (1e9, 1.21e20, 20.2e9),
    (10e9, 1.23e22, 205.1e9),
    (67e9, 5.76e23, 1.5e12),
    (175e9, 3.85e24, 3.7e12),
    (280e9, 9.90e24, 5.9e12),
    (520e9, 3.43e25, 11.0e12),
    (1e12, 1.27e26, 21.2e12),
    (10e12, 1.30e28, 216.2e12),
)
# Hoffmann et al. 2022, Table A3, approach 2 columns.
CHINCHILLA_TABLE_A3_APPROACH2 = (
    (400e6, 1.84e19, 7.7e9),
    (1e9, 1.20e20, 20.0e9),
    (10e9, 1.32e22, 219.5e9),
    (67e9, 6.88e23, 1.7e12),
    (175e9, 4.54e24, 4.3e12),
    (280e9, 1.18e25, 7.1e12),
    (520e9, 4.19e25, 13.4e12),
    (1e12, 1.59e26, 26.5e12),
    (10e12, 1.75e28, 292.0e12),
)
# Hoffmann et al. 2022, Table A3, approach 3 columns. The 175B row's FLOPs read 1.26e+24 in the
# transcription we checked; 6 * 175e9 * 12.0e12 = 1.26e25, so we store 1.26e25.
CHINCHILLA_TABLE_A3_APPROACH3 = (
    (400e6, 2.21e19, 9.2e9),
    (1e9, 1.62e20, 27.1e9),
    (10e9, 2.46e22, 410.1e9),
    (67e9, 1.71e24, 4.1e12),
    (175e9, 1.26e25, 12.0e12),
    (280e9, 3.52e25, 20.1e12),
    (520e9, 1.36e26, 43.5e12),
    (1e12, 5.65e26, 94.1e12),
    (10e12, 8.55e28, 1425.5e12),
)

HOFFMANN = "Hoffmann et al. 2022, Training Compute-Optimal Large Language Models (arXiv:2203.15556)"
BESIROGLU = "Besiroglu et al. 2024, Chinchilla Scaling: A replication attempt (arXiv:2404.10102)"


# a scalar, or a numpy array of them (the laws below work elementwise on both)
X = TypeVar("X", float, "np.ndarray")


@dataclass(frozen=True)
class Parametric:
    """L(N, D) = E + A / N**alpha + B / D**beta (Hoffmann et al. 2022, eq. 2); loss in nats/token."""

    E: float
    A: float
    B: float
    alpha: float
    beta: float

    def params_term(self, params: X) -> X:
        return self.A / params**self.alpha

    def data_term(self, tokens: X) -> X:
        return self.B / tokens**self.beta

    def loss(self, params: X, tokens: X) -> X:
        """Works on floats and on numpy arrays alike."""
        return self.E + self.params_term(params) + self.data_term(tokens)

    @property
    def a(self) -> float:
        """N_opt ∝ C**a with a = beta / (alpha + beta) (eq. 4)."""
        return self.beta / (self.alpha + self.beta)

    @property
    def G(self) -> float:
        """G = (alpha A / (beta B)) ** (1 / (alpha + beta)) (eq. 4)."""
        return (self.alpha * self.A / (self.beta * self.B)) ** (1.0 / (self.alpha + self.beta))

    @property
    def k(self) -> float:
        """N_opt = G (C/6)**a = k C**a with k = G * 6**-a."""
        return self.G * FLOPS_PER_PARAM_TOKEN ** (-self.a)


CHINCHILLA_APPROACH3 = Parametric(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28)  # eq. (10)
EPOCH_REPLICATION = Parametric(E=1.8172, A=482.01, B=2085.43, alpha=0.3478, beta=0.3658)


@dataclass(frozen=True)
class Law:
    """A compute-optimal frontier N_opt = k * C**a, D_opt = C / (6 N_opt)."""

    name: str
    title: str
    source: str
    how: str  # where a and k come from, in one line
    a: float
    k: float
    parametric: Parametric | None = None

    @property
    def b(self) -> float:
        """D_opt ∝ C**b, b = 1 - a (because C = 6ND)."""
        return 1.0 - self.a

    def params_for_compute(self, compute_flops: X) -> X:
        return self.k * compute_flops**self.a

    def tokens_for_compute(self, compute_flops: X) -> X:
        return compute_flops / (FLOPS_PER_PARAM_TOKEN * self.params_for_compute(compute_flops))

    def compute_for_params(self, params: float) -> float:
        return (params / self.k) ** (1.0 / self.a)

    def compute_for_tokens(self, tokens: float) -> float:
        # D = C**(1-a) / (6k)  =>  C = (6 k D) ** (1 / (1 - a))
        return (FLOPS_PER_PARAM_TOKEN * self.k * tokens) ** (1.0 / self.b)


def recover_coefficient(rows: tuple[tuple[float, float, float], ...], a: float) -> float:
    """k in N = k C**a from printed (N, C, D) rows, exponent fixed: the log-space least-squares k."""
    logs = [math.log(n) - a * math.log(c) for n, c, _ in rows]
    return math.exp(sum(logs) / len(logs))


def fit_power_law(rows: tuple[tuple[float, float, float], ...]) -> tuple[float, float]:
    """(a, k) of N = k C**a by ordinary least squares on (log C, log N): the exponent a table implies."""
    xs = [math.log(c) for _, c, _ in rows]
    ys = [math.log(n) for n, _, _ in rows]
    x_mean, y_mean = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - x_mean) * (y - y_mean) for x, y in zip(xs, ys)) / sum((x - x_mean) ** 2 for x in xs)
    return slope, math.exp(y_mean - slope * x_mean)


def parametric_law(name: str, title: str, source: str, fit: Parametric) -> Law:
    how = (f"closed-form optimum of L = {fit.E:g} + {fit.A:g}/N^{fit.alpha:g} + {fit.B:g}/D^{fit.beta:g} "
           f"under C = 6ND (eq. 4): a = beta/(alpha+beta) = {fit.a:.4f}")
    return Law(name, title, source, how, fit.a, fit.k, fit)


@cache
def laws() -> dict[str, Law]:
    """All built-in laws by name (built on first use, then cached)."""
    a1, a2 = 0.50, 0.49  # Hoffmann et al. 2022, Table 2
    tpp = 20.0
    return {
        "approach1": Law(
            "approach1", "Chinchilla approach 1 (minimum over training curves)", HOFFMANN,
            f"a = {a1} (Table 2); k recovered from Table 3's nine (N, C) rows by log-space least squares",
            a1, recover_coefficient(CHINCHILLA_TABLE3, a1),
        ),
        "approach2": Law(
            "approach2", "Chinchilla approach 2 (IsoFLOP profiles)", HOFFMANN,
            f"a = {a2} (Table 2); k recovered from Table A3's approach-2 (N, C) rows by log-space least squares",
            a2, recover_coefficient(CHINCHILLA_TABLE_A3_APPROACH2, a2),
        ),
        "approach3": parametric_law(
            "approach3", "Chinchilla approach 3 (parametric loss fit)", HOFFMANN + ", eq. (10)",
            CHINCHILLA_APPROACH3,
        ),
        "epoch": parametric_law(
            "epoch", "Epoch AI replication of approach 3", BESIROGLU, EPOCH_REPLICATION,
        ),
        "tpp20": Law(
            "tpp20", "20 tokens per parameter rule of thumb", HOFFMANN + ", Table 3 (D/N ≈ 20)",
            "D = 20 N and C = 6ND, so N = sqrt(C / 120)",
            0.5, 1.0 / math.sqrt(FLOPS_PER_PARAM_TOKEN * tpp),
        ),
    }


LAW_NAMES = ("approach1", "approach2", "approach3", "epoch", "tpp20")
PARAMETRIC_LAW_NAMES = ("approach3", "epoch")


def get_law(name: str) -> Law:
    """Exact, case-insensitive lookup; an unknown name is a clear error."""
    law = laws().get(name.strip().lower())
    if law is None:
        raise MlsysError(f"unknown scaling law {name!r} (choose from {', '.join(LAW_NAMES)})")
    return law


def loss_model(name: str) -> Parametric:
    """The parametric L(N, D) of a law that has one."""
    law = get_law(name)
    if law.parametric is None:
        raise MlsysError(f"law {law.name!r} has no loss model; use one of {', '.join(PARAMETRIC_LAW_NAMES)}")
    return law.parametric
