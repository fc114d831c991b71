"""reports/fused/README.md and its plot from the rows of `mlsys bench fused` (`mlsys bench report` calls `write`).

Rows come from `mlsys bench fused --out rows.jsonl` (`scripts/device.sh fused` on the GPU machine). Every
number on the page is read from those rows, and each row's prediction is re-priced here with the current
calc/roofline/fused_ops.py (on the card's datasheet, or on folder/ceilings.json where the folder has one).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from ..bench.cases.fused import OPS, card_of, passes_of, price_ms
from ..bench.rows import ResultStore, Row
from ..bench.summary import geomean
from .markdown import markdown_table

LARGE_BYTES = 64e6   # "large" calls, past the fixed costs: the summary's bandwidth medians use these


def copy_row(rows: list[Row]) -> Row | None:
    """The fastest torch_copy row of the run (GB/s = read + write bytes / time)."""
    return max((r for r in rows if r.kernel == "torch_copy" and r.ok and r.GBps), key=lambda r: r.GBps or 0,
               default=None)


def reprice(rows: list[Row], calibration: dict | None) -> str:
    """Fill predicted_ms / prediction_error of every timed fused row; the words naming the ceilings used."""
    gpus = set()
    for r in rows:
        op, pass_ = r.extra.get("op"), r.extra.get("pass")
        gpu = card_of(r.env)
        if not r.median_ms or op not in OPS or gpu is None:
            continue
        head_dim = r.extra.get("head_dim")
        r.predicted_ms = price_ms(f"{op}_{pass_}", int(r.extra["tokens"]), int(r.extra["width"]), r.dtype, gpu,
                                  calibration, **({"head_dim": int(head_dim)} if head_dim else {}))
        r.prediction_error = None
        r.finish()
        gpus.add(gpu)
    source = "folder's ceilings.json (`mlsys bench ceilings`)" if calibration else "datasheet"
    return f"{', '.join(sorted(gpus)) or 'no matched card'}, {source}"


def _fmt(x: float | None, spec: str = ".0f", suffix: str = "") -> str:
    return "-" if x is None else f"{x:{spec}}{suffix}"


def _pct(rate: float | None, bw: float | None) -> str:
    return f"{100 * rate / bw:.0f}%" if rate and bw else "-"


def _size(r: Row) -> tuple[int, int]:
    return int(r.extra.get("width", 0)), int(r.extra.get("tokens", 0))


def op_rows(rows: list[Row], op: str, pass_: str) -> list[Row]:
    return sorted((r for r in rows if r.kernel == f"triton_{op}_{pass_}"), key=lambda r: (*_size(r), r.shape))


def op_table(chosen: list[Row], bw: float | None) -> list[str]:
    body = []
    for r in chosen:
        width, tokens = _size(r)
        err = r.prediction_error
        body.append([r.shape, f"{tokens * width:,}", _fmt(r.bytes and r.bytes / 1e6, ".2f"),
                     _fmt(r.median_ms and r.median_ms * 1e3, ".1f"), _fmt(r.GBps), _pct(r.GBps, bw),
                     _fmt(r.baseline_median_ms and r.baseline_median_ms * 1e3, ".1f"), _fmt(r.baseline_GBps),
                     _pct(r.baseline_GBps, bw), _fmt(r.speedup, ".2f", "x"),
                     _fmt(r.predicted_ms and r.predicted_ms * 1e3, ".1f"), _fmt(err and 100 * err, "+.0f", "%"),
                     _fmt(r.rel_err, ".1e"), (r.error or "")[:80]])
    return markdown_table(["shape", "tokens x width", "MB moved", "ours us", "ours GB/s", "ours % copy",
                           "torch us", "torch GB/s", "torch % copy", "torch us / ours", "predicted us",
                           "measured vs predicted", "rel err", "error"], body)


def floor_adjusted(timed: list[Row]) -> list[float]:
    """Errors (measured - predicted) / predicted once the timing's own fixed cost is added to the prediction:
    do_bench times one call after an L2 flush, event to event, and the kernel's smallest row (under 1 MB moved)
    measures that cost beyond the priced launch; every other row is scored with it added (the smallest row
    itself is not scored). A step of back-to-back kernels does not pay it (docs/bench.md, "Fused kernels")."""
    priced = [r for r in timed if r.predicted_ms and r.median_ms]
    if len(priced) < 2:
        return []
    floor = min(priced, key=lambda r: r.bytes or 0)
    extra = max(0.0, (floor.median_ms or 0.0) - (floor.predicted_ms or 0.0))
    return [(r.median_ms or 0.0) / ((r.predicted_ms or 0.0) + extra) - 1 for r in priced if r is not floor]


def summary_table(rows: list[Row], bw: float | None) -> list[str]:
    body = []
    for op in OPS:
        for pass_ in passes_of(op):
            chosen = op_rows(rows, op, pass_)
            if not chosen:
                continue
            timed = [r for r in chosen if r.median_ms]
            large = [r for r in timed if (r.bytes or 0) >= LARGE_BYTES]
            errs = [r.prediction_error for r in timed if r.prediction_error is not None]
            worst = max(timed, key=lambda r: abs(r.prediction_error or 0), default=None)
            ours = statistics.median([r.GBps for r in large if r.GBps]) if large else None
            theirs = [r.baseline_GBps for r in large if r.baseline_GBps]
            adjusted = floor_adjusted(timed)
            body.append([f"{op} {pass_}", f"{len(timed)} / {len(chosen) - len(timed)}", _fmt(ours),
                         _pct(ours, bw), _fmt(statistics.median(theirs) if theirs else None),
                         _fmt(geomean([r.speedup for r in timed if r.speedup]), ".2f", "x"),
                         _fmt(statistics.median(abs(e) for e in errs) * 100 if errs else None, ".0f", "%"),
                         f"{_fmt((worst.prediction_error or 0) * 100, '+.0f', '%')} ({worst.shape})" if errs and worst
                         else "-",
                         f"{sum(abs(e) <= 0.15 for e in adjusted)} / {len(adjusted)}" if adjusted else "-",
                         _fmt(max(abs(e) for e in adjusted) * 100 if adjusted else None, ".0f", "%")])
    return markdown_table(["op, pass", "timed / failed", f"ours GB/s (median, >= {LARGE_BYTES / 1e6:.0f} MB)",
                           "% copy", "torch GB/s (same)", "torch us / ours (geomean)", "median abs(error)",
                           "worst error (shape)", "within 15%, timing floor added", "worst, floor added"], body)


def plot(rows: list[Row], bw: float | None, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = [op for op in OPS if any(r.extra.get("op") == op and r.GBps for r in rows)]
    if not ops:
        return
    fig, axes = plt.subplots((len(ops) + 1) // 2, 2, figsize=(12, 3.4 * ((len(ops) + 1) // 2)), squeeze=False)
    for ax, op in zip(axes.flat, ops):
        for pass_ in passes_of(op):
            timed = sorted((r for r in op_rows(rows, op, pass_) if r.GBps and r.bytes), key=lambda r: r.bytes or 0)
            xs = [r.bytes for r in timed]
            ax.plot(xs, [r.GBps for r in timed], "o", ms=3, label=f"ours {pass_}")
            ax.plot(xs, [r.baseline_GBps for r in timed], "x", ms=3, label=f"torch {pass_}")
        if bw:
            ax.axhline(bw, color="grey", lw=0.8, ls="--", label="copy")
        ax.set_xscale("log")
        ax.set_title(op, fontsize=10)
        ax.set_xlabel("bytes moved (fewest)")
        ax.set_ylabel("GB/s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(ops):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(folder: Path, command: str) -> Path:
    """folder/README.md and gbps_vs_bytes.png from folder/rows.jsonl (rows of `mlsys bench fused`)."""
    rows = ResultStore(folder / "rows.jsonl").rows()
    calib_path = folder / "ceilings.json"
    calibration = json.loads(calib_path.read_text()) if calib_path.exists() else None
    priced_on = reprice(rows, calibration)
    copy = copy_row(rows)
    bw = copy.GBps if copy else None
    env = next((r.env for r in rows if r.env.get("gpu")), {})
    commits = sorted({str(r.env.get("git_commit")) for r in rows})
    times = sorted(r.measured_at for r in rows if r.measured_at)
    plot(rows, bw, folder / "gbps_vs_bytes.png")
    notes = folder / "notes.md"
    text = [
        "# Fused memory-bound kernels vs torch",
        "",
        f"Card: {env.get('gpu')} ({env.get('sm_count')} SMs, driver {env.get('driver')}); torch {env.get('torch')}, "
        f"triton {env.get('triton')}, CUDA {env.get('cuda')}; commits {', '.join(commits)} (each row names its own); "
        f"measured {times[0] if times else '?'} to {times[-1] if times else '?'}.",
        f"Generated by `{command}` from `rows.jsonl` (written by `mlsys bench fused`, `scripts/device.sh fused` "
        "on the GPU machine; the last row of each key counts). Do not edit by hand.",
        "",
        "Bytes are calc/roofline/fused_ops.py's fewest bytes (each tensor read or written once; the backward's fp32 "
        "weight-gradient partials are left out and kept in `extra_partial_bytes`); GB/s = those bytes / the "
        "do_bench median (L2 flushed), for ours and for torch alike, so torch's GB/s is a time in our units. "
        "Backward rows time the backward alone. Every row passed an fp32-reference gate before it was timed. "
        f"Predictions: `predict_fused` ({priced_on}); error = (measured - predicted) / predicted. Each op's "
        "smallest row measures do_bench's own fixed cost of a timed call beyond the priced launch (the L2 flush's "
        "cold start, event to event); the last two columns score the other rows with it added to the prediction.",
        "",
        f"Measured copy bandwidth (`torch_copy`: a torch copy of {copy.shape if copy else '-'}, read + write "
        f"counted): {_fmt(bw)} GB/s.",
        "",
        "## Summary",
        "",
        *summary_table(rows, bw),
        "",
        "![GB/s against bytes moved](gbps_vs_bytes.png)",
        "",
    ]
    for op in OPS:
        for pass_ in passes_of(op):
            chosen = op_rows(rows, op, pass_)
            if chosen:
                text += [f"## {op} {pass_} (baseline {chosen[0].baseline})", "", *op_table(chosen, bw), ""]
    failed = [r for r in rows if r.error]
    text += [notes.read_text() if notes.exists() else "", "", "## Rows that failed (not timed)", "",
             *(markdown_table(["kernel", "shape", "error"], [[r.kernel, r.shape, (r.error or "")[:120]] for r in failed])
               if failed else ["None."]), ""]
    path = folder / "README.md"
    path.write_text("\n".join(text))
    return path
