"""Fit L(N, D) = E + A/N^alpha + B/D^beta to your own training runs, as Hoffmann et al. 2022 do.

Objective (Hoffmann et al. 2022, App. D.2, eq. 11), over theta = (a, b, e, alpha, beta) with
A, B, E = exp(a), exp(b), exp(e):

    min sum_i Huber_delta( LSE(a - alpha log N_i, b - beta log D_i, e) - log L_i ),  delta = 1e-3

minimised from a grid of initialisations (alpha, beta in {0, 0.5, ..., 2},
e in {-1, -0.5, ..., 1}, a, b in {0, 5, ..., 25}: 4,500 starts). The objective is divided by
delta so its gradients are O(1): Besiroglu et al. 2024 found the paper's optimiser stopped early
on the unscaled loss. Confidence intervals are percentile bootstrap over runs (resampled with
replacement); each resample starts from the full-data optimum.
By default the fit starts from 200 of the 4,500 grid points (the 10 with the lowest initial
objective and a seeded random draw of the others); `starts=None` runs the whole grid. All starts,
and all resamples, are minimised together by a vectorised Levenberg-Marquardt on the
Huber-reweighted residuals (scaling_fit_batch); the best start is polished by L-BFGS.

numpy and scipy are imported inside the functions that need them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Mapping

from ...errors import MlsysError, require
from ...units import parse_count
from .fit_batch import minimise_many
from .laws import FLOPS_PER_PARAM_TOKEN, Parametric

if TYPE_CHECKING:
    import numpy as np

MAX_BOOTSTRAP = 2000  # resamples: percentile intervals settle long before; more only takes time
MIN_RUNS = 8  # five coefficients; fewer runs cannot constrain them and leave no residual to judge
MIN_DISTINCT = 3  # distinct model sizes and token counts, each
MAX_LOG_CORRELATION = 0.999  # |corr(log N, log D)| above this: alpha and beta are not separable

PAPER_GRID = {
    "alpha": (0.0, 0.5, 1.0, 1.5, 2.0),
    "beta": (0.0, 0.5, 1.0, 1.5, 2.0),
    "e": (-1.0, -0.5, 0.0, 0.5, 1.0),
    "a": (0.0, 5.0, 10.0, 15.0, 20.0, 25.0),
    "b": (0.0, 5.0, 10.0, 15.0, 20.0, 25.0),
}
NAMES = ("E", "A", "B", "alpha", "beta")


@dataclass(frozen=True)
class Runs:
    """Final losses of training runs: model size N, tokens D, loss L (nats/token)."""

    params: tuple[float, ...]
    tokens: tuple[float, ...]
    loss: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.loss)


@dataclass(frozen=True)
class FitOptions:
    delta: float = 1e-3  # Huber delta on log-loss (Hoffmann et al. 2022, App. D.2)
    starts: int | None = 200  # fits from k of the 4,500 grid points (see _starts); None: all of them
    bootstrap: int = 100  # resamples for the confidence intervals (0: none)
    ci: float = 0.95
    seed: int = 0


@dataclass(frozen=True)
class FitResult:
    fit: Parametric
    runs: Runs
    objective: float  # sum of Huber_delta(log-residual) at the optimum (unscaled)
    rms_log_residual: float
    starts: int
    converged: int  # starts whose minimisation converged (no step lowers the objective further)
    bootstrap: int  # resamples that gave a usable fit
    ci: float
    intervals: tuple[tuple[str, float, float], ...]  # (name, low, high) for E, A, B, alpha, beta, a
    compute_flops: float  # the budget of the implied optimum
    optimal_params: float
    optimal_tokens: float

    @property
    def optimal_loss(self) -> float:
        return self.fit.loss(self.optimal_params, self.optimal_tokens)


def parse_runs(rows: Iterable[Mapping[str, str]], source: str = "runs") -> Runs:
    """Rows with params, tokens, loss (params/tokens accept 70B-style suffixes); validated."""
    params, tokens, loss = [], [], []
    for i, raw in enumerate(rows, start=2):  # line 1 is the header
        # header names as typed: " tokens", "Loss", or a UTF-8 byte-order mark before the first
        row = {str(k).lstrip("\ufeff").strip().lower(): v for k, v in raw.items() if k is not None}
        missing = [k for k in ("params", "tokens", "loss") if not str(row.get(k) or "").strip()]
        require(not missing, f"{source} line {i}: missing {', '.join(missing)} (columns: params, tokens, loss)")
        params.append(parse_count(row["params"], f"{source} line {i} params"))
        tokens.append(parse_count(row["tokens"], f"{source} line {i} tokens"))
        loss.append(parse_count(row["loss"], f"{source} line {i} loss"))
    return Runs(tuple(params), tuple(tokens), tuple(loss))


def check_runs(runs: Runs) -> None:
    """Refuse data that cannot determine the five coefficients, saying why."""
    require(runs.n >= MIN_RUNS, f"need at least {MIN_RUNS} runs to fit E, A, B, alpha, beta; got {runs.n}")
    for name, values in (("params", runs.params), ("tokens", runs.tokens), ("loss", runs.loss)):
        require(all(v > 0 and math.isfinite(v) for v in values), f"every {name} value must be positive and finite")
    require(len(set(runs.params)) >= MIN_DISTINCT, f"need at least {MIN_DISTINCT} distinct model sizes; got {len(set(runs.params))}")
    require(len(set(runs.tokens)) >= MIN_DISTINCT, f"need at least {MIN_DISTINCT} distinct token counts; got {len(set(runs.tokens))}")
    require(len(set(runs.loss)) > 1, "every run has the same loss: nothing to fit")
    x = [math.log(v) for v in runs.params]
    y = [math.log(v) for v in runs.tokens]
    mx, my = sum(x) / len(x), sum(y) / len(y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx, syy = sum((a - mx) ** 2 for a in x), sum((b - my) ** 2 for b in y)
    corr = sxy / math.sqrt(sxx * syy)
    require(abs(corr) <= MAX_LOG_CORRELATION, (
        f"log(params) and log(tokens) move together (correlation {corr:.4f}), e.g. a fixed tokens-per-parameter "
        "ratio: the N and D terms cannot be told apart. Vary tokens at fixed model size (IsoFLOP or training-curve runs)"
    ))


def _grid() -> np.ndarray:
    import numpy as np

    g = PAPER_GRID
    mesh = np.meshgrid(g["a"], g["b"], g["e"], g["alpha"], g["beta"], indexing="ij")
    return np.stack([m.ravel() for m in mesh], axis=1)  # (starts, 5): a, b, e, alpha, beta


def _objective_batch(thetas: np.ndarray, x: np.ndarray, y: np.ndarray, log_l: np.ndarray, delta: float) -> np.ndarray:
    """Huber objective for many thetas at once: (k, 5) -> (k,)."""
    import numpy as np

    u = np.stack([thetas[:, :1] - thetas[:, 3:4] * x, thetas[:, 1:2] - thetas[:, 4:5] * y,
                  np.broadcast_to(thetas[:, 2:3], (len(thetas), len(x)))], axis=0)  # (3, k, n)
    r = np.logaddexp.reduce(u, axis=0) - log_l
    return _huber(r, delta).sum(axis=1)


def _huber(r: np.ndarray, delta: float) -> np.ndarray:
    import numpy as np

    ar = np.abs(r)
    return np.where(ar <= delta, 0.5 * r * r, delta * (ar - 0.5 * delta))


def _objective(theta: np.ndarray, x: np.ndarray, y: np.ndarray, log_l: np.ndarray,
               delta: float) -> tuple[float, np.ndarray]:
    """(Huber objective / delta, gradient) of eq. 11 for one theta."""
    import numpy as np

    a, b, e, alpha, beta = theta
    u0, u1 = a - alpha * x, b - beta * y
    m = np.maximum(np.maximum(u0, u1), e)  # log-sum-exp, stabilised
    e0, e1, e2 = np.exp(u0 - m), np.exp(u1 - m), np.exp(e - m)
    total = e0 + e1 + e2
    r = m + np.log(total) - log_l
    dh = np.clip(r, -delta, delta) / (delta * total)  # Huber'(r) / delta times the softmax denominator
    g0, g1 = dh @ e0, dh @ e1
    grad = np.array([g0, g1, dh @ e2, -(dh * e0) @ x, -(dh * e1) @ y])
    return float(_huber(r, delta).sum() / delta), grad


def _minimise(starts: np.ndarray, x: np.ndarray, y: np.ndarray, log_l: np.ndarray,
              delta: float) -> tuple[np.ndarray, float, int]:
    """Best of all starts: (theta, objective / delta, number converged).

    Every start runs at once (scaling_fit_batch.minimise_many); the best is polished by L-BFGS
    with the analytic gradient, which from there takes a few iterations.
    """
    import numpy as np
    from scipy.optimize import minimize

    thetas, objectives, converged = minimise_many(starts, x, y, log_l, delta)
    best = thetas[int(np.nanargmin(objectives))]
    res = minimize(_objective, best, args=(x, y, log_l, delta), jac=True, method="L-BFGS-B",
                   options={"maxiter": 1000, "ftol": 1e-12, "gtol": 1e-8})
    if np.isfinite(res.fun) and res.fun <= np.nanmin(objectives):
        return res.x, float(res.fun), int(converged.sum())
    return best, float(np.nanmin(objectives)), int(converged.sum())


def _to_law(theta: np.ndarray) -> Parametric:
    a, b, e, alpha, beta = (float(v) for v in theta)
    return Parametric(E=math.exp(e), A=math.exp(a), B=math.exp(b), alpha=alpha, beta=beta)


def _starts(grid: np.ndarray, x: np.ndarray, y: np.ndarray, log_l: np.ndarray, delta: float, k: int | None,
            seed: int) -> np.ndarray:
    """k starts from the grid: the 10 with the lowest objective plus a seeded random draw of the rest."""
    import numpy as np

    if k is None or k >= len(grid):
        return grid
    order = np.argsort(_objective_batch(grid, x, y, log_l, delta), kind="stable")
    best = min(k, 10)
    rest = np.random.default_rng(seed).choice(order[best:], size=k - best, replace=False)
    return grid[np.concatenate([order[:best], rest])]


def _interval(samples: np.ndarray, ci: float) -> tuple[float, float]:
    import numpy as np

    tail = (1.0 - ci) / 2.0 * 100.0
    lo, hi = np.percentile(samples, [tail, 100.0 - tail])
    return float(lo), float(hi)


def fit_runs(runs: Runs, options: FitOptions = FitOptions(), compute_flops: float | None = None) -> FitResult:
    """Fit E, A, B, alpha, beta with bootstrap intervals and the implied compute-optimal allocation."""
    import numpy as np

    _need_scipy()
    check_runs(runs)
    require(options.delta > 0, "Huber delta must be positive")
    require(0 < options.ci < 1, f"confidence level must be in (0, 1), got {options.ci}")
    require(0 <= options.bootstrap <= MAX_BOOTSTRAP, f"--bootstrap must be 0 to {MAX_BOOTSTRAP:,} resamples, "
                                                     f"got {options.bootstrap:,}")
    require(options.starts is None or options.starts >= 1, "need at least one start")
    x, y, log_l = (np.log(np.asarray(v, dtype=float)) for v in (runs.params, runs.tokens, runs.loss))
    grid = _grid()
    starts = _starts(grid, x, y, log_l, options.delta, options.starts, options.seed)
    theta, scaled, converged = _minimise(starts, x, y, log_l, options.delta)
    law = _usable(theta, "the runs")
    compute = compute_flops if compute_flops is not None else FLOPS_PER_PARAM_TOKEN * max(
        n * d for n, d in zip(runs.params, runs.tokens))
    require(compute > 0, "compute budget must be positive")
    samples = _bootstrap(runs, options, theta, compute)
    names = NAMES + ("a", "optimal_params")
    intervals = tuple((name, *_interval(samples[:, i], options.ci)) for i, name in enumerate(names)) if len(samples) else ()
    residual = np.log(law.loss(np.exp(x), np.exp(y))) - log_l
    n_opt = law.k * compute**law.a
    return FitResult(
        law, runs, scaled * options.delta, float(np.sqrt(np.mean(residual**2))), len(starts), converged,
        len(samples), options.ci, intervals, compute, n_opt, compute / (FLOPS_PER_PARAM_TOKEN * n_opt),
    )


def _need_scipy() -> None:
    try:
        import scipy.optimize  # noqa: F401
    except ImportError as exc:
        raise MlsysError("fitting needs scipy: pip install 'mlsyscalc[science]'") from exc


def _usable(theta: np.ndarray, what: str) -> Parametric:
    law = _to_law(theta)
    values = (law.E, law.A, law.B, law.alpha, law.beta)
    if not all(math.isfinite(v) for v in values) or law.alpha <= 0 or law.beta <= 0:
        raise MlsysError(
            f"no usable fit to {what} (alpha={law.alpha:.3g}, beta={law.beta:.3g}): loss must fall with both "
            "params and tokens; check the data covers a range of both"
        )
    return law


def _bootstrap(runs: Runs, options: FitOptions, theta: np.ndarray, compute: float) -> np.ndarray:
    """(k, 7) samples of E, A, B, alpha, beta, a, N_opt(compute) over resampled runs.

    Every resample starts from the full-data optimum, and all of them are fitted at once.
    """
    import numpy as np

    rng = np.random.default_rng(options.seed)
    x, y, log_l = (np.log(np.asarray(v, dtype=float)) for v in (runs.params, runs.tokens, runs.loss))
    drawn = [rng.integers(0, runs.n, runs.n) for _ in range(options.bootstrap)]
    picks = np.asarray([idx for idx in drawn if len(set(idx.tolist())) >= MIN_DISTINCT
                        and len(set(x[idx])) >= 2 and len(set(y[idx])) >= 2], dtype=int).reshape(-1, runs.n)
    fitted, _, _ = minimise_many(np.repeat(np.asarray(theta, dtype=float)[None, :], len(picks), axis=0),
                                 x[picks], y[picks], log_l[picks], options.delta)
    out = []
    for t in fitted:
        try:
            law = _usable(t, "a resample")
        except MlsysError:
            continue
        out.append((law.E, law.A, law.B, law.alpha, law.beta, law.a, law.k * compute**law.a))
    return np.asarray(out, dtype=float).reshape(-1, 7)
