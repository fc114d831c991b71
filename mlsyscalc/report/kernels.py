"""reports/matmul and reports/quant from their rows: goals, every row, roofline error, a plot.

`write("matmul", folder, command)` reads folder/rows.jsonl and folder/ceilings.json (what
`scripts/device.sh kernels` wrote) and writes folder/README.md and the plot; `mlsys bench report`
calls it. Every number in the markdown comes from those rows; nothing is typed in by hand.
"""

from __future__ import annotations

from pathlib import Path

from ..bench.rows import ResultStore, Row
from ..bench.summary import geomean
from .markdown import markdown_table


def _weight_only_goal(title: str, kernel: str, goal: float) -> tuple:
    """A GOALS entry for one weight-only kernel against bf16 torch.matmul: the same bar for geomean and min."""
    return (title, "bf16 torch.matmul", lambda r: r.kernel == kernel, f">= {goal}x", goal, goal)


GOALS = (  # (title, baseline, rows filter, goal text, threshold on geomean, threshold on min)
    ("bf16 matmul, prefill shapes + squares", "torch.matmul (cuBLAS)",
     lambda r: r.kernel == "triton_matmul" and r.dtype == "bfloat16", "geomean >= 1.0x, none below 0.85x", 1.0, 0.85),
    ("fp8 e4m3 matmul (per-tensor scales), same shapes", "torch._scaled_mm",
     lambda r: r.kernel == "triton_matmul" and r.dtype == "fp8_tensor", "geomean >= 1.0x", 1.0, None),
    *(_weight_only_goal(title, kernel, goal) for title, kernel, goal in (
        ("W8A16, M = 1, 4, 16, llama2-7b / llama3-70b weights", "triton_w8a16", 1.8),
        ("W8A16, same, one-launch kernel (rows of the former w8a16_gemv kind)", "triton_w8a16_gemv", 1.8),
        ("W4A16 (g=128), same", "triton_w4a16", 3.0),
        ("W4A16 (g=128), one-launch kernel (rows of the former w4a16_gemv kind)", "triton_w4a16_gemv", 3.0))),
    ("W8A8 int8 GEMM, 4096..8192 squares", "torch._int_mm",
     lambda r: r.kernel == "triton_w8a8", ">= 4x", 4.0, 4.0),
)


_MATMUL_DTYPES = {  # row dtype -> predict_matmul(dtype, weight_dtype, out_dtype)
    "bfloat16": ("bf16", None, None), "float16": ("fp16", None, None),
    "fp8_tensor": ("fp8", None, None), "fp8_row": ("fp8", None, None),
    "w8a16": ("bf16", "int8", None), "w4a16_g128": ("bf16", "int4", None), "int8_rowcol": ("int8", None, "bf16"),
}


def add_predictions(rows: list[Row], ceilings: dict) -> None:
    """Fill predicted_ms / prediction_error from the roofline calculator and the same card's calibration."""
    from ..calc.roofline.calibration import load_ceilings
    from ..calc.roofline.ops import predict_matmul, predict_memory_op

    ceil = load_ceilings(calibration=ceilings)
    for r in rows:
        if r.median_ms is None:
            continue
        dims = [int(d) for d in r.shape.split("x")]
        if r.dtype in _MATMUL_DTYPES and len(dims) == 3:
            dtype, weight, out = _MATMUL_DTYPES[r.dtype]
            m, n, k = dims
            pred = predict_matmul(m, n, k, dtype=dtype, gpu=ceil, weight_dtype=weight, out_dtype=out)
        elif r.kernel == "triton_quantize" and r.bytes:
            read = dims[0] * dims[1] * 2.0   # bf16 input
            pred = predict_memory_op("quantize", read, r.bytes - read, gpu=ceil)
        else:
            continue
        r.predicted_ms = pred.predicted_s * 1e3
        r.prediction_error = None
        r.finish()


def _num(value: float | None) -> float:
    """A row's number where the caller kept only rows that have it (filtered on truthiness)."""
    assert value is not None
    return value


def _fmt(value, spec=".2f", suffix=""):
    return "n/a" if value is None else f"{value:{spec}}{suffix}"


def _env_line(rows: list[Row], ceilings: dict | None) -> str:
    env = next((r.env for r in rows if r.env), {})
    line = (f"Card: **{env.get('gpu')}** ({env.get('sm_count')} SMs, driver {env.get('driver')}, "
            f"SM clock {env.get('sm_clock_MHz')}/{env.get('max_sm_clock_MHz')} MHz); torch {env.get('torch')}, "
            f"triton {env.get('triton')}, CUDA {env.get('cuda')}; commits "
            f"{', '.join(sorted({'`%s`' % r.env.get('git_commit') for r in rows}))} (each row names its own); "
            f"measured {min((r.measured_at or '') for r in rows)} to {max((r.measured_at or '') for r in rows)}.")
    if ceilings:
        bw = ceilings["bandwidth_Bps"]
        peaks = ", ".join(f"{k} {v / 1e12:.0f}" for k, v in ceilings["peak_flops"].items() if v)
        line += (f"\n\nCeilings on the same card (`mlsys bench ceilings`): matmul peak TFLOP/s {peaks}; "
                 f"HBM read {bw['read'] / 1e9:.0f}, write {bw['write'] / 1e9:.0f}, copy {bw['copy'] / 1e9:.0f} GB/s.")
    return line


def goals_table(rows: list[Row], ceilings: dict | None) -> list[str]:
    out = []
    for title, baseline, keep, goal, g_goal, m_goal in GOALS:
        chosen = [r for r in rows if keep(r)]
        timed = [r for r in chosen if r.speedup]
        if not chosen:
            continue
        gm = geomean([_num(r.speedup) for r in timed])
        worst = min(timed, key=lambda r: _num(r.speedup)) if timed else None
        met = gm is not None and gm >= g_goal and (m_goal is None or (worst and _num(worst.speedup) >= m_goal))
        out.append([title, baseline, goal, _fmt(gm, '.3f', 'x'),
                    f"{_fmt(worst.speedup if worst else None, '.2f', 'x')} ({worst.shape if worst else '-'})",
                    f"{len(timed)} / {sum(1 for r in chosen if r.error)}", 'yes' if met else 'no'])
    for title, _, keep, *_ in GOALS[:2]:  # the same goals without the small squares (launch-bound)
        big = [r for r in rows if keep(r) and r.speedup and not _small_square(r.shape)]
        if big:
            worst = min(big, key=lambda r: _num(r.speedup))
            out.append([f"{title}, without 1024^3 and 2048^3", "", "", f"{_num(geomean([_num(r.speedup) for r in big])):.3f}x",
                        f"{worst.speedup:.2f}x ({worst.shape})", f"{len(big)} / 0", ""])
    if ceilings:
        copy = ceilings["bandwidth_Bps"]["copy"] / 1e9
        mem = [r for r in rows if r.GBps and r.kernel.startswith(("triton_quantize", "triton_w8a16", "triton_w4a16"))]
        if mem:
            best = max(mem, key=lambda r: _num(r.GBps))
            best_GBps = _num(best.GBps)
            out.append(["any memory-bound kernel (quantize, GEMV)", f"measured copy {copy:.0f} GB/s", ">= 85%",
                        f"best {best_GBps / copy:.0%} ({best.kernel} {best.dtype} {best.shape})", "",
                        f"{len(mem)} rows", 'yes' if best_GBps / copy >= 0.85 else 'no'])
        out += _w4a16_read_rows(rows, ceilings["bandwidth_Bps"]["read"] / 1e9)
    out += _prefill_rows(rows)
    return markdown_table(["kernel", "baseline", "goal", "measured geomean", "measured min (shape)", "timed / failed",
                           "met?"], out, "lllllll")


def _w4a16_read_rows(rows: list[Row], read_GBps: float) -> list[list]:
    """W4A16 decode on the largest weight (most bytes): its bytes / time as a share of the measured read bandwidth."""
    decode = [r for r in rows if r.kernel in ("triton_w4a16", "triton_w4a16_gemv") and r.GBps
              and int(r.shape.split("x")[0]) <= 16]
    if not decode:
        return []
    top = max(int(r.shape.split("x")[1]) * int(r.shape.split("x")[2]) for r in decode)
    biggest = [r for r in decode if int(r.shape.split("x")[1]) * int(r.shape.split("x")[2]) == top]
    best = max(biggest, key=lambda r: _num(r.GBps))
    best_GBps = _num(best.GBps)
    return [["W4A16 decode, largest weight: bytes / time", f"measured read {read_GBps:.0f} GB/s", ">= 75%",
             f"{best_GBps / read_GBps:.0%} ({best.kernel} {best.shape})", "", f"{len(biggest)} rows",
             "yes" if best_GBps / read_GBps >= 0.75 else "no"]]


def _prefill_rows(rows: list[Row]) -> list[list]:
    """W8A16 / W4A16 at prefill M (>= 2048): dequantize once + cuBLAS against bf16 cuBLAS, goal 0.9x."""
    out = []
    for kernel in ("triton_w8a16", "triton_w4a16"):
        timed = [r for r in rows if r.kernel == kernel and r.speedup and int(r.shape.split("x")[0]) >= 2048]
        if timed:
            worst = min(timed, key=lambda r: _num(r.speedup))
            out.append([f"{kernel[7:].upper()} prefill, M >= 2048", "bf16 torch.matmul", ">= 0.9x",
                        f"{_num(geomean([_num(r.speedup) for r in timed])):.3f}x", f"{_num(worst.speedup):.2f}x ({worst.shape})",
                        f"{len(timed)} / 0", "yes" if _num(worst.speedup) >= 0.9 else "no"])
    return out


def _small_square(shape: str) -> bool:
    dims = set(shape.split("x"))
    return len(dims) == 1 and int(dims.pop()) < 4096


def rows_table(rows: list[Row], copy_GBps: float | None) -> list[str]:
    columns = ["kernel", "dtype", "shape (MxNxK)", "ms", "baseline ms", "TFLOP/s", "GB/s", "% copy BW", "speedup",
               "rel err", "roofline ms", "error vs roofline", "host us/call", "error"]
    body = [[r.kernel, r.dtype, r.shape, _fmt(r.median_ms, '.4f'), _fmt(r.baseline_median_ms, '.4f'),
             _fmt(r.tflops_per_s, '.0f'), _fmt(r.GBps, '.0f'), f"{r.GBps / copy_GBps:.0%}" if (r.GBps and copy_GBps) else "",
             _fmt(r.speedup, '.2f', 'x'), _fmt(r.rel_err, '.1e'), _fmt(r.predicted_ms, '.4f'),
             _fmt(r.prediction_error and 100 * r.prediction_error, '+.0f', '%'), _fmt(r.extra.get('host_us'), '.0f'),
             (r.error or '')[:80]] for r in rows]
    return markdown_table(columns, body, "l" * len(columns))


def plot(rows: list[Row], path: Path, metric: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict[str, list[Row]] = {}
    for r in rows:
        if getattr(r, metric):
            groups.setdefault(f"{r.kernel} {r.dtype}", []).append(r)
    if not groups:
        return
    fig, axes = plt.subplots(len(groups), 1, figsize=(11, 3.2 * len(groups)), squeeze=False)
    for ax, (name, members) in zip(axes[:, 0], groups.items()):
        xs = range(len(members))
        ax.bar([x - 0.2 for x in xs], [getattr(r, metric) for r in members], 0.4, label="triton")
        ax.bar([x + 0.2 for x in xs], [getattr(r, "baseline_" + metric) or 0 for r in members], 0.4,
               label=members[0].baseline)
        ax.set_xticks(list(xs), [r.shape for r in members], rotation=60, fontsize=7, ha="right")
        ax.set_ylabel(metric.replace("tflops_per_s", "TFLOP/s").replace("GBps", "GB/s"))
        # both bars divide the Triton kernel's bytes by each side's time: for a quantised kernel against a
        # 16-bit baseline that is a time ratio in bandwidth units, not the baseline's own bandwidth
        ax.set_title(name + (" (GB/s = the kernel's bytes / each time)" if metric == "GBps" else ""), fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(name: str, rows: list[Row], ceilings: dict | None, out_dir: Path, notes: list[str], command: str):
    out_dir.mkdir(parents=True, exist_ok=True)
    metric = "tflops_per_s" if name == "matmul" else "GBps"
    plot(rows, out_dir / f"{name}.png", metric, f"{name}: Triton vs torch baseline")
    copy = ceilings["bandwidth_Bps"]["copy"] / 1e9 if ceilings else None
    text = [f"# {name}: measured on a GPU", "",
            f"Generated by `{command}` from `rows.jsonl` (rows written by `mlsys bench {name} ...` through "
            f"`scripts/device.sh kernels`; notes.md below says which call wrote which rows). Do not edit by hand.", "",
            _env_line(rows, ceilings), "", "## Goals", "", *goals_table(rows, ceilings), "",
            *notes, "", "## All rows", "",
            "`roofline ms` is `mlsyscalc.calc.roofline.ops` (predict_matmul / predict_memory_op) fed with the "
            "ceilings measured in the same run; `error vs roofline` = (measured - predicted) / predicted. "
            "`host us/call`: host time per call over 20 back-to-back calls without synchronisation; do_bench's "
            "L2-flushing memset before each timed call (about 60 us on this card) hides host time below it.", "",
            *rows_table(rows, copy), "", f"![{name}]({name}.png)", ""]
    path = out_dir / "README.md"
    path.write_text("\n".join(text))
    return path


def write(name: str, folder: Path, command: str) -> Path:
    """folder/README.md and the plot (name: matmul or quant) from folder/rows.jsonl and folder/ceilings.json
    (the same card's ceilings, for the roofline column)."""
    from ..calc.roofline.calibration import read_calibration

    ceilings_path = folder / "ceilings.json"
    ceilings = read_calibration(ceilings_path) if ceilings_path.exists() else None
    rows = ResultStore(folder / "rows.jsonl").rows()
    if ceilings:
        add_predictions(rows, ceilings)
    notes = folder / "notes.md"   # the written analysis, kept beside the data
    return write_report(name, rows, ceilings, folder, notes.read_text().splitlines() if notes.exists() else [], command)
