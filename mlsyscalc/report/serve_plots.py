"""Figures for `mlsys serve`: latency percentiles against the arrival rate (a sweep), or the CDFs of
TTFT, TPOT and end-to-end latency of one run. matplotlib is imported inside the function."""

from __future__ import annotations

from .plotting import check_path, pyplot, save

CURVES = (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2e", "end-to-end"))


def plot_serving(results, rates, path: str) -> None:
    out = check_path(path)
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    first = results[0]
    for ax, (key, label) in zip(axes, CURVES):
        if rates:
            for q, style in ((50, "o-"), (99, "s--")):
                ax.plot(rates, [r.metrics[f"{key}_p{q}_s"] for r in results], style, label=f"p{q}")
            ax.set_xlabel("arrival rate (requests/s)")
            ax.set_ylabel(f"{label} (s)")
            ax.set_yscale("log")
        else:
            values = sorted(first.latencies[key])
            ax.plot(values, [(i + 1) / len(values) for i in range(len(values))])
            ax.set_xlabel(f"{label} (s)")
            ax.set_ylabel("fraction of requests")
        ax.set_title(label)
        ax.grid(alpha=0.3)
        if rates:
            ax.legend()
    fig.suptitle(f"{first.model} on {first.gpu}, {first.options.scheduler} (mlsys serve, simulated)")
    fig.tight_layout()
    save(fig, [out])
