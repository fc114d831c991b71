"""The report's figures, each drawn from the JSON numbers its section quotes (matplotlib, lazily).

One drawer per figure kind (a table, not an if-chain); `draw(figure, paths)` writes SVG and PNG.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from .model_report import Figure
from .plotting import plain_ticks, pyplot, save

GiB = 2**30
PART_COLORS = {"weights": "tab:blue", "gradients": "tab:orange", "optimizer": "tab:green",
               "activations": "tab:red", "temporaries": "tab:purple"}
DPI = 100


def _memory_bars(fig, data: Mapping[str, Any]) -> None:
    """Stacked parts per (ZeRO stage, recomputation): one group of bars per stage, one bar per recomputation
    mode labelled under each bar, the stage under each group (no hatching: slow to draw, hard to read)."""
    ax = fig.add_subplot(1, 1, 1)
    bars = data["bars"]
    modes = list(dict.fromkeys(b["recompute"] for b in bars))
    stages = list(dict.fromkeys(b["zero"] for b in bars))
    width = 0.8 / len(modes)
    xs = [stages.index(b["zero"]) + (modes.index(b["recompute"]) - (len(modes) - 1) / 2) * width for b in bars]
    bottom = [0.0] * len(bars)
    for part, color in PART_COLORS.items():
        heights = [b[part] / GiB for b in bars]
        ax.bar(xs, heights, width * 0.92, bottom=bottom, color=color, label=part)
        bottom = [x + y for x, y in zip(bottom, heights)]
    ax.axhline(data["usable_bytes"] / GiB, color="black", ls="--", lw=1, label="usable GPU memory")
    ax.set_xticks(xs, [b["recompute"] for b in bars], fontsize=7)
    for i, stage in enumerate(stages):
        ax.text(i, -0.08, f"ZeRO-{stage}", transform=ax.get_xaxis_transform(), ha="center", va="top", fontsize=9,
                fontweight="bold")
    ax.set_ylabel("per-GPU memory (GiB)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def _inference_memory(fig, data: Mapping[str, Any]) -> None:
    left, right = fig.subplots(1, 2, gridspec_kw={"wspace": 0.45})
    dtypes = list(data["dtypes"])
    left.bar(dtypes, [data["dtypes"][d] / GiB for d in dtypes], color="tab:blue")
    left.axhline(data["usable_bytes"] / GiB, color="black", ls="--", lw=1, label="usable GPU memory")
    left.set_ylabel("weights per GPU (GiB)")
    left.set_xlabel("weights dtype")
    left.set_title("weights by dtype", fontsize=9)
    left.legend(fontsize=7)
    contexts = [int(c) for c in data["contexts"]]
    right.plot(contexts, [v / GiB for v in data["contexts"].values()], "o-", color="tab:red")
    right.set_xscale("log", base=2)
    right.set_yscale("log")
    plain_ticks(right.xaxis, right.yaxis)
    right.set_xlabel("context (tokens)")
    right.set_ylabel("KV cache of one sequence (GiB)")
    right.set_title("KV cache vs context", fontsize=9)
    right.grid(True, lw=0.3, alpha=0.5)


def _y_scale(ax, values: Sequence[float]) -> None:
    """Log y where the values span a decade or more (a log axis over less shows no labels), else linear."""
    if min(values) > 0 and max(values) / min(values) >= 10:
        ax.set_yscale("log")
        plain_ticks(ax.yaxis)
    else:
        ax.set_ylim(bottom=0)


def _roofline_curves(fig, data: Mapping[str, Any]) -> None:
    axes = fig.subplots(1, 2, gridspec_kw={"wspace": 0.45})
    for ax, phase, latency in ((axes[0], "prefill", "time to first token (ms)"),
                               (axes[1], "decode", "time per output token (ms)")):
        points = data[phase]
        batch = [p["batch"] for p in points]
        rates = [p["tokens_per_s"] for p in points]
        ax.plot(batch, rates, "o-", color="tab:blue")
        ax.set_xscale("log", base=2)
        plain_ticks(ax.xaxis)
        _y_scale(ax, rates)
        ax.set_xlabel("batch (sequences)")
        ax.set_ylabel("tokens/s (solid)", color="tab:blue")
        twin = ax.twinx()
        twin.plot(batch, [p["predicted_s"] * 1e3 for p in points], "s--", color="tab:red")
        twin.set_ylabel(latency + " (dashed)", color="tab:red")
        twin.set_ylim(bottom=0)
        compute = [p["batch"] for p in points if p["bound"] == "compute"]
        if compute:
            ax.axvline(compute[0], color="k", ls=":", lw=1)
        where = f"compute-bound from batch {compute[0]}" if compute else "memory-bound at every batch"
        ax.set_title(f"{phase}: {where}", fontsize=9)
        ax.grid(True, lw=0.3, alpha=0.5)


def _op_share(fig, data: Mapping[str, Sequence]) -> None:
    axes = fig.subplots(1, len(data), gridspec_kw={"wspace": 0.35}, squeeze=False)[0]
    for ax, (label, items) in zip(axes, data.items()):
        names = [name for name, _ in items][::-1]
        ax.barh(names, [100 * share for _, share in items][::-1], color="tab:blue")
        ax.set_xlabel("share of the step (%)")
        ax.set_title(label, fontsize=9)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(True, axis="x", lw=0.3, alpha=0.5)


def _serving_latency(fig, data: Mapping[str, Any]) -> None:
    ax = fig.add_subplot(1, 1, 1)
    rates = data["rates"]
    for key, label, style in (("ttft", "TTFT", "o"), ("tpot", "TPOT", "s"), ("e2e", "end to end", "^")):
        for q, ls in (("p50", "-"), ("p99", "--")):
            values = [p.get(f"{key}_{q}_s") for p in data["points"]]
            if all(v is not None for v in values):
                ax.plot(rates, [v * 1e3 for v in values], style + ls, label=f"{label} {q}")
    ax.set_xlabel("request rate (requests/s)")
    ax.set_ylabel("latency (ms)")
    ax.set_yscale("log")
    plain_ticks(ax.yaxis)
    ax.grid(True, lw=0.3, alpha=0.5)
    ax.legend(fontsize=7, ncol=3)


def _frontier(fig, data: Mapping[str, Any]) -> None:
    """N_opt(C) and D_opt(C) of every law, with the model's N and its compute-optimal D marked."""
    from .scaling_plots import frontier_panel

    frontier_panel(fig.add_subplot(1, 1, 1), data["law"], tuple(data["point"]))


# kind -> (drawer, figure size in inches, margins for subplots_adjust)
DRAWERS: Mapping[str, tuple[Callable, tuple[float, float], Mapping[str, float]]] = {
    "memory_bars": (_memory_bars, (10, 5), {"left": 0.08, "right": 0.8, "bottom": 0.14, "top": 0.9}),
    "inference_memory": (_inference_memory, (12, 4.6), {"left": 0.07, "right": 0.97, "bottom": 0.13, "top": 0.86}),
    "roofline_curves": (_roofline_curves, (13, 4.6), {"left": 0.07, "right": 0.93, "bottom": 0.13, "top": 0.86}),
    "op_share": (_op_share, (12, 4.6), {"left": 0.1, "right": 0.97, "bottom": 0.13, "top": 0.86}),
    "serving_latency": (_serving_latency, (9, 4.6), {"left": 0.1, "right": 0.97, "bottom": 0.13, "top": 0.88}),
    "frontier": (_frontier, (9, 5.2), {"left": 0.1, "right": 0.97, "bottom": 0.11, "top": 0.88}),
}


def draw(figure: Figure, paths: Sequence) -> list:
    """Draw `figure` once and write it to every path (SVG and PNG)."""
    drawer, size, margins = DRAWERS[figure.kind]
    plt = pyplot()
    fig = plt.figure(figsize=size)
    drawer(fig, figure.data)
    fig.suptitle(figure.title, fontsize=10)
    fig.subplots_adjust(**margins)
    return save(fig, paths, dpi=DPI, tight=False)
