"""Many fits of eq. 11 at once: Levenberg-Marquardt on Huber-reweighted log-residuals, vectorised.

Each of K problems has its own theta = (a, b, e, alpha, beta) and its own runs (the bootstrap's
resamples), or they share the runs (the multi-start full fit). An iteration does every problem's
step in a few numpy calls: residuals r = LSE(a - alpha x, b - beta y, e) - log L, their Jacobian,
Huber weights w = min(1, delta / |r|) (iteratively reweighted least squares, the usual way to
minimise a Huber loss), and a damped Gauss-Newton step (J'WJ + lambda diag(J'WJ)) s = -J'Wr that is
kept only if it lowers that problem's Huber objective (lambda shrinks after a kept step, grows
after a rejected one). numpy is imported inside the functions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

MAX_ITERATIONS = 400
RTOL = 1e-12  # a problem is done when a kept step lowers its objective by less than this, relatively
LAMBDA0, LAMBDA_MIN, LAMBDA_MAX = 1e-3, 1e-12, 1e12


def huber_sum(thetas: np.ndarray, x: np.ndarray, y: np.ndarray, log_l: np.ndarray, delta: float) -> np.ndarray:
    """Huber objective / delta of each problem: thetas (K, 5), x, y, log_l (K, n) or (n,) -> (K,)."""
    import numpy as np

    r, _ = _residuals(thetas, x, y, log_l, jacobian=False)
    ar = np.abs(r)
    return np.where(ar <= delta, 0.5 * r * r, delta * (ar - 0.5 * delta)).sum(axis=-1) / delta


def _residuals(thetas: np.ndarray, x: np.ndarray, y: np.ndarray, log_l: np.ndarray,
               jacobian: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    """Log-residuals (K, n) and, if asked, their Jacobian (K, n, 5) in a, b, e, alpha, beta."""
    import numpy as np

    a, b, e, alpha, beta = (thetas[:, i:i + 1] for i in range(5))
    u0, u1 = a - alpha * x, b - beta * y
    m = np.maximum(np.maximum(u0, u1), e)  # log-sum-exp, stabilised
    e0, e1, e2 = np.exp(u0 - m), np.exp(u1 - m), np.exp(e - m)
    total = e0 + e1 + e2
    r = m + np.log(total) - log_l
    if not jacobian:
        return r, None
    p0, p1, p2 = e0 / total, e1 / total, e2 / total  # softmax weights: d r / d(a, b, e)
    x_full, y_full = np.broadcast_to(x, r.shape), np.broadcast_to(y, r.shape)
    return r, np.stack([p0, p1, p2, -p0 * x_full, -p1 * y_full], axis=-1)


def minimise_many(thetas: np.ndarray, x: np.ndarray, y: np.ndarray, log_l: np.ndarray, delta: float,
                  max_iterations: int = MAX_ITERATIONS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Minimise every problem from its start: (thetas (K, 5), objectives / delta (K,), converged (K,))."""
    import numpy as np

    theta = np.array(thetas, dtype=float)
    k = len(theta)
    lam = np.full(k, LAMBDA0)
    f = huber_sum(theta, x, y, log_l, delta)
    done = ~np.isfinite(f)
    converged = np.zeros(k, dtype=bool)
    eye = np.eye(5)
    for _ in range(max_iterations):
        active = np.flatnonzero(~done)
        if not len(active):
            break
        sub = theta[active]
        xs, ys, ls = (v[active] if np.ndim(v) == 2 else v for v in (x, y, log_l))
        r, jac = _residuals(sub, xs, ys, ls)
        assert jac is not None  # asked for (jacobian=True)
        w = np.minimum(1.0, delta / np.maximum(np.abs(r), 1e-300))  # IRLS weights of the Huber loss
        jw = jac * w[..., None]
        h = np.einsum("kni,knj->kij", jw, jac)
        g = np.einsum("kni,kn->ki", jw, r)
        damped = h + lam[active, None, None] * (h * eye + 1e-12 * eye)
        step = -np.linalg.solve(damped, g[..., None])[..., 0]
        trial = sub + step
        f_trial = huber_sum(trial, xs, ys, ls, delta)
        better = np.isfinite(f_trial) & (f_trial < f[active])
        gain = np.where(better, (f[active] - f_trial) / np.maximum(np.abs(f[active]), 1e-300), 0.0)
        theta[active[better]] = trial[better]
        f[active[better]] = f_trial[better]
        lam[active] = np.clip(np.where(better, lam[active] / 3.0, lam[active] * 4.0), LAMBDA_MIN, LAMBDA_MAX)
        finished = (better & (gain < RTOL)) | (lam[active] >= LAMBDA_MAX)
        converged[active[finished & better]] = True
        converged[active[finished & ~better & (lam[active] >= LAMBDA_MAX)]] = True  # no step lowers it
        done[active[finished]] = True
    return theta, f, converged
