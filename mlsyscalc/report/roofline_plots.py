"""Roofline figures: the GPU's roofs with each kernel as a labelled point, and the batch sweep.

matplotlib is imported inside the functions (Agg backend), so importing this module is cheap.
The format follows the file extension (.png or .svg).
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Sequence

from ..calc.roofline.calibration import Ceilings
from ..calc.roofline.ops import OpPrediction
from .plotting import check_path, plain_ticks, pyplot, save

ROOF_DTYPES = ("fp32", "tf32", "bf16", "fp8", "int8")
MAX_LABELS = 30
DIRECT_LABELS = 3  # more label groups than this are numbered, with a key in its own panel
KEY_WIDTH = 44  # characters per line of that key


def _draw_roofs(ax: Any, ceil: Ceilings, dtype: str, x_range: tuple[float, float]) -> None:
    """Datasheet roofs per dtype (dashed, one legend entry), the achievable roof of `dtype` (solid) and its
    ridge. Roof values go in the legend, not on the lines, so no kernel label can land on them."""
    import numpy as np

    xs = np.logspace(np.log10(x_range[0]), np.log10(x_range[1]), 400)
    bw = ceil.datasheet_Bps
    peaks: dict[float, list[str]] = {}
    for name in ROOF_DTYPES:
        peak = ceil.gpu.peak_flops_by_dtype.get(name)
        if peak:
            peaks.setdefault(peak, []).append(name)
    text = ", ".join(f"{'/'.join(names)} {peak / 1e12:.0f}" for peak, names in sorted(peaks.items(), reverse=True))
    for i, peak in enumerate(peaks):
        ax.plot(xs, np.minimum(peak, bw * xs), "--", lw=0.9, color="0.6",
                label=f"datasheet roofs, TFLOP/s: {text}" if i == 0 else None)
        ax.plot([peak / bw], [peak], "o", ms=3, color="0.5")
    achievable, abw = ceil.flops_per_s(dtype), ceil.bandwidth_Bps
    ridge = achievable / abw
    ax.plot(xs, np.minimum(achievable, abw * xs), "-", lw=2, color="tab:blue",
            label=f"achievable {dtype} matmul: {achievable / 1e12:.0f} TFLOP/s, {abw / 1e12:.2f} TB/s, "
                  f"ridge {ridge:.0f} FLOP/B (dotted)")
    ax.axvline(ridge, color="tab:blue", lw=0.8, ls=":")


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


def _draw_points(ax: Any, preds: Sequence[OpPrediction], labels: Sequence[str], key_ax: Any = None) -> None:
    """Each kernel as a point coloured by its bound; up to DIRECT_LABELS groups get direct labels, more get
    numbers (alternating above/below along x) with a key in `key_ax` (beside the axes if None)."""
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
        key.append(textwrap.fill(f"{i}: {label}", KEY_WIDTH, subsequent_indent="    "))
    if key_ax is None:
        ax.text(1.02, 1.0, "\n".join(key), transform=ax.transAxes, va="top", ha="left", fontsize=7)
    else:
        key_ax.axis("off")
        key_ax.text(0.0, 1.0, "kernels\n" + "\n".join(key), transform=key_ax.transAxes, va="top", ha="left",
                    fontsize=7)


def _roofline_axes(ax: Any, ceil: Ceilings, preds: Sequence[OpPrediction], labels: Sequence[str], dtype: str,
                   title: str, key_ax: Any = None) -> None:
    intensities = [p.intensity_flops_per_byte for p in preds if p.flops > 0]
    low = min([0.1, *[x / 3 for x in intensities]])
    high = max([1e4, *[x * 3 for x in intensities]])
    _draw_roofs(ax, ceil, dtype, (low, high))
    _draw_points(ax, [p for p in preds if p.flops > 0], [lbl for p, lbl in zip(preds, labels) if p.flops > 0],
                 key_ax)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte of HBM traffic)")
    ax.set_ylabel("attained FLOP/s (FLOPs / predicted time)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    if key_ax is None:
        ax.legend(fontsize=7, loc="upper left")
    else:  # beside the axes, under the kernel key: over the roofs it would hide them
        handles, names = ax.get_legend_handles_labels()
        key_ax.legend(handles, [textwrap.fill(n, KEY_WIDTH) for n in names], fontsize=7, loc="lower left",
                      frameon=False)


def plot_roofline(ceil: Ceilings, preds: Sequence[OpPrediction], path: str | Path, dtype: str = "bf16",
                  labels: Sequence[str] | None = None, title: str | None = None) -> Path:
    """The roofline of `ceil`'s GPU with each prediction as a point at (intensity, FLOPs / time)."""
    out = check_path(path)
    fig, ax = pyplot().subplots(figsize=(10, 6))
    what = ", ".join(f"{p.name} {p.shape} ({p.dtype})" for p in preds[:3]) + (", ..." if len(preds) > 3 else "")
    _roofline_axes(ax, ceil, preds, labels or [p.name for p in preds], dtype,
                   title or f"Roofline of {what} on {ceil.gpu.name} ({ceil.source})")
    return save(fig, [out], dpi=140)[0]


def _sweep_axes(ax: Any, sweep: Any) -> None:
    points = sweep.points
    batches = [p.options.batch for p in points]
    latency_ms = [p.time_s * 1e3 for p in points]
    ax.plot(batches, [p.tokens_per_s for p in points], "o-", color="tab:blue", label="tokens/s")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    plain_ticks(ax.xaxis)
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
    o = points[0].options
    tokens = f"context {o.context}" if o.phase == "decode" else f"seq {o.seq}"
    ax.set_title(f"{points[0].model} {o.phase} ({tokens}, {o.dtype}) on {where_text(points[0])}:\n"
                 "throughput (solid) and latency (dashed) vs batch", fontsize=10)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)


def where_text(result: Any) -> str:
    """'H100-SXM x8 (TP)': the GPU and the layout a model figure is for."""
    tp = result.options.tp
    return result.gpu + (f" x{tp} (TP)" if tp > 1 else "")


def plot_model(result: Any, path: str | Path, sweep: Any = None) -> Path:
    """A model step's kernels on the roofline with their key in a panel of its own; with a sweep, the
    throughput/latency curve beside them."""
    out = check_path(path)
    plt = pyplot()
    widths = [3, 1.2, 3] if sweep else [3, 1.2]
    fig, axes = plt.subplots(1, len(widths), figsize=(20 if sweep else 13, 6.5),
                             gridspec_kw={"width_ratios": widths, "wspace": 0.3})
    rows = [r for r in result.rows if r.pass_name == "forward"]
    preds = [r.pred for r in rows]
    labels = [f"{r.pred.name}" + (" (head)" if r.layers == "head" else "") for r in rows]
    o = result.options
    dtype = o.compute_dtype
    tokens = f"context {o.context}" if o.phase == "decode" else f"seq {o.seq}"
    title = (f"{result.model} {o.phase} kernels (batch {o.batch}, {tokens}, {o.dtype}) on {where_text(result)}"
             f"\nceilings: {result.ceilings.source}")
    _roofline_axes(axes[0], result.ceilings, preds, labels, dtype, title, key_ax=axes[1])
    axes[1].axis("off")
    if sweep:
        _sweep_axes(axes[2], sweep)
    return save(fig, [out], dpi=130)[0]
