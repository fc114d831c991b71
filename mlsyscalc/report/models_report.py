"""reports/models/README.md: whole-model rows of `mlsys bench model` against the roofline, before
and after `mlsys calibrate`, with the goals table, per-op errors, memory and plots.

    python -m mlsyscalc.report.models_report ROWS.jsonl [ROWS.jsonl ...] OUT_DIR --hold-out a,b,c
        [--gpu H200] [--fit-only FIT.jsonl] [--fresh NEW.jsonl]

writes OUT_DIR/README.md, OUT_DIR/calibration.json and OUT_DIR/errors.png; OUT_DIR/notes.md (the
written analysis) is included as it is. Every prediction is recomputed from the rows' specs and
shapes with the current roofline (the rows' stored predictions are those of the commit that
measured them), so this is also the script that re-scores committed rows after a model change;
the goals table is given for `--impl torch` (what `mlsys bench model` compares with) and for
`--impl fused`. Peak-memory errors are recomputed too (models_report_memory). With --fit-only, the calibration fits those rows only and scores the others;
with --fresh, those rows are scored too and get a goals table of their own (rows measured after
the roofline's kernel lists and efficiency classes were chosen: out of sample for them).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from ..bench.cases.model import roofline_options
from ..bench.model_calibrate import calibrate, eager_inference, load_cases, op_errors
from ..bench.rows import ResultStore, Row
from ..calc.roofline.calibration import CLASSES, load_ceilings
from ..calc.roofline.calibration_fit import PARAMS
from ..calc.roofline.model import predict_model
from ..errors import MlsysError
from ..specs.lookup import load_model, parse_overrides
from .markdown import markdown_table
from .models_report_host import probe_error, probe_lines, probe_predictions
from .models_report_memory import rescored_memory

GOALS = (("uncalibrated whole step within +-15%", 0.15), ("calibrated, held-out models, within +-5%", 0.05))


def _pct(x):
    return None if x is None else f"{100 * x:+.1f}%"


def _ms(s):
    return None if s is None else f"{s * 1e3:.3g}"


def _share(values, limit):
    return f"{sum(abs(v) <= limit for v in values)}/{len(values)}"


def uncalibrated_lines(fit: dict, label: str = "") -> list[list]:
    """Per phase: the rows within +-15% before calibration, and the median |error|. Training steps
    replayed from a CUDA graph get a line of their own: the GPU's time, which no host paces."""
    by_phase: dict[str, list[dict]] = {}
    for r in fit["rows"]:
        graph_train = r["phase"] == "train" and r.get("mode") == "graph"
        by_phase.setdefault("train (CUDA graph)" if graph_train else r["phase"], []).append(r)
    return [[f"uncalibrated {phase} within +-15%{label}", _share([m["uncalibrated_error"] for m in members], 0.15),
             _pct(statistics.median(abs(m["uncalibrated_error"]) for m in members))]
            for phase, members in sorted(by_phase.items())]


def calibrated_lines(fit: dict, ops: list[dict], label: str = "") -> list[list]:
    """Held-out step times within +-5% and the held-out per-linear median after calibration."""
    held = [r["error"] for r in fit["rows"] if r["held_out"]]
    lin = [o["error"] for o in ops if o["section"] == "linears" and o["held_out"]]
    mean = []
    if held:
        average = statistics.fmean(abs(e) for e in held)
        mean = [[f"calibrated{label}, held-out models, mean |error| {100 * average:.1f}% at most 5% (the anchors are "
                 "means: LLMCompass 4.1%, Calculon 3.65%)", "met" if average <= 0.05 else "not met", None]]
    return [[f"calibrated{label}, held-out models, within +-5%", _share(held, 0.05),
             _pct(statistics.median(abs(e) for e in held)) if held else None], *mean,
            [f"per-op (forward linears, held-out) median within 10% after calibration{label}",
             "met" if lin and statistics.median(abs(e) for e in lin) <= 0.10 else "not met",
             _pct(statistics.median(abs(e) for e in lin)) if lin else None]]


def eager_predictions(rows, hold_out: set[str], gpu: str) -> dict[str, float]:
    """Today's uncalibrated prediction (seconds) of every eager prefill/decode row: the host's path
    per layer against the kernels (calc.roofline.host); these rows are not fitted."""
    base = load_ceilings(gpu)
    return {c.row.key: predict_model(c.spec, base, roofline_options(c.case)).time_s
            for c in load_cases(rows, hold_out, keep=eager_inference)}


def eager_line(rows, eager: dict[str, float]) -> list[list]:
    errors = [(r.median_ms * 1e-3 - eager[r.key]) / eager[r.key] for r in rows if r.key in eager]
    if not errors:
        return []
    return [["uncalibrated eager prefill/decode within +-15% (--impl torch, host path; not fitted)",
             _share(errors, 0.15), _pct(statistics.median(abs(e) for e in errors))]]


def goals(fit: dict, ops: list[dict], rows, fused: dict | None = None,
          steps_only: tuple[dict, list[dict]] | None = None, eager: dict[str, float] | None = None,
          probed: dict[str, float] | None = None) -> list[str]:
    lines = uncalibrated_lines(fit, " (--impl torch)" if fused else "") + eager_line(rows, eager or {})
    lines += probe_lines(fit, rows, eager or {}, probed or {})
    if fused:
        lines += uncalibrated_lines(fused, " (--impl fused)")
    if steps_only:
        lines += calibrated_lines(fit, ops, " (steps + per-op fit)") + calibrated_lines(*steps_only, " (steps-only fit)")
        return _memory_line(lines, rows)
    return _memory_line(lines + calibrated_lines(fit, ops), rows)


def _memory_line(lines: list[list], rows) -> list[str]:
    mem = [r.extra.get("memory_error") for r in rows if r.extra.get("memory_error") is not None]
    lines.append(["peak memory within 3% of max_memory_allocated", _share(mem, 0.03),
                  _pct(statistics.median(abs(m) for m in mem)) if mem else None])
    return markdown_table(["goal", "rows meeting it", "median |error|"], lines, "lrr")


def _role(c: dict) -> str:
    return "held out " if c["held_out"] else "fitted " if c.get("fitted", True) else "scored "


def rows_table(rows, fit: dict, eager: dict[str, float] | None = None, probed: dict[str, float] | None = None
               ) -> list[str]:
    """Every row; rows the fit covers and eager prefill/decode rows carry today's prediction, the
    others (triton kernels) the stored one; rows with a host probe also their error priced with it."""
    calibrated = {r["key"]: r for r in fit["rows"]}
    eager, probed = eager or {}, probed or {}
    out: list[list] = []
    shapes: dict[str, dict] = {}
    for r in sorted(rows, key=lambda r: (r.extra.get("model", ""), r.kernel, r.extra.get("kernels", ""), r.dtype,
                                         r.extra.get("batch", 0), r.extra.get("seq", 0), r.baseline)):
        x, c = r.extra, calibrated.get(r.key)
        peak = x.get("peak_bytes")
        predicted = c["uncalibrated_s"] if c else eager.get(r.key, (r.predicted_ms or 0) * 1e-3)
        error = (c["uncalibrated_error"] if c else (r.median_ms * 1e-3 - eager[r.key]) / eager[r.key]
                 if r.key in eager else r.prediction_error)
        out.append([_model_label(x, shapes), x.get("phase"), r.shape, r.baseline, x.get("kernels"), r.dtype,
                    _ms((r.median_ms or 0) * 1e-3) if r.median_ms else None, _ms(predicted),
                    _pct(error), probe_error(r, probed), (_role(c) + _pct(c["error"])) if c else None,
                    f"{peak / 2**30:.2f}" if peak else None, _pct(x.get("memory_error")),
                    _ms(x.get("full_estimated_s")), (r.error or "")[:90]])
    cols = ["model", "phase", "shape", "mode", "kernels", "weights", "measured ms", "predicted ms", "error",
            "error, host probe", "calibrated error", "peak GiB", "memory error", "full depth est. ms", "note"]
    return markdown_table(cols, out, "llllll" + "r" * 8 + "l") + [
        "", *(f"- {label}: `{x['model']}` with `--set {' --set '.join(x['overrides'])}`" for label, x in shapes.items())]


def _model_label(x: dict, shapes: dict[str, dict]) -> str:
    """The model's name, or for a row built with --set overrides a numbered variant of it ("deepseek-v3 #1"),
    whose overrides `shapes` collects for the note under the table: such a row is not the named model. Rows
    whose overrides give the same spec (in any order, or restating a default) share a label."""
    if not x.get("overrides"):
        return x.get("model") or ""
    shape = _variant_spec(x)
    for label, seen in shapes.items():
        if seen["model"] == x.get("model") and seen["spec"] == shape:
            return label
    label = f"{x.get('model')} #{1 + sum(seen['model'] == x.get('model') for seen in shapes.values())}"
    shapes[label] = {"model": x.get("model"), "overrides": list(x["overrides"]), "spec": shape}
    return label


def _variant_spec(x: dict):
    """The spec a row's overrides build (its override list where it cannot be rebuilt)."""
    try:
        return load_model(str(x.get("model_ref") or x.get("model")), parse_overrides(x["overrides"]))
    except MlsysError:
        return tuple(x["overrides"])


def op_summary(ops: list[dict], before: list[dict]) -> list[str]:
    """Median |error| per op name over rows, uncalibrated and calibrated."""
    def med(items, name):
        errs = [abs(o["error"]) for o in items if o["op"] == name]
        return (statistics.median(errs), len(errs)) if errs else (None, 0)
    names = sorted({(o["section"], o["op"]) for o in ops})
    out = []
    for section, name in names:
        b, n = med([o for o in before if o["section"] == section], name)
        a, _ = med([o for o in ops if o["section"] == section], name)
        out.append([("kind: " if section == "kinds" else "") + name, n, _pct(b), _pct(a)])
    return markdown_table(["op", "rows", "median abs error (datasheet)", "median abs error (calibrated)"], out, "lrrr")


def plot(fit: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for ax, key, title in ((axes[0], "uncalibrated_error", "datasheet x default efficiency"),
                           (axes[1], "error", "calibrated (open marks: held out)")):
        for phase, marker in (("prefill", "o"), ("decode", "s"), ("train", "^")):
            for held in (False, True):
                pts = [r for r in fit["rows"] if r["phase"] == phase and r["held_out"] == held]
                ax.scatter([r["measured_s"] * 1e3 for r in pts], [100 * r[key] for r in pts], marker=marker,
                           facecolors="none" if held else None, edgecolors="C0" if held else None,
                           label=f"{phase}{' (held out)' if held else ''}")
        ax.axhspan(-15 if key != "error" else -5, 15 if key != "error" else 5, color="0.9")
        ax.set_xscale("log")
        ax.set_xlabel("measured step (ms)")
        ax.set_ylabel("(measured - predicted) / predicted (%)")
        ax.set_title(title, fontsize=10)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _only(fit: dict, keys: set[str]) -> dict:
    return {**fit, "rows": [r for r in fit["rows"] if r["key"] in keys]}


def fresh_goals(keys: set[str], paths: list[Path], fit: dict, fused: dict, after: list[dict], rows,
                eager: dict[str, float] | None = None, probed: dict[str, float] | None = None) -> list[str]:
    """The goals table over the rows of `paths` only (measured after the roofline's choices)."""
    if not keys:
        return []
    ops = [o for o in after if o["key"] in keys]
    lines = uncalibrated_lines(_only(fit, keys), " (--impl torch)") + uncalibrated_lines(_only(fused, keys), " (--impl fused)")
    lines += eager_line([r for r in rows if r.key in keys], eager or {})
    lines += probe_lines(fit, rows, eager or {}, probed or {}, keys) + calibrated_lines(_only(fit, keys), ops)
    return ["## Goals on the rows of " + ", ".join(str(p) for p in paths) + " only", "",
            *_memory_line(lines, [r for r in rows if r.key in keys]), ""]


def _param(params: dict, key: str) -> float:
    """A fitted parameter; a memory-bound kernel's fixed cost, when not fitted apart, is launch_s."""
    return params.get(key, params["launch_s"]) if key == "memory_launch_s" else params[key]


def latest_rows(rows) -> list[Row]:
    """One row per case key: a case measured in several files counts once, as its latest row."""
    latest: dict[str, Row] = {}
    for r in rows:
        if r.key not in latest or (r.measured_at or "") >= (latest[r.key].measured_at or ""):
            latest[r.key] = r
    return list(latest.values())


def write(rows_paths: list[Path], out_dir: Path, hold_out: set[str], gpu: str,
          fit_paths: list[Path] | None = None, fresh_paths: list[Path] | None = None) -> Path:
    fit_rows = [r for path in fit_paths or [] for r in ResultStore(path).rows()]
    fresh_keys = {r.key for path in fresh_paths or [] for r in ResultStore(path).rows()}
    rows = rescored_memory(latest_rows([r for path in [*rows_paths, *(fresh_paths or [])] for r in ResultStore(path).rows()]
                                       + fit_rows))
    fit_keys = {r.key for r in fit_rows} if fit_paths else None
    base = load_ceilings(gpu)
    fit = calibrate(rows, base, hold_out, fit_keys)
    fused = calibrate(rows, base, hold_out, fit_keys, impl="fused")
    steps = calibrate(rows, base, hold_out, fit_keys, per_op=False)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "calibration.json").write_text(json.dumps(fit["record"], indent=2) + "\n")
    calibrated = load_ceilings(gpu, fit["record"])
    cases = load_cases(rows, hold_out)
    eager = eager_predictions(rows, hold_out, gpu)
    probed = probe_predictions(rows, hold_out, gpu)
    before, after = op_errors(cases, base), op_errors(cases, calibrated)
    steps_ops = op_errors(cases, load_ceilings(gpu, steps["record"]))
    plot(fit, out_dir / "errors.png")
    env = next((r.env for r in rows if r.env.get("gpu")), {})
    commits = sorted({r.env.get("git_commit") or "?" for r in rows})
    notes = out_dir / "notes.md"
    sources = (" ".join(str(p) for p in rows_paths) + "".join(f" --fit-only {p}" for p in fit_paths or [])
               + "".join(f" --fresh {p}" for p in fresh_paths or []))
    params = fit["params"]
    text = ["# Whole models on one GPU: measured vs the roofline", "",
            f"Generated by `python -m mlsyscalc.report.models_report {sources} {out_dir} --hold-out "
            f"{','.join(sorted(hold_out))} --gpu {gpu}` from rows written by `mlsys bench model ...` "
            "(scripts/device_models*.sh). Do not edit by hand; the analysis lives in notes.md, included below.", "",
            f"Card: {env.get('gpu')} ({env.get('sm_count')} SMs), torch {env.get('torch')}, triton "
            f"{env.get('triton')}, CUDA {env.get('cuda')}; rows measured at commits {', '.join(commits)}. "
            f"Predictions recomputed with `mlsys roofline --impl torch` (and `--impl fused` for comparison) on "
            f"the {gpu} datasheet x default efficiencies, then with calibration.json (fitted by `mlsys calibrate` "
            "on the fitted rows).", "",
            "## Goals", "", *goals(fit, after, rows, fused, (steps, steps_ops), eager, probed), "",
            *fresh_goals(fresh_keys, fresh_paths or [], fit, fused, after, rows, eager, probed),
            "## The fit", "", f"Fitted on {', '.join(fit['record']['fitted_on'])}"
            + (f" (rows of {', '.join(str(p) for p in fit_paths)} only)" if fit_paths else "")
            + f"; held out: {', '.join(sorted(hold_out))}.", "",
            *markdown_table(["parameter", "default", "fitted (steps + per-op; calibration.json)", "fitted (steps only)"],
                            [[label, default, f"{_param(params, key) * scale:.3f}",
                              f"{_param(steps['params'], key) * scale:.3f}"]
                             for label, key, default, scale in (
                                 ("matmul efficiency", "matmul", base.efficiency.matmul, 1),
                                 ("GEMM stream (matmul_skinny)", "matmul_skinny", base.efficiency.matmul_skinny, 1),
                                 ("attention efficiency", "attention", base.efficiency.attention, 1),
                                 ("memory efficiency", "memory", base.efficiency.memory, 1),
                                 ("fixed cost per GEMM / attention kernel (us)", "launch_s", base.launch_s * 1e6, 1e6),
                                 ("GEMM floor, fixed cost apart (us)", "matmul_floor_s", round(base.matmul_floor_s * 1e6, 3), 1e6),
                                 ("fixed cost per memory-bound kernel (us; steps only: the GEMM one)",
                                  "memory_launch_s", base.overhead_s("memory") * 1e6, 1e6),
                                 *((key if key in PARAMS else f"{key} (not fitted)", key, getattr(base.efficiency, key), 1)
                                   for key in CLASSES[1:]))],
                            "lrrr"), "",
            *(notes.read_text().splitlines() if notes.exists() else []), "",
            "## Per op", "", "Forward linears: the profiler's time inside each linear's range (all layers) against "
            "the roofline rows of that name; kinds: every kernel of the step sorted by name into matmul / attention "
            "/ memory against the roofline rows of that kind (all passes).", "",
            *op_summary(after, before), "",
            "## Every row", "", "error = (measured - predicted) / predicted with the datasheet ceilings; calibrated "
            "error with calibration.json (fitted, held-out and scored-only rows marked; eager and triton rows are not "
            "fitted); error, host probe: the uncalibrated error with the host costs the row's own call measured "
            "(`mlsys bench host`); memory error = (predicted - max_memory_allocated) / max_memory_allocated.", "",
            *rows_table(rows, fit, eager, probed), "", "![errors](errors.png)", ""]
    (out_dir / "README.md").write_text("\n".join(text))
    return out_dir / "README.md"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", type=Path, nargs="+")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--hold-out", default="")
    parser.add_argument("--gpu", default="H200")
    parser.add_argument("--fit-only", type=Path, action="append", default=None)
    parser.add_argument("--fresh", type=Path, action="append", default=None,
                        help="rows measured after the roofline's choices: scored with the others and in a goals table of their own")
    args = parser.parse_args(argv)
    write(args.rows, args.out_dir, {m for m in args.hold_out.split(",") if m}, args.gpu, args.fit_only, args.fresh)


if __name__ == "__main__":
    main()
