"""Stacked bars of a memory breakdown across a sweep of one option (matplotlib, imported lazily)."""

from __future__ import annotations

from typing import Mapping, Sequence

from .plotting import check_path, pyplot, save

SUFFIXES = (".png", ".svg", ".pdf")
OPTION_LABELS = {"zero": "ZeRO stage", "recompute": "activation recomputation", "optimizer": "optimizer",
                 "dtype": "weights dtype", "kv_dtype": "KV cache dtype"}


def plot_breakdowns(path: str, title: str, option: str, labels: Sequence[str],
                    breakdowns: Sequence[Mapping[str, int]], capacity_bytes: int | None = None) -> str:
    """One bar per swept value, one stacked segment per breakdown part (GiB); writes `path`."""
    out = check_path(path, suffixes=SUFFIXES)
    plt = pyplot()
    parts = list(breakdowns[0]) if breakdowns else []
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(labels) + 3), 4.5))
    bottoms = [0.0] * len(labels)
    for part in parts:
        heights = [b[part] / 2**30 for b in breakdowns]
        ax.bar(labels, heights, bottom=bottoms, label=part.removesuffix("_bytes"))
        bottoms = [x + y for x, y in zip(bottoms, heights)]
    if capacity_bytes:
        ax.axhline(capacity_bytes / 2**30, color="black", linestyle="--", linewidth=1, label="usable GPU memory")
    ax.set_xlabel(OPTION_LABELS.get(option, option))
    ax.set_ylabel("per-GPU memory (GiB)")
    ax.set_title(title, fontsize=9, wrap=True)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    save(fig, [out])
    return path
