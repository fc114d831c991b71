"""Fit alpha and beta to measured collectives, write a measured cluster spec, and the report.

The fit minimises the relative error of the single-node ring model
t = steps(c, p) * alpha + bytes(c, p, n) * beta over the rows of at least `min_size` bytes,
a weighted linear least squares (weights 1/t_measured), once over all collectives together and
once per collective (NCCL's own tuner also keeps per-collective bandwidth tables). alpha is held
at zero or more. numpy and matplotlib are imported inside the functions that need them.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from ..calc.comm_collectives import COLLECTIVES, collective_cost, ring_terms
from ..errors import MlsysError, require
from ..specs.cluster import ClusterSpec, Link, load_cluster
from ..units import fmt_bytes

BAND_SPLIT = 16 * 2**20  # the report shows errors below and above this size separately


@dataclass(frozen=True)
class Fit:
    collective: str  # "all" for the joint fit
    latency_s: float  # alpha per step
    bandwidth_Bps: float  # 1 / beta
    rows: int
    median_abs_error: float  # of the fitted model on the rows it was fitted to
    max_abs_error: float


def load_rows(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    require(path.exists(), f"no measured rows at {path}")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    latest = {(r["collective"], r["size_bytes"], r["gpus"], r["backend"]): r for r in rows}
    return sorted(latest.values(), key=lambda r: (COLLECTIVES.index(r["collective"]), r["size_bytes"]))


def _timed(rows: Iterable[dict[str, Any]], min_size: int, max_size: float = float("inf")) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("ok") and r.get("time_s") and min_size <= r["size_bytes"] <= max_size
            and r["nodes"] == 1]


def fit_alpha_beta(rows: list[dict[str, Any]], collective: str = "all") -> Fit:
    """Weighted least squares for (alpha, beta) of the ring model over `rows` (already filtered)."""
    import numpy as np

    require(len(rows) >= 2, f"{collective}: need at least 2 timed rows to fit alpha and beta")
    terms = np.array([ring_terms(r["collective"], r["gpus"], r["size_bytes"]) for r in rows], dtype=float)
    t = np.array([r["time_s"] for r in rows])
    design = terms / t[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(design, np.ones(len(rows)), rcond=None)
    if alpha < 0 or beta <= 0:  # outside the physical range: alpha = 0, bandwidth alone
        alpha, beta = 0.0, float(design[:, 1].sum() / np.dot(design[:, 1], design[:, 1]))
    errors = np.abs(design @ np.array([alpha, beta]) - 1)  # |predicted - measured| / measured
    return Fit(collective, float(alpha), float(1 / beta), len(rows), float(np.median(errors)), float(errors.max()))


def fit_all(rows: list[dict[str, Any]], min_size: int) -> tuple[Fit, dict[str, Fit]]:
    timed = _timed(rows, min_size)
    require(timed, f"no correct timed single-node rows of {fmt_bytes(min_size)} or more to fit")
    per = {}
    for c in COLLECTIVES:
        subset = [r for r in timed if r["collective"] == c]
        if len(subset) >= 2:
            per[c] = fit_alpha_beta(subset, c)
    return fit_alpha_beta(timed), per


def measured_cluster(rows: list[dict[str, Any]], min_size: int, name: str) -> ClusterSpec:
    """A cluster spec whose NVLink/PCIe link is the fit (per-collective values included)."""
    joint, per = fit_all(rows, min_size)
    env = _timed(rows, min_size)[0].get("env", {})
    gpus = max(r["gpus"] for r in rows)
    link = Link(f"measured between {gpus} x {env.get('gpu', '?')} (NCCL {env.get('nccl', '?')}, NVLS off)",
                joint.bandwidth_Bps, joint.latency_s,
                {c: (f.bandwidth_Bps, f.latency_s) for c, f in per.items()})
    return ClusterSpec(
        name=name, gpu=str(env.get("gpu", "")), gpus_per_node=gpus, intra=link, inter=None, measured=True,
        source=(f"mlsys bench comm (mlsyscalc/bench/comm_bench.py) at commit {env.get('git_commit')}, "
                f"torch {env.get('torch')}, NCCL {env.get('nccl')}, CUDA {env.get('cuda')}",),
        notes=(f"MEASURED, not a datasheet: alpha (per ring step) and beta fitted by weighted least squares to "
               f"{joint.rows} NCCL timings of {fmt_bytes(min_size)} and more; per_collective holds each "
               f"collective's own fit. Single node only (no inter-node link was measured)."),
    )


def error_table(rows: list[dict[str, Any]], cluster: ClusterSpec | str, min_size: int,
                max_size: float = float("inf")) -> dict[str, dict[str, float]]:
    """Per collective: median and max |predicted - measured| / measured over rows in [min_size, max_size]."""
    out: dict[str, dict[str, float]] = {}
    for c in COLLECTIVES:
        errs = [abs(collective_cost(c, r["size_bytes"], r["gpus"], cluster).time_s - r["time_s"]) / r["time_s"]
                for r in _timed(rows, min_size, max_size) if r["collective"] == c]
        if errs:
            out[c] = {"median_abs_error": statistics.median(errs), "max_abs_error": max(errs), "rows": len(errs)}
    return out


def plot(rows: list[dict[str, Any]], clusters: dict[str, ClusterSpec | str], path: Path) -> None:
    """busbw against size, one panel per collective: measured points, model lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    present = [c for c in COLLECTIVES if any(r["collective"] == c and r.get("time_s") for r in rows)]
    cols = 4
    fig, axes = plt.subplots((len(present) + cols - 1) // cols, cols, figsize=(4.2 * cols, 3.4 * ((len(present) + cols - 1) // cols)),
                             squeeze=False)
    for ax, c in zip(axes.flat, present):
        sub = [r for r in rows if r["collective"] == c and r.get("time_s")]
        sizes = [r["size_bytes"] for r in sub]
        ax.plot(sizes, [r["busbw_GBps"] for r in sub], "o", ms=4, color="black", label="measured (NCCL)")
        for (label, cl), style in zip(clusters.items(), ("--", "-", ":")):
            pred = [collective_cost(c, r["size_bytes"], r["gpus"], cl).busbw_Bps / 1e9 for r in sub]
            ax.plot(sizes, pred, style, label=label)
        ax.set_xscale("log", base=2)
        ax.set_title(c)
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(present):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def check_rows(rows: list[dict[str, Any]]) -> None:
    bad = [r for r in rows if not r.get("ok")]
    if bad:
        raise MlsysError(f"{len(bad)} rows failed the correctness check, e.g. {bad[0]['collective']} "
                         f"{bad[0]['size_bytes']} B: {bad[0].get('error')}")


def _observations(timed: list[dict[str, Any]], datasheet: str) -> list[str]:
    """Per collective: the per-call floor of small messages and the busbw reached at the largest size."""
    lines = ["", "## Observed", "",
             "| collective | time per call, sizes <= 256 KiB (us) | largest size | busbw there (GB/s) | share of datasheet link |",
             "| --- | --- | --- | --- | --- |"]
    peak_link = load_cluster(datasheet).intra.bandwidth_Bps  # busbw tends to the link bandwidth as n grows
    for c in COLLECTIVES:
        sub = [r for r in timed if r["collective"] == c]
        if not sub:
            continue
        small = [r["time_s"] * 1e6 for r in sub if r["size_bytes"] <= 256 * 1024]
        big = sub[-1]
        floor = f"{min(small):.1f} .. {max(small):.1f}" if small else "-"
        lines.append(f"| {c} | {floor} | {fmt_bytes(big['size_bytes'])} | {big['busbw_GBps']:.1f} | "
                     f"{100 * big['busbw_GBps'] * 1e9 / peak_link:.0f}% |")
    lines += ["", "A flat time per call over the small sizes is the cost of issuing one collective through "
              "torch.distributed back to back (host work per call), not link latency: the alpha-beta sum "
              "cannot follow max(host floor, alpha + n beta), which is where the fitted model misses most."]
    return lines


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def write_report(rows: list[dict[str, Any]], out_dir: Path, min_size: int, datasheet: str,
                 measured: ClusterSpec, command: str) -> Path:
    """reports/comm/README.md, busbw.png and the rows, all from the measured JSONL."""
    out_dir.mkdir(parents=True, exist_ok=True)
    timed = [r for r in rows if r.get("time_s")]
    env = timed[0]["env"]
    joint = fit_alpha_beta(_timed(rows, min_size))
    _, per = fit_all(rows, min_size)
    plot(rows, {f"model: {datasheet} datasheet": datasheet, "model: fitted (per collective)": measured}, out_dir / "busbw.png")
    lines = [
        f"# NCCL collectives on {env['world_size']} x {env['gpu']}: measured vs the alpha-beta model", "",
        f"Generated by `{command}` from `rows.jsonl` (do not edit by hand).", "",
        f"- card: {env['world_size']} x {env['gpu']} on one host ({env.get('hostname')}), NCCL {env.get('nccl')}, "
        f"torch {env['torch']}, CUDA {env.get('cuda')}, NCCL_NVLS_ENABLE={env.get('nccl_nvls_enable')}",
        f"- commit: {env.get('git_commit')}; measured {timed[0].get('measured_at')} .. {timed[-1].get('measured_at')}",
        f"- method: float32 buffers, every result checked element by element on every rank before timing; "
        f"{timed[0]['trials']} trials of back-to-back calls timed with "
        f"{'CUDA events' if env['backend'] == 'nccl' else 'the wall clock'} after warm-up; a row's time "
        "is the slowest rank's median trial. busbw/algbw as nccl-tests defines them; p2p is nccl-tests' "
        "sendrecv (every rank sends to the next and receives from the previous at once).", "",
        "## Fitted alpha and beta (MEASURED on this machine)", "",
        f"Weighted least squares on the ring model over sizes >= {fmt_bytes(min_size)}; written to "
        f"`model_specs/clusters/{measured.name}.json`.", "",
        "| collective | alpha (us per step) | bandwidth 1/beta (GB/s) | rows | median abs err | max abs err |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for fit in (joint, *per.values()):
        lines.append(f"| {fit.collective} | {fit.latency_s * 1e6:.2f} | {fit.bandwidth_Bps / 1e9:.1f} | {fit.rows} | "
                     f"{100 * fit.median_abs_error:.1f}% | {100 * fit.max_abs_error:.1f}% |")
    joint_spec = ClusterSpec(measured.name, measured.gpu, measured.gpus_per_node,
                             Link("joint fit", joint.bandwidth_Bps, joint.latency_s), None)
    lines += ["", "## Prediction error", "",
              "datasheet: the built-in cluster spec; one alpha/beta: the joint fit above; per-collective: each "
              "collective's own fit (what the measured cluster spec holds)."]
    for lo, hi in ((min_size, float("inf")), (min_size, BAND_SPLIT - 1), (BAND_SPLIT, float("inf"))):
        band = f">= {fmt_bytes(lo)}" if hi == float("inf") else f"{fmt_bytes(lo)} .. < {fmt_bytes(hi + 1)}"
        lines += ["", f"### |predicted - measured| / measured, sizes {band}", "",
                  "| collective | datasheet median | datasheet max | one alpha/beta median | one alpha/beta max "
                  "| per-collective median | per-collective max |", "| --- | --- | --- | --- | --- | --- | --- |"]
        tables = [error_table(rows, s, lo, hi) for s in (datasheet, joint_spec, measured)]
        for c in tables[0]:
            cells = [f"{100 * t[c]['median_abs_error']:.1f}% | {100 * t[c]['max_abs_error']:.1f}%" for t in tables]
            lines.append(f"| {c} | " + " | ".join(cells) + " |")
    lines += _observations(timed, datasheet)
    lines += ["", "![busbw against size](busbw.png)", "", "## Every size", "",
              "| collective | size | time (us) | algbw (GB/s) | busbw (GB/s) | datasheet model busbw | err | fitted model time (us) | err |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in timed:
        data = collective_cost(r["collective"], r["size_bytes"], r["gpus"], datasheet)
        fitted = collective_cost(r["collective"], r["size_bytes"], r["gpus"], measured)
        lines.append(
            f"| {r['collective']} | {fmt_bytes(r['size_bytes'])} | {r['time_s'] * 1e6:.1f} | {r['algbw_GBps']:.2f} | "
            f"{r['busbw_GBps']:.2f} | {data.busbw_Bps / 1e9:.1f} | {_pct((data.time_s - r['time_s']) / r['time_s'])} | "
            f"{fitted.time_s * 1e6:.1f} | {_pct((fitted.time_s - r['time_s']) / r['time_s'])} |")
    lines += ["", "Errors are (predicted - measured) / measured: negative means the model is too optimistic."]
    path = out_dir / "README.md"
    path.write_text("\n".join(lines) + "\n")
    (out_dir / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
