"""Stacked bars of a memory breakdown across a sweep of one option (matplotlib, imported lazily)."""

from __future__ import annotations

from typing import Mapping, Sequence


def plot_breakdowns(path: str, title: str, option: str, labels: Sequence[str],
                    breakdowns: Sequence[Mapping[str, int]], capacity_bytes: int | None = None) -> str:
    """One bar per swept value, one stacked segment per breakdown part (GiB); writes `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parts = list(breakdowns[0]) if breakdowns else []
    fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(labels) + 2), 4.5))
    bottoms = [0.0] * len(labels)
    for part in parts:
        heights = [b[part] / 2**30 for b in breakdowns]
        ax.bar(labels, heights, bottom=bottoms, label=part)
        bottoms = [x + y for x, y in zip(bottoms, heights)]
    if capacity_bytes:
        ax.axhline(capacity_bytes / 2**30, color="black", linestyle="--", linewidth=1, label="usable GPU memory")
    ax.set_xlabel(option)
    ax.set_ylabel("per-GPU memory (GiB)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
