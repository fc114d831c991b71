"""The figure of `mlsys compare`: each card's headline number (and cost, when priced) as bars, fits marked.
matplotlib is imported inside the function."""

from __future__ import annotations

from typing import Any

from .plotting import check_path, pyplot, save

HEADLINE = {"train": ("step_time_s", "step time (s)"), "serve": ("tpot_p50_s", "p50 TPOT (s)"),
            "memory": ("total_bytes", "inference memory per GPU (GB)")}


def plot_compare(data: dict[str, Any], path: str) -> None:
    """Bars per card from `mlsys compare --json`'s data: the task's headline, and its cost beside it when priced."""
    out = check_path(path)
    plt = pyplot()
    cards = [c for c in data["cards"] if c.get("error") is None]
    key, label = HEADLINE[data["task"]]
    scale = 1e-9 if data["task"] == "memory" else 1.0
    priced = [c for c in cards if c.get("cost")]
    fig, axes = plt.subplots(1, 2 if priced else 1, figsize=(11 if priced else 6, 3.8), squeeze=False)
    names = [c["card"] for c in cards]
    colours = ["tab:blue" if c["fits"] is not False else "tab:red" for c in cards]
    ax = axes[0][0]
    ax.bar(names, [c[key] * scale for c in cards], color=colours)
    ax.set_ylabel(label)
    ax.set_title(f"{label} (red: does not fit)")
    if data["task"] == "memory":
        ax.plot(names, [c["usable_bytes"] * scale for c in cards], "k_", markersize=30, label="usable")
        ax.legend()
    if priced:
        cost_key = "cost_per_step" if data["task"] == "train" else "cost_per_million_output_tokens"
        axes[0][1].bar([c["card"] for c in priced], [c["cost"][cost_key] for c in priced], color="tab:green")
        axes[0][1].set_ylabel(cost_key.replace("_", " ") + " (price units)")
        axes[0][1].set_title("cost")
    for row in axes:
        for a in row:
            a.grid(alpha=0.3, axis="y")
            a.tick_params(axis="x", rotation=20)
    fig.suptitle(f"{data['model']}: {data['task']} on each card (mlsys compare, datasheet ceilings unless calibrated)")
    fig.tight_layout()
    save(fig, [out])
