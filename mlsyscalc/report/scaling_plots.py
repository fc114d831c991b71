"""Figures for `mlsys scaling`: IsoFLOP curves, the efficient frontier, and a fit against its data.

matplotlib (Agg backend) and numpy are imported inside the functions. The format follows the
file's suffix (.png or .svg).
"""

from __future__ import annotations

from ..calc.scaling.laws import CHINCHILLA_TABLE3, FLOPS_PER_PARAM_TOKEN, LAW_NAMES, get_law, loss_model
from ..errors import MlsysError
from .plotting import check_path, plain_ticks, pyplot, save



def _log_log(ax) -> None:
    """Log-log axes; an axis spanning under one decade (a loss) gets plain tick labels."""
    from matplotlib.ticker import MaxNLocator, NullFormatter, NullLocator, ScalarFormatter

    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis, (low, high) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        plain_ticks(axis)
        if high / low < 10:
            axis.set_major_locator(MaxNLocator(6))
            axis.set_major_formatter(ScalarFormatter())
            axis.set_minor_locator(NullLocator())
            axis.set_minor_formatter(NullFormatter())
    ax.grid(True, which="both", alpha=0.3)


def _isoflop_panel(ax, law_name: str, loss_name: str, centre_flops: float, point=None) -> None:
    """Loss vs N at five budgets around centre_flops; loss model's minimum (o) and the law's N_opt (x)."""
    import numpy as np

    model, law, loss_law = loss_model(loss_name), get_law(law_name), get_law(loss_name)
    budgets = centre_flops * np.logspace(-2, 2, 5)
    for i, c in enumerate(budgets):
        n_best = loss_law.params_for_compute(c)
        n = n_best * np.logspace(-1.5, 1.5, 200)
        line, = ax.plot(n, model.loss(n, c / (FLOPS_PER_PARAM_TOKEN * n)), lw=1.5, label=f"C = {c:.2g} FLOP")
        ax.plot([n_best], [model.loss(n_best, c / (FLOPS_PER_PARAM_TOKEN * n_best))], "o", color=line.get_color())
        if law_name != loss_name:
            n_law = law.params_for_compute(c)
            ax.plot([n_law], [model.loss(n_law, c / (FLOPS_PER_PARAM_TOKEN * n_law))], "x", ms=9, mew=2,
                    color=line.get_color(), label=f"{law_name} N_opt" if i == 0 else None)
    if point is not None:
        _, params, tokens = point
        ax.plot([params], [model.loss(params, tokens)], "r*", ms=12, label="this point")
    _log_log(ax)
    ax.set_xlabel("parameters N")
    ax.set_ylabel(f"loss ({loss_name}), nats/token")
    ax.set_title(f"IsoFLOP curves, o = minimum of {loss_name}")
    ax.legend(fontsize=7)


def _frontier_panel(ax, law_names, point, paper: bool) -> None:
    """N_opt(C) (solid) and D_opt(C) (dashed) for each law, log-log, with a marked point or Table 3."""
    import numpy as np

    c = np.logspace(18, 28, 100)
    for name in law_names:
        law = get_law(name)
        line, = ax.plot(c, law.params_for_compute(c), lw=1.5, label=f"{name} N_opt")
        ax.plot(c, law.tokens_for_compute(c), "--", lw=1.5, color=line.get_color(), label=f"{name} D_opt")
    if paper:
        n, flops, d = (np.array(col) for col in zip(*CHINCHILLA_TABLE3))
        ax.plot(flops, n, "ks", ms=5, label="Table 3 N (paper)")
        ax.plot(flops, d, "k^", ms=5, label="Table 3 D (paper)")
    if point is not None:
        compute, params, tokens = point
        ax.plot([compute], [params], "r*", ms=12, label="this point: N")
        ax.plot([compute], [tokens], "rP", ms=10, label="this point: D")
    _log_log(ax)
    ax.set_xlabel("training compute C (FLOP)")
    ax.set_ylabel("parameters N, tokens D (count)")
    ax.set_title("Compute-optimal frontier (C = 6ND)")
    ax.legend(fontsize=7, ncol=2)


def frontier_panel(ax, law_name: str, point) -> None:
    """The efficient frontier of every law (`law_name` first) with (C, N, D) marked, on one axes."""
    _frontier_panel(ax, (law_name,) + tuple(n for n in LAW_NAMES if n != law_name), point, paper=False)


def draw_frontier(fig, law_names, loss_name: str, point=None, paper: bool = False) -> None:
    """IsoFLOP curves (left) and the efficient frontier N_opt(C), D_opt(C) (right), drawn on `fig`."""
    names = (law_names,) if isinstance(law_names, str) else tuple(law_names)
    unknown = [n for n in names if n not in LAW_NAMES]
    if unknown:
        raise MlsysError(f"unknown law(s) {unknown}")
    left, right = fig.subplots(1, 2)
    centre = point[0] if point is not None else CHINCHILLA_TABLE3[3][1]  # the Gopher budget, 5.76e23
    _isoflop_panel(left, names[0], loss_name, centre, point)
    _frontier_panel(right, names if paper else names + tuple(n for n in LAW_NAMES if n not in names), point, paper)


def plot_frontier(path: str, law_names, loss_name: str, point=None, paper: bool = False) -> None:
    """IsoFLOP curves (left) and the efficient frontier N_opt(C), D_opt(C) (right), written to `path`."""
    out = check_path(path)
    fig = pyplot().figure(figsize=(13, 5.2))
    draw_frontier(fig, law_names, loss_name, point, paper)
    fig.tight_layout()
    save(fig, [out])


def _compute_levels(n, compute, most: int = 8):
    """(C, N_min, N_max) per IsoFLOP level of the runs; 5 bands if the runs have no few shared budgets."""
    import numpy as np

    keys = np.round(np.log10(compute), 1)
    levels = np.unique(keys)
    if len(levels) > most:
        edges = np.linspace(keys.min(), keys.max(), 6)
        keys = np.digitize(keys, edges[1:-1])
        levels = np.unique(keys)
    out = []
    for level in levels:
        members = keys == level
        c = float(np.exp(np.mean(np.log(compute[members]))))
        out.append((c, float(n[members].min()), float(n[members].max())))
    return out


def plot_fit(path: str, result) -> None:
    """Runs (coloured by compute) with the fitted IsoFLOP curves (left); observed vs fitted loss (right)."""
    import numpy as np

    out = check_path(path)
    plt = pyplot()
    law, runs = result.fit, result.runs
    n, d, loss = (np.asarray(v, dtype=float) for v in (runs.params, runs.tokens, runs.loss))
    compute = FLOPS_PER_PARAM_TOKEN * n * d
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.2))
    norm = plt.matplotlib.colors.LogNorm(compute.min(), compute.max())
    cmap = plt.get_cmap("viridis")
    sc = left.scatter(n, loss, c=compute, norm=norm, cmap=cmap, s=18, edgecolors="k", linewidths=0.3, label="runs")
    for c, lo, hi in _compute_levels(n, compute):
        grid = np.geomspace(lo / 1.5, hi * 1.5, 200)
        left.plot(grid, law.loss(grid, c / (FLOPS_PER_PARAM_TOKEN * grid)), color=cmap(norm(c)), lw=1.2)
        n_opt = law.k * c**law.a
        if lo / 1.5 <= n_opt <= hi * 1.5:
            left.plot([n_opt], [law.loss(n_opt, c / (FLOPS_PER_PARAM_TOKEN * n_opt))], "o", color=cmap(norm(c)),
                      mec="k", ms=7)
    fig.colorbar(sc, ax=left, label="compute 6ND (FLOP)")
    left.set_xlabel("parameters N")
    left.set_ylabel("loss, nats/token")
    left.set_title("Runs and fitted IsoFLOP curves (o = fitted optimum)")
    predicted = law.loss(n, d)
    right.scatter(predicted, loss, c=compute, norm=norm, cmap=cmap, s=18, edgecolors="k", linewidths=0.3)
    lims = [min(predicted.min(), loss.min()), max(predicted.max(), loss.max())]
    right.plot(lims, lims, "k--", lw=1, label="observed = fitted")
    right.set_xlabel("fitted loss, nats/token")
    right.set_ylabel("observed loss, nats/token")
    right.set_title(f"E={law.E:.3g} A={law.A:.3g} B={law.B:.3g} alpha={law.alpha:.3g} beta={law.beta:.3g}")
    right.legend(fontsize=8)
    for ax in (left, right):
        _log_log(ax)
    fig.tight_layout()
    save(fig, [out])
