"""Roofline figures: the GPU's roofs with each kernel as a labelled point, and the batch sweep.

matplotlib is imported inside the functions (Agg backend), so importing this module is cheap.
The format follows the file extension (.png or .svg).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ..calc.calibration import Ceilings
from ..calc.roofline_ops import OpPrediction
from ..errors import MlsysError

ROOF_DTYPES = ("fp32", "tf32", "bf16", "fp8", "int8")
MAX_LABELS = 30
DIRECT_LABELS = 6  # more label groups than this are numbered, with a key beside the axes


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _check_path(path: str | Path) -> Path:
    out = Path(path)
    if out.suffix.lower() not in (".png", ".svg"):
        raise MlsysError(f"--plot {path}: use a .png or .svg file name")
    out.parent.mkdir(parents=True, exist_ok=True)
    return out


def _draw_roofs(ax: Any, ceil: Ceilings, dtype: str, x_range: tuple[float, float]) -> None:
    """Datasheet roofs per dtype (dashed), the achievable roof of `dtype` (solid) and the bandwidth slopes."""
    import numpy as np

    xs = np.logspace(np.log10(x_range[0]), np.log10(x_range[1]), 400)
    bw = ceil.datasheet_Bps
    peaks: dict[float, list[str]] = {}
    for name in ROOF_DTYPES:
        peak = ceil.gpu.peak_flops_by_dtype.get(name)
        if peak:
            peaks.setdefault(peak, []).append(name)
    for peak, names in peaks.items():
        ax.plot(xs, np.minimum(peak, bw * xs), "--", lw=0.9, color="0.6")
        ax.plot([peak / bw], [peak], "o", ms=3, color="0.5")
        ax.annotate(f"{'/'.join(names)} datasheet {peak / 1e12:.0f} TFLOP/s (ridge {peak / bw:.0f})",
                    (x_range[1], peak), xytext=(0, 2), textcoords="offset points", ha="right", va="bottom",
                    fontsize=7, color="0.35")
    achievable, abw = ceil.flops_per_s(dtype), ceil.bandwidth_Bps
    ridge = achievable / abw
    ax.plot(xs, np.minimum(achievable, abw * xs), "-", lw=2, color="tab:blue",
            label=f"achievable {dtype} matmul: {achievable / 1e12:.0f} TFLOP/s; {abw / 1e12:.2f} TB/s")
    ax.axvline(ridge, color="tab:blue", lw=0.8, ls=":")
    ax.annotate(f"ridge {ridge:.0f} FLOP/B", (ridge, achievable / 20), xytext=(4, 0), textcoords="offset points",
                fontsize=8, color="tab:blue")


def _clusters(preds: Sequence[OpPrediction], labels: Sequence[str]) -> list[tuple[float, float, str, str]]:
    """Points within ~15% of each other in both axes share one label: (x, y, label, bound)."""
    import math

    out: list[tuple[float, float, list[str], str]] = []
    for pred, label in zip(preds, labels):
        x, y = pred.intensity_flops_per_byte, pred.attained_flops_per_s
        for item in out:
            if abs(math.log(item[0] / x)) < 0.15 and abs(math.log(item[1] / y)) < 0.15:
                if label not in item[2]:
                    item[2].append(label)
                break
        else:
            out.append((x, y, [label], pred.bound))
    return [(x, y, ", ".join(names), bound) for x, y, names, bound in out]


def _draw_points(ax: Any, preds: Sequence[OpPrediction], labels: Sequence[str]) -> None:
    """Each kernel as a point coloured by its bound; few groups get direct labels, many get numbers
    with a key beside the axes (so labels of close points never overlap)."""
    colors = {"compute": "tab:red", "memory": "tab:green", "overhead": "tab:orange"}
    seen = set()
    for pred in preds:
        bound = pred.bound
        ax.plot(pred.intensity_flops_per_byte, pred.attained_flops_per_s, "o", ms=6, color=colors[bound],
                label=f"{bound}-bound" if bound not in seen else None, zorder=3)
        seen.add(bound)
    groups = _clusters(preds, labels)[:MAX_LABELS]
    box = {"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.7}
    if len(groups) <= DIRECT_LABELS:
        for x, y, label, _ in groups:
            ax.annotate(label, (x, y), xytext=(6, -10), textcoords="offset points", fontsize=7, bbox=box)
        return
    key = []
    for i, (x, y, label, _) in enumerate(sorted(groups, key=lambda g: g[0]), start=1):
        ax.annotate(str(i), (x, y), xytext=(4, 4 if i % 2 else -10), textcoords="offset points", fontsize=7,
                    fontweight="bold", bbox=box)
        key.append(f"{i}: {label}")
    ax.text(1.02, 1.0, "\n".join(key), transform=ax.transAxes, va="top", ha="left", fontsize=7, wrap=True)


def _roofline_axes(ax: Any, ceil: Ceilings, preds: Sequence[OpPrediction], labels: Sequence[str], dtype: str,
                   title: str) -> None:
    intensities = [p.intensity_flops_per_byte for p in preds if p.flops > 0]
    low = min([0.1, *[x / 3 for x in intensities]])
    high = max([1e4, *[x * 3 for x in intensities]])
    _draw_roofs(ax, ceil, dtype, (low, high))
    _draw_points(ax, [p for p in preds if p.flops > 0], [lbl for p, lbl in zip(preds, labels) if p.flops > 0])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte of HBM traffic)")
    ax.set_ylabel("attained FLOP/s (FLOPs / predicted time)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    ax.legend(fontsize=7, loc="upper left")


def plot_roofline(ceil: Ceilings, preds: Sequence[OpPrediction], path: str | Path, dtype: str = "bf16",
                  labels: Sequence[str] | None = None, title: str | None = None) -> Path:
    """The roofline of `ceil`'s GPU with each prediction as a point at (intensity, FLOPs / time)."""
    out = _check_path(path)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 6))
    _roofline_axes(ax, ceil, preds, labels or [p.name for p in preds], dtype,
                   title or f"Roofline: {ceil.gpu.name} ({ceil.source})")
    fig.savefig(out, dpi=140, bbox_inches="tight")
    plt.close(fig)
    return out


def _sweep_axes(ax: Any, sweep: Any) -> None:
    points = sweep.points
    batches = [p.options.batch for p in points]
    latency_ms = [p.time_s * 1e3 for p in points]
    ax.plot(batches, [p.tokens_per_s for p in points], "o-", color="tab:blue", label="tokens/s")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch (sequences)")
    ax.set_ylabel("throughput (tokens/s)", color="tab:blue")
    right = ax.twinx()
    right.plot(batches, latency_ms, "s--", color="tab:red", label="latency")
    right.set_ylabel("latency per step (ms)", color="tab:red")
    right.set_ylim(bottom=0)
    cross = sweep.compute_bound_batch
    if cross is not None and batches[0] <= cross <= batches[-1] * 4:
        ax.axvline(cross, color="k", ls=":", lw=1)
        ax.annotate(f"compute-bound from batch {cross}", (cross, ax.get_ylim()[0]), xytext=(4, 8),
                    textcoords="offset points", fontsize=8)
    phase = points[0].options.phase
    tp = points[0].options.tp
    where = points[0].gpu + (f" x{tp} (TP)" if tp > 1 else "")
    ax.set_title(f"{points[0].model} {phase} on {where}: throughput and latency vs batch", fontsize=10)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)


def plot_model(result: Any, path: str | Path, sweep: Any = None) -> Path:
    """A model step's kernels on the roofline; with a sweep, the throughput/latency curve beside it."""
    out = _check_path(path)
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2 if sweep else 1, figsize=(18 if sweep else 12, 6.5), squeeze=False,
                             gridspec_kw={"wspace": 0.55} if sweep else None)
    rows = [r for r in result.rows if r.pass_name == "forward"]
    preds = [r.pred for r in rows]
    labels = [f"{r.pred.name}" + (" (head)" if r.layers == "head" else "") for r in rows]
    o = result.options
    dtype = o.compute_dtype
    title = f"{result.model} {o.phase} kernels (batch {o.batch}) on {result.gpu} ({result.ceilings.source})"
    _roofline_axes(axes[0][0], result.ceilings, preds, labels, dtype, title)
    if sweep:
        _sweep_axes(axes[0][1], sweep)
    fig.savefig(out, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return out
