"""shared.md: the shared link fit (`bench.comm_shared_fit`) on one GPU count, checked on the others.

Two fits of the same form, both through `collective_cost`: the spec `--calibrate` writes, fitted to the
eager rows (`time_s`, calls issued from Python, with the host floor H), and a device fit to the CUDA-graph
rows (`graph_time_s`, no host in the loop), where the rows have them. Per collective and GPU count:
|predicted - measured| / measured over sizes >= min_size, the fitted count in-sample, every other held out;
then the signed error per size, and how reproducible the rows were (median trial against the best).
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..bench.comm_shared_fit import GROUP_OF, SharedFit, fit_shared, shared_cluster
from ..calc.comm.collectives import COLLECTIVES, collective_cost
from ..specs.cluster import ClusterSpec
from ..units import fmt_bytes
from .markdown import markdown_table

SPREAD_LIMIT = 0.2  # a row whose median trial is more than 1.2 x its best is "not reproducible"


def signed_errors(rows: list[dict[str, Any]], spec: ClusterSpec | str, key: str,
                  min_size: int) -> dict[tuple[str, int], dict[int, float]]:
    """(collective, gpus) -> {size: predicted / measured - 1} over correct single-node rows >= min_size."""
    out: dict[tuple[str, int], dict[int, float]] = {}
    for r in rows:
        if r.get("ok") and r.get(key) and r.get("nodes", 1) == 1 and r["size_bytes"] >= min_size:
            t = collective_cost(r["collective"], r["size_bytes"], r["gpus"], spec).time_s
            out.setdefault((r["collective"], r["gpus"]), {})[r["size_bytes"]] = t / r[key] - 1
    return out


def _stat(errs: dict[int, float] | None) -> str:
    if not errs:
        return "-"
    values = [abs(v) for v in errs.values()]
    return f"{100 * statistics.median(values):.1f}% / {100 * max(values):.1f}%"


def _params(fit: SharedFit) -> list[list[str]]:
    us = lambda v: f"{v * 1e6:.1f}"  # noqa: E731
    gbps = lambda v: f"{v / 1e9:.0f}"  # noqa: E731
    return [[c, GROUP_OF[c], us(fit.host_s[c]) if fit.host_s else "-", us(f), gbps(fit.bandwidth_Bps[GROUP_OF[c]]),
             gbps(fit.buffer_Bps[GROUP_OF[c]]) if GROUP_OF[c] in fit.buffer_Bps else "-"] for c, f in fit.floor_s.items()]


def _spread_lines(rows: list[dict[str, Any]], min_size: int) -> list[str]:
    body = []
    for gpus in sorted({r["gpus"] for r in rows}):
        mine = [r for r in rows if r["gpus"] == gpus and r.get("ok") and r["size_bytes"] >= min_size]
        for prefix, label in (("", "eager"), ("graph_", "CUDA graph")):
            timed = [r for r in mine if r.get(f"{prefix}time_s") and r.get(f"{prefix}time_min_s")]
            if not timed:
                continue
            spread = [r[f"{prefix}time_s"] / r[f"{prefix}time_min_s"] - 1 for r in timed]
            host = [r for r in timed if prefix == "" and r.get("host_issue_s", 0) >= 0.9 * r["time_s"]]
            body.append([gpus, label, len(timed), sum(s > SPREAD_LIMIT for s in spread),
                         f"{100 * statistics.median(spread):.1f}%", f"{100 * max(spread):.1f}%",
                         len(host) if prefix == "" else "-"])
    return markdown_table(["GPUs", "timing", "rows", f"median > {1 + SPREAD_LIMIT:.1f} x best", "median spread",
                           "max spread", "host-bound (host_issue_s >= 0.9 time_s)"], body)


def shared_lines(rows: list[dict[str, Any]], fits: dict[str, SharedFit], specs: dict[str, ClusterSpec],
                 fit_gpus: int, datasheet: str, min_size: int) -> list[str]:
    """The page. fits/specs by timing key ("time_s": eager, with H; "graph_time_s": device only)."""
    env: dict[str, Any] = next((r.get("env", {}) for r in rows if r.get("env")), {})
    lines = ["# Collectives: a shared link fit on one GPU count, checked on the others", "",
             f"Rows: {env.get('gpu', '?')}, NCCL {env.get('nccl', '?')}, torch {env.get('torch', '?')}, commit "
             f"{str(env.get('git_commit', '?'))[:7]}, NVLS off. Fitted on the {fit_gpus}-GPU rows "
             f"(`mlsyscalc/bench/comm_shared_fit.py`): eager, every size, time per call = max(H_c, f_c + sent / B_g "
             "+ (1 + 1/p) n / C_g); CUDA graph, the sizes scored, the same without H. Every other GPU count is held "
             "out. All predictions go through `collective_cost`.", ""]
    names = {"time_s": "eager (the spec: with H)", "graph_time_s": f"CUDA graph (device fit >= {fmt_bytes(min_size)}: no H)"}
    for key, fit in fits.items():
        lines += [f"Parameters, {names[key]}:", "",
                  *markdown_table(["collective", "group", "H (us)", "f (us)", "B (GB/s)", "C (GB/s)"], _params(fit)), ""]
    errors = {key: signed_errors(rows, spec, key, min_size) for key, spec in specs.items()}
    sheet = signed_errors(rows, datasheet, "time_s", min_size)
    keys = sorted({k for e in errors.values() for k in e}, key=lambda k: (COLLECTIVES.index(k[0]), k[1]))
    body = [[c, g, "in-sample" if g == fit_gpus else "held out", *(_stat(errors[k].get((c, g))) for k in errors),
             _stat(sheet.get((c, g)))] for c, g in keys]
    lines += [f"|predicted - measured| / measured, median / max, sizes >= {fmt_bytes(min_size)}:", "",
              *markdown_table(["collective", "GPUs", "rows", *(names[k] for k in errors), f"datasheet `{datasheet}`, eager"],
                              body), ""]
    sizes = sorted({s for e in errors.values() for per in e.values() for s in per})
    for key, errs in errors.items():
        table = [[c, g, *(f"{100 * errs[(c, g)][s]:+.0f}" if s in errs[(c, g)] else "-" for s in sizes)]
                 for c, g in keys if (c, g) in errs]
        lines += [f"predicted / measured - 1 (%), {names[key]}, per size:", "",
                  *markdown_table(["collective", "GPUs", *(fmt_bytes(s) for s in sizes)], table), ""]
    lines += [f"Reproducibility, sizes >= {fmt_bytes(min_size)} (spread = median trial / best trial - 1):", "",
              *_spread_lines(rows, min_size), ""]
    return lines


def shared_spec(fitted_rows: list[dict[str, Any]], name: str, gpus_per_node: int) -> tuple[SharedFit, ClusterSpec]:
    """The shared fit of the eager rows and the measured cluster spec that carries it (what --calibrate writes)."""
    fit = fit_shared(fitted_rows)
    env: dict[str, Any] = next((r.get("env", {}) for r in fitted_rows if r.get("env")), {})
    counts = sorted({r["gpus"] for r in fitted_rows})
    link = f"measured on {'/'.join(map(str, counts))} x {env.get('gpu', '?')} (NCCL {env.get('nccl', '?')}, NVLS off)"
    source = (f"mlsys bench comm --model shared (mlsyscalc/bench/comm_shared_fit.py) at commit "
              f"{env.get('git_commit')}, torch {env.get('torch')}, NCCL {env.get('nccl')}, CUDA {env.get('cuda')}",)
    notes = (f"MEASURED, not a datasheet: fitted to {fit.rows} NCCL timings of every size on "
             f"{'/'.join(map(str, counts))} GPUs. Per collective one protocol: base_latency_us = the per-call "
             "floor f, bandwidth_GBps = the link bandwidth B shared by all-reduce, all-gather and reduce-scatter "
             "(own B for the others), buffer_bandwidth_GBps = C, a cost per byte of the message plus one GPU's "
             "share of it, shared by the same three; call_overhead_us = H, the host floor of calls issued from "
             "Python. time = max(H, f + bytes sent per GPU / B + (1 + 1/p) message bytes / C): no per-step "
             "latency, so the ring's bytes alone carry it to other GPU counts of the node. Single node only.")
    spec = shared_cluster(fit, name, gpus_per_node, link, source, notes)
    return fit, replace(spec, gpu=str(env.get("gpu", "")))


def write_shared(rows: list[dict[str, Any]], fitted_rows: list[dict[str, Any]], fit: SharedFit, spec: ClusterSpec,
                 fit_gpus: int, datasheet: str, min_size: int, out_dir: Path, command: str) -> Path:
    """Write shared.md in out_dir: the eager spec, plus a device fit where the rows have graph times."""
    fits, specs = {"time_s": fit}, {"time_s": spec}
    if any(r.get("graph_time_s") for r in fitted_rows):
        fits["graph_time_s"] = fit_shared(fitted_rows, "graph_time_s", host=False, min_size=min_size)
        specs["graph_time_s"] = shared_cluster(fits["graph_time_s"], spec.name + "-graph", spec.gpus_per_node,
                                               "device fit to CUDA-graph rows")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "shared.md"
    lines = shared_lines(rows, fits, specs, fit_gpus, datasheet, min_size)
    path.write_text("\n".join(lines + [f"Regenerate: `{command}`", ""]))
    return path
