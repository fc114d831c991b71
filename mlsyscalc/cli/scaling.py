"""`mlsys scaling`: compute-optimal model size, loss prediction, GPU budgets, the paper's tables, fits."""

from __future__ import annotations

import os
from typing import Any

import click

from ..calc.scaling import calculators as calc
from ..calc.scaling.fit import FitOptions
from ..calc.scaling.laws import LAW_NAMES, PARAMETRIC_LAW_NAMES
from ..errors import MlsysError
from ..units import fmt_count, fmt_seconds, parse_count
from . import render
from .plots import plot_note
from .options import FRACTION, POSITIVE

LAWS_HELP = """Laws (--law):

\b
  approach1  Hoffmann et al. 2022 (arXiv:2203.15556) approach 1: N_opt = k C^0.50 (a from
             Table 2); k is not printed, so it is recovered from Table 3's nine (N, C) rows
             by least squares in log space with a fixed.
  approach2  Same paper, approach 2: a = 0.49 (Table 2); k recovered the same way from
             Table A3's approach-2 rows.
  approach3  Same paper, eq. (10): L = 1.69 + 406.4/N^0.34 + 410.7/D^0.28, optimum in closed
             form under C = 6ND (eq. 4).
  epoch      Besiroglu et al. 2024 (arXiv:2404.10102), Epoch AI's refit of approach 3:
             L = 1.8172 + 482.01/N^0.3478 + 2085.43/D^0.3658.
  tpp20      20 tokens per parameter: D = 20N, so N = sqrt(C/120).

Every law obeys C = 6ND (FLOPs = 6 x params x tokens). Numbers accept 5.76e23, 70B, 1.4T."""

CONVENTION = "C = 6ND: training FLOPs = 6 x parameters x tokens (Kaplan et al. 2020); loss in nats/token"


def _count(what: str, minimum: float = 1.0):
    """Parse a count option; below `minimum` (1 parameter, 1 token, C = 6 x 1 x 1) is an error."""
    def parse(ctx, param, value):
        if value is None:
            return None
        try:
            number = parse_count(value, what)
        except MlsysError as exc:
            raise click.BadParameter(str(exc)) from exc
        if number < minimum:
            raise MlsysError(f"{param.opts[0]} {value}: {what} out of range (at least {minimum:g})")
        return number
    return parse


def _law_option(names=LAW_NAMES, default=calc.DEFAULT_LAW):
    return click.option("--law", type=click.Choice(names, case_sensitive=False), default=default,
                        show_default=True, help="Scaling law (see the list above).")


plot_option = click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
                           help="Also draw a figure to this .png or .svg file.")


@click.group(help=f"Chinchilla scaling laws: compute-optimal size, loss, budgets, fits.\n\n{LAWS_HELP}")
def scaling() -> None:
    pass


def _loss_data(terms) -> dict:
    return {"irreducible": terms.irreducible, "params_term": terms.params_term, "data_term": terms.data_term}


def _optimum_data(opt) -> dict:
    return {
        "law": opt.law.name, "law_title": opt.law.title, "source": opt.law.source, "how": opt.law.how,
        "given": opt.given, "compute_flops": opt.compute_flops, "params": opt.params, "tokens": opt.tokens,
        "tokens_per_param": opt.tokens_per_param, "loss": opt.loss.total, "loss_law": opt.loss_law,
        "loss_breakdown": _loss_data(opt.loss), "exponent_a": opt.law.a, "exponent_b": opt.law.b,
        "coefficient_k": opt.law.k,
    }


def _optimum_rows(opt) -> list:
    return [
        ["compute C", opt.compute_flops, "FLOP"], ["parameters N", opt.params, "count"],
        ["tokens D", opt.tokens, "count"], ["tokens per parameter", opt.tokens_per_param, "D / N"],
        [f"loss ({opt.loss_law})", opt.loss.total, "nats/token"],
    ]


def _plotted(data: dict, notes: list, plot_path: str | None, draw) -> None:
    if plot_path:
        draw()
        data["plot"] = plot_path
        notes.append(plot_note(plot_path))


@scaling.command(help=f"Compute-optimal N, D and C from one of --compute, --params, --tokens.\n\n{LAWS_HELP}")
@click.option("--compute", callback=_count("compute", 6.0), help="Training compute C in FLOPs (e.g. 5.76e23).")
@click.option("--params", callback=_count("params"), help="Model size N (e.g. 70B): gives D and C.")
@click.option("--tokens", callback=_count("tokens"), help="Training tokens D (e.g. 1.4T): gives N and C.")
@_law_option()
@click.option("--loss-law", type=click.Choice(PARAMETRIC_LAW_NAMES, case_sensitive=False),
              help=f"Loss model for the predicted loss [default: the law itself if parametric, else {calc.DEFAULT_LOSS_LAW}].")
@plot_option
@render.output_options
def optimal(compute, params, tokens, law, loss_law, plot_path, fmt, as_json):
    opt = calc.optimal(law, compute_flops=compute, params=params, tokens=tokens, loss_law=loss_law)
    data = _optimum_data(opt)
    notes = [f"{opt.law.title}: {opt.law.how}", f"source: {opt.law.source}", CONVENTION]

    def draw():
        from ..report.scaling_plots import plot_frontier
        plot_frontier(plot_path, opt.law.name, opt.loss_law, point=(opt.compute_flops, opt.params, opt.tokens))
    _plotted(data, notes, plot_path, draw)
    render.emit(render.Output(data, (render.table(f"Compute-optimal point ({opt.law.name})", ["quantity", "value", "unit"],
                                                  _optimum_rows(opt)),), tuple(notes)), fmt, as_json)


@scaling.command(help=f"Predicted loss L(N, D) = E + A/N^alpha + B/D^beta under a parametric law.\n\n{LAWS_HELP}")
@click.option("--params", required=True, callback=_count("params"), help="Model size N (e.g. 70B).")
@click.option("--tokens", required=True, callback=_count("tokens"), help="Training tokens D (e.g. 1.4T).")
@_law_option(PARAMETRIC_LAW_NAMES, calc.DEFAULT_LOSS_LAW)
@plot_option
@render.output_options
def loss(params, tokens, law, plot_path, fmt, as_json):
    pred = calc.predict_loss(law, params, tokens)
    best = pred.optimum
    data = {
        "law": pred.law, "params": pred.params, "tokens": pred.tokens, "compute_flops": pred.compute_flops,
        "tokens_per_param": pred.tokens / pred.params, "loss": pred.loss.total, "loss_breakdown": _loss_data(pred.loss),
        "optimal_params": best.params, "optimal_tokens": best.tokens, "optimal_loss": best.loss.total,
        "excess_loss": pred.excess_loss,
    }
    rows = [
        ["irreducible E (nats/token)", pred.loss.irreducible, best.loss.irreducible],
        ["A / N^alpha (nats/token)", pred.loss.params_term, best.loss.params_term],
        ["B / D^beta (nats/token)", pred.loss.data_term, best.loss.data_term],
        ["loss (nats/token)", pred.loss.total, best.loss.total],
        ["parameters N", pred.params, best.params], ["tokens D", pred.tokens, best.tokens],
        ["tokens per parameter", pred.tokens / pred.params, best.tokens_per_param],
    ]
    notes = [f"source: {best.law.source}", f"compute C = 6ND = {pred.compute_flops:.4g} FLOP; "
             f"the compute-optimal split of the same C reaches a loss {pred.excess_loss:.4g} nats/token lower", CONVENTION]

    def draw():
        from ..report.scaling_plots import plot_frontier
        plot_frontier(plot_path, pred.law, pred.law, point=(pred.compute_flops, pred.params, pred.tokens))
    _plotted(data, notes, plot_path, draw)
    table = render.table(f"Loss under {pred.law}", ["quantity", "this run", "compute-optimal at same C"], rows)
    render.emit(render.Output(data, (table,), tuple(notes)), fmt, as_json)


def _peak(gpu: str | None, dtype: str, peak_tflops: float | None) -> tuple[float, str]:
    if peak_tflops is not None:
        return calc.peak_from_tflops(peak_tflops), f"{peak_tflops:g} TFLOP/s (given)"
    if gpu is None:
        raise MlsysError("give --gpu NAME or --peak-tflops X (dense peak per GPU)")
    try:
        from ..specs.gpu import load_gpu
    except ImportError as exc:
        raise MlsysError(f"GPU specs are not available ({exc}); pass --peak-tflops instead") from exc
    spec = load_gpu(gpu)
    return spec.peak_flops(dtype), f"{spec.name} {dtype} dense datasheet peak"


@scaling.command(help="Training compute <-> GPU-hours, days and cost; plus the compute-optimal model.\n\n"
                      "Give one of --compute, --gpu-hours, --days, --cost and the GPU's peak (--gpu NAME or "
                      "--peak-tflops). GPU-hours = C / (peak x MFU) / 3600; days = GPU-hours / GPUs / 24; "
                      "cost = GPU-hours x price.")
@click.option("--compute", callback=_count("compute", 6.0), help="Training compute C in FLOPs (e.g. 5.76e23).")
@click.option("--gpu-hours", callback=_count("gpu-hours", 0), help="GPU-hours available.")
@click.option("--days", callback=_count("days", 0), help="Wall-clock days available on --gpus GPUs.")
@click.option("--cost", callback=_count("cost", 0), help="Money available (needs --price-per-gpu-hour).")
@click.option("--gpu", help="GPU name for the peak FLOP/s (see `mlsys gpus`).")
@click.option("--dtype", default=calc.BudgetOptions.dtype, show_default=True, help="Datatype of the peak.")
@click.option("--peak-tflops", type=POSITIVE, help="Dense peak TFLOP/s per GPU (overrides --gpu).")
@click.option("--gpus", type=click.IntRange(min=1), default=calc.BudgetOptions.gpus, show_default=True, help="Number of GPUs.")
@click.option("--mfu", type=FRACTION, default=calc.BudgetOptions.mfu, show_default=True,
              help="Model FLOPs utilisation (achieved / peak), in (0, 1].")
@click.option("--price-per-gpu-hour", type=POSITIVE, help="Price of one GPU-hour (any currency).")
@_law_option()
@render.output_options
def budget(compute, gpu_hours, days, cost, gpu, dtype, peak_tflops, gpus, mfu, price_per_gpu_hour, law, fmt, as_json):
    peak, peak_label = _peak(gpu, dtype, peak_tflops)
    b = calc.budget(peak, compute_flops=compute, gpu_hours=gpu_hours, wall_days=days, cost=cost,
                    options=calc.BudgetOptions(mfu=mfu, gpus=gpus, dtype=dtype),
                    price_per_gpu_hour=price_per_gpu_hour, law=law)
    data = {
        "compute_flops": b.compute_flops, "gpu": gpu, "dtype": dtype, "peak_flops_per_s": b.peak_flops_per_s,
        "mfu": b.mfu, "gpus": b.gpus, "sustained_flops_per_s": b.sustained_flops_per_s, "gpu_hours": b.gpu_hours,
        "wall_s": b.wall_s, "wall_days": b.wall_days, "price_per_gpu_hour": b.price_per_gpu_hour, "cost": b.cost,
        "law": b.optimum.law.name, "params": b.optimum.params, "tokens": b.optimum.tokens,
        "loss": b.optimum.loss.total, "loss_law": b.optimum.loss_law,
    }
    cost_rows: list[list[Any]] = [["cost", b.cost, "price units"],
                                  ["cost per 1M training tokens", b.cost_per_million_tokens, "price units"]]
    rows: list[list[Any]] = [
        ["compute C", b.compute_flops, "FLOP"], ["peak per GPU", b.peak_flops_per_s, "FLOP/s"],
        ["MFU", b.mfu, "achieved / peak"], ["GPUs", b.gpus, "count"],
        ["sustained, all GPUs", b.sustained_flops_per_s, "FLOP/s"], ["GPU-hours", b.gpu_hours, "h"],
        ["wall clock", b.wall_days, "days"],
        *(cost_rows if b.cost is not None else []),  # no price, no cost (calc.cost.gpu_hours)
        ["compute-optimal N", b.optimum.params, "count"], ["compute-optimal D", b.optimum.tokens, "count"],
    ]
    if b.cost is not None:
        data["cost_per_million_tokens"] = b.cost_per_million_tokens
    notes = [f"peak: {peak_label}", "MFU is an assumption: 0.3-0.5 is typical for large dense training",
             f"wall clock {fmt_seconds(b.wall_s)} on {b.gpus} GPU(s); compute-optimal model by {b.optimum.law.name}: "
             f"N = {fmt_count(b.optimum.params)}, D = {fmt_count(b.optimum.tokens)}", CONVENTION]
    tables = (render.table("Training budget", ["quantity", "value", "unit"], rows),)
    render.emit(render.Output(data, tables, tuple(notes)), fmt, as_json)


def _row_data(row) -> dict:
    return {"law": row.law, "reference": row.reference, "compute_flops": row.compute_flops,
            "paper_params": row.paper_params, "paper_tokens": row.paper_tokens, "params": row.params,
            "tokens": row.tokens, "params_ratio": row.params_ratio, "tokens_ratio": row.tokens_ratio}


def _row_cells(row) -> list:
    return [row.law, row.compute_flops, row.paper_params, row.paper_tokens, row.params, row.tokens,
            row.params_ratio, row.tokens_ratio]


@scaling.command(help="Chinchilla Table 3 (and Table A3) recomputed by a law, beside the printed values.\n\n"
                      "Each row takes the paper's printed FLOPs as the budget and compares the law's N_opt and "
                      "D_opt with the printed parameters and tokens. --law all lists every law.\n\n" + LAWS_HELP)
@click.option("--law", type=click.Choice(LAW_NAMES + ("all",), case_sensitive=False), default=calc.DEFAULT_LAW,
              show_default=True, help="Scaling law, or 'all'.")
@plot_option
@render.output_options
def table(law, plot_path, fmt, as_json):
    cmp = calc.paper_table(law)
    columns = ["law", "C (FLOP)", "paper N", "paper D", "law N", "law D", "N / paper", "D / paper"]
    data = {"law": law.lower(), "rows": [_row_data(r) for r in cmp.rows], "own_rows": [_row_data(r) for r in cmp.own_rows]}
    tables = [render.table("Chinchilla Table 3 budgets (printed N, D are approach 1's)", columns,
                           [_row_cells(r) for r in cmp.rows])]
    if cmp.own_rows:
        tables.append(render.table("Each approach against its own printed Table A3 column", columns,
                                   [_row_cells(r) for r in cmp.own_rows]))
    notes = ["source: Hoffmann et al. 2022 (arXiv:2203.15556), Tables 3 and A3",
             "Table 3's 67B row prints 1.5T tokens, but 5.76e23 / (6 x 67B) = 1.43T: no C = 6ND law can match both",
             "approach 3's closed form with the printed (rounded) coefficients gives ~32B / ~3T at 5.76e23, not "
             "Table A3's values; Besiroglu et al. 2024 trace this to rounding and an early-stopped optimiser",
             CONVENTION]

    def draw():
        from ..report.scaling_plots import plot_frontier
        names = LAW_NAMES if law.lower() == "all" else (law.lower(),)
        plot_frontier(plot_path, names, calc.DEFAULT_LOSS_LAW, paper=True)
    _plotted(data, notes, plot_path, draw)
    render.emit(render.Output(data, tuple(tables), tuple(notes)), fmt, as_json)


def _starts(ctx, param, value):
    if value is None or value.strip().lower() == "all":
        return None
    try:
        return int(value)
    except ValueError as exc:
        raise click.BadParameter(f"{value!r} is not a whole number or 'all'") from exc


@scaling.command(help="Fit E, A, B, alpha, beta to your runs (CSV with columns params, tokens, loss).\n\n"
                      "As Hoffmann et al. 2022 (App. D.2): Huber loss (delta = 1e-3) on log-loss, minimised from a "
                      "grid of initialisations; percentile-bootstrap confidence intervals; the implied "
                      "compute-optimal allocation at --compute (default: the largest 6ND among the runs). "
                      "Needs scipy (pip install 'mlsyscalc[science]').")
@click.argument("runs_csv", type=click.Path(exists=True, dir_okay=False))
@click.option("--compute", callback=_count("compute", 6.0), help="Budget for the implied optimum (FLOPs).")
@click.option("--starts", default=str(FitOptions.starts), show_default=True, callback=_starts,
              help="Starts drawn from the paper's 4,500-point grid, or 'all'.")
@click.option("--bootstrap", type=click.IntRange(min=0), default=FitOptions.bootstrap, show_default=True,
              help="Bootstrap resamples (0: no CIs).")
@click.option("--ci", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=FitOptions.ci, show_default=True, help="Confidence level.")
@click.option("--seed", type=click.IntRange(min=0), default=FitOptions.seed, show_default=True, help="Random seed (starts and bootstrap).")
@plot_option
@render.output_options
def fit(runs_csv, compute, starts, bootstrap, ci, seed, plot_path, fmt, as_json):
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # before numpy loads:
        os.environ.setdefault(var, "1")  # 40-run fits are small; extra BLAS threads only contend
    from ..calc.scaling.fit import fit_runs, parse_runs

    from ..readers.files import read_csv

    runs = parse_runs([line.record for line in read_csv(runs_csv, "runs")[1]], source=runs_csv)
    result = fit_runs(runs, FitOptions(starts=starts, bootstrap=bootstrap, ci=ci, seed=seed), compute_flops=compute)
    law = result.fit
    intervals = {name: [lo, hi] for name, lo, hi in result.intervals}
    data = {
        "law": "fit", "E": law.E, "A": law.A, "B": law.B, "alpha": law.alpha, "beta": law.beta,
        "intervals": intervals, "ci": result.ci, "n_runs": result.runs.n, "objective": result.objective,
        "rms_log_residual": result.rms_log_residual, "starts": result.starts, "converged": result.converged,
        "bootstrap": result.bootstrap, "exponent_a": law.a, "exponent_b": 1.0 - law.a,
        "compute_flops": result.compute_flops, "params": result.optimal_params, "tokens": result.optimal_tokens,
        "tokens_per_param": result.optimal_tokens / result.optimal_params, "loss": result.optimal_loss,
    }
    names = ("E", "A", "B", "alpha", "beta", "a", "optimal_params")
    values = (law.E, law.A, law.B, law.alpha, law.beta, law.a, result.optimal_params)
    rows = [[n, v, *(intervals.get(n) or ("", ""))] for n, v in zip(names, values)]
    pct = f"{result.ci * 100:g}%"
    notes = [f"{result.runs.n} runs; L-BFGS from {result.starts} starts ({result.converged} converged); "
             f"{result.bootstrap} bootstrap resamples; rms log-residual {result.rms_log_residual:.3g}",
             f"implied optimum at {result.compute_flops:.4g} FLOP: N = {fmt_count(result.optimal_params)}, "
             f"D = {fmt_count(result.optimal_tokens)}, loss {result.optimal_loss:.4g}", CONVENTION]

    def draw():
        from ..report.scaling_plots import plot_fit
        plot_fit(plot_path, result)
    _plotted(data, notes, plot_path, draw)
    tables = (render.table("Fitted L(N, D) = E + A/N^alpha + B/D^beta", ["coefficient", "fit", f"{pct} low", f"{pct} high"], rows),)
    render.emit(render.Output(data, tables, tuple(notes)), fmt, as_json)

