"""Fit the collective model to measured NCCL rows, write a measured cluster spec, and the report.

Two fits. The single alpha-beta line: weighted linear least squares (weights 1/t_measured) of the
single-node ring model t = steps(c, p) * alpha + bytes(c, p, n) * beta over the rows of at least
`min_size` bytes, over all collectives together and per collective, alpha held at zero or more.
The protocol model (`comm_fit`): per collective, t = max(H, min_p(base_p + steps alpha_p + bytes / B_p))
over every size. The measured spec holds both (the protocols are what the calculator uses);
the report gives each one's error, in-sample and held out. numpy, scipy and matplotlib are
imported inside the functions that need them.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from ..calc.comm.collectives import COLLECTIVES, collective_cost, ring_terms
from ..errors import MlsysError, require
from ..specs.cluster import ClusterSpec, Link, LinkTerms, load_cluster
from ..units import fmt_bytes
from ..bench import comm_fit
from .markdown import markdown_table

PROTOCOLS = 2  # protocols fitted per collective: LL hides under the host floor (docs/comm.md)

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
    """The NCCL rows of a file (mlsyscalc.readers.records checks them), the latest per collective, size, GPUs and
    backend."""
    from ..readers.records import read_comm_rows

    path = Path(path)
    require(path.exists(), f"no measured rows at {path}")
    rows = read_comm_rows(path, COLLECTIVES)
    latest = {(r["collective"], r["size_bytes"], r["gpus"], r["backend"]): r for r in rows}
    return sorted(latest.values(), key=lambda r: (COLLECTIVES.index(r["collective"]), r["size_bytes"]))


def _timed(rows: Iterable[dict[str, Any]], min_size: int, max_size: float = float("inf")) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("ok") and r.get("time_s") and min_size <= r["size_bytes"] <= max_size
            and r.get("nodes", 1) == 1]  # the reader lets a single-node row leave nodes out


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
    require(bool(timed), f"no correct timed single-node rows of {fmt_bytes(min_size)} or more to fit")
    per = {}
    for c in COLLECTIVES:
        subset = [r for r in timed if r["collective"] == c]
        if len(subset) >= 2:
            per[c] = fit_alpha_beta(subset, c)
    return fit_alpha_beta(timed), per


def measured_cluster(rows: list[dict[str, Any]], min_size: int, name: str,
                     fits: dict[str, comm_fit.ProtocolFit] | None = None) -> ClusterSpec:
    """A cluster spec whose NVLink/PCIe link is the fit: per collective, the protocol model (from
    `fits`, default: fitted to every size) beside the single alpha-beta line of sizes >= min_size."""
    joint, per = fit_all(rows, min_size)
    if fits is None:
        fits = {c: comm_fit.fit_protocols(group, PROTOCOLS) for c, group in comm_fit.by_collective(rows).items()}
    terms = {c: LinkTerms(f.bandwidth_Bps, f.latency_s) for c, f in per.items()}
    terms |= {c: fit.terms(*(per[c].bandwidth_Bps, per[c].latency_s) if c in per else (joint.bandwidth_Bps, joint.latency_s))
              for c, fit in fits.items()}
    env = _timed(rows, min_size)[0].get("env", {})
    gpus = max(r["gpus"] for r in rows)
    link = Link(f"measured between {gpus} x {env.get('gpu', '?')} (NCCL {env.get('nccl', '?')}, NVLS off)",
                joint.bandwidth_Bps, joint.latency_s, terms)
    fitted = sum(len(f.sizes) for f in fits.values())
    return ClusterSpec(
        name=name, gpu=str(env.get("gpu", "")), gpus_per_node=gpus, intra=link, inter=None, measured=True,
        source=(f"mlsys bench comm (mlsyscalc/bench/comm_bench.py) at commit {env.get('git_commit')}, "
                f"torch {env.get('torch')}, NCCL {env.get('nccl')}, CUDA {env.get('cuda')}",),
        notes=(f"MEASURED, not a datasheet. per_collective: call_overhead_us (host time per call, H) and up to "
               f"{PROTOCOLS} protocols (per-step latency alpha_p, bandwidth B_p), fitted per collective to {fitted} "
               "NCCL timings of every size by least squares in log-time with scipy (bounds H, base, alpha >= 0, B > 0; "
               "mlsyscalc/bench/comm_fit.py); time per call = max(H, min_p(base_p + steps alpha_p + bytes / B_p)). "
               f"bandwidth_GBps/latency_us: the single alpha-beta line, weighted least squares over {joint.rows} "
               f"timings of {fmt_bytes(min_size)} and more (link level: all collectives jointly). Single node only "
               "(no inter-node link was measured); 2 GPUs only, so per-step latency and per-call base latency "
               "cannot be told apart."),
    )


def held_out_cluster(rows: list[dict[str, Any]], min_size: int, name: str) -> tuple[ClusterSpec, list[dict[str, Any]]]:
    """The protocol model fitted on every other size of each collective, and the rows it did not see."""
    fits, test = {}, []
    for c, group in comm_fit.by_collective(rows).items():
        train, rest = comm_fit.split_every_other(group)
        fits[c] = comm_fit.fit_protocols(train, PROTOCOLS)
        test += rest
    return measured_cluster(rows, min_size, name, fits), test


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
    body = []
    peak_link = load_cluster(datasheet).intra.bandwidth_Bps  # busbw tends to the link bandwidth as n grows
    for c in COLLECTIVES:
        sub = [r for r in timed if r["collective"] == c]
        if not sub:
            continue
        small = [r["time_s"] * 1e6 for r in sub if r["size_bytes"] <= 256 * 1024]
        big = sub[-1]
        floor = f"{min(small):.1f} .. {max(small):.1f}" if small else "-"
        body.append([c, floor, fmt_bytes(big['size_bytes']), f"{big['busbw_GBps']:.1f}",
                     f"{100 * big['busbw_GBps'] * 1e9 / peak_link:.0f}%"])
    lines = ["", "## Observed", "", *_table(["collective", "time per call, sizes <= 256 KiB (us)", "largest size",
                                             "busbw there (GB/s)", "share of datasheet link"], body)]
    lines += ["", "A flat time per call over the small sizes is the cost of issuing one collective through "
              "torch.distributed back to back (host work per call), not link latency: an alpha-beta sum cannot "
              "follow max(host floor, device time), which is where the single line misses most; the protocol "
              "model's H is that floor."]
    return lines


def _table(columns: list[str], body: list[list]) -> list[str]:
    return markdown_table(columns, body, "l" * len(columns))


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def _key(row: dict[str, Any]) -> tuple:
    return row["collective"], row["size_bytes"], row["gpus"]


def _line_cluster(measured: ClusterSpec, joint: Fit, per: dict[str, Fit]) -> ClusterSpec:
    link = Link("single alpha-beta line", joint.bandwidth_Bps, joint.latency_s,
                {c: LinkTerms(f.bandwidth_Bps, f.latency_s) for c, f in per.items()})
    return ClusterSpec(measured.name, measured.gpu, measured.gpus_per_node, link, None)


def _model_section(measured: ClusterSpec, min_size: int) -> list[str]:
    lines = ["## Fitted model (MEASURED on this machine)", "",
             "Per collective: time per call = max(H, min over protocols p of (base_p + steps x alpha_p + bytes / B_p)), "
             "steps and bytes sent per GPU of the ring (docs/comm.md); H = host time to issue one call, alpha_p = "
             "per-step latency, base_p = per-call latency, B_p = bandwidth of protocol p (NCCL's tuner keeps the same "
             "numbers per protocol, src/graph/tuning.cc: baseLat, hwLat, bandwidth). Least squares in log-time over "
             "every size (scipy, bounds H, base_p, alpha_p >= 0, B_p > 0). Rows of one GPU count have the same step "
             "count at every size, so alpha_p cannot be told from base_p there: alpha_p is then fixed at NCCL's "
             "NVLink ring step (3.4 us, bench/comm_fit.py STEP_LATENCY_PRIOR_S) and base_p takes the rest. "
             f"{PROTOCOLS} protocols at most; written to `model_specs/clusters/{measured.name}.json`. The single "
             f"alpha-beta line (weighted least squares over sizes >= {fmt_bytes(min_size)}) is kept beside it.", ""]
    body = []
    for c, t in measured.intra.per_collective.items():
        for k, proto in enumerate(t.protocols):
            head = [c, f"{t.call_overhead_s * 1e6:.1f}"] if k == 0 else ["", ""]
            tail = [f"{t.latency_s * 1e6:.1f}", f"{t.bandwidth_Bps / 1e9:.1f}"] if k == 0 else ["", ""]
            body.append([*head, proto.name, f"{proto.base_latency_s * 1e6:.1f}", f"{proto.latency_s * 1e6:.1f}",
                         f"{proto.bandwidth_Bps / 1e9:.1f}", *tail])
    return lines + _table(["collective", "H (us)", "protocol", "base_p (us per call)", "alpha_p (us per step)", "B_p (GB/s)",
                           "single line: alpha (us)", "B (GB/s)"], body)


def _error_section(rows: list[dict[str, Any]], specs: dict[str, ClusterSpec | str], test_rows: list[dict[str, Any]],
                   min_size: int) -> list[str]:
    lines = ["", "## Prediction error", "",
             "datasheet: the built-in cluster spec; one line: each collective's single alpha-beta fit; protocol "
             "model: the measured spec, in-sample (fitted to every size) and held out (fitted to every other size "
             "of the sweep, 8 KiB, 32 KiB, ..., 2 GiB, and tested on the sizes it did not see, 16 KiB, 64 KiB, "
             "..., 1 GiB; the rows column counts those). All predictions go through `collective_cost`."]
    for lo, hi in ((min_size, float("inf")), (min_size, BAND_SPLIT - 1), (BAND_SPLIT, float("inf"))):
        band = f">= {fmt_bytes(lo)}" if hi == float("inf") else f"{fmt_bytes(lo)} .. < {fmt_bytes(hi + 1)}"
        tables = [error_table(test_rows if k == "held out" else rows, s, lo, hi) for k, s in specs.items()]
        body = [[c, *(f"{100 * t[c]['median_abs_error']:.1f}% / {100 * t[c]['max_abs_error']:.1f}%" if c in t else "-"
                      for t in tables), tables[-1].get(c, {}).get('rows', 0)] for c in tables[0]]
        lines += ["", f"### |predicted - measured| / measured, sizes {band}, median / max", "",
                  *_table(["collective", "datasheet", "one line", "protocol model, in-sample",
                           "protocol model, held out", "held-out rows"], body)]
    return lines


def _variants_section(rows: list[dict[str, Any]], min_size: int) -> list[str]:
    errors = comm_fit.variant_errors(rows, min_size)
    names = {("max", 1): "max, 1 protocol", ("max", 2): "max, 2 (the model)", ("max", 3): "max, 3",
             ("sum", 2): "sum, 2 protocols"}
    lines = ["", f"### Choices: how H enters and how many protocols (max error, sizes >= {fmt_bytes(min_size)}, "
             "in-sample / held out)", "",
             "max: time = max(H, device time), the host issues the next call while the GPU runs this one; sum: "
             "time = H + device time, a per-call latency as NCCL's tuner adds its base latency.", ""]
    body = [[c, *(f"{100 * a:.1f}% / {100 * b:.1f}%" for a, b in per.values())] for c, per in errors.items()]
    return lines + _table(["collective", *(names[v] for v in comm_fit.VARIANTS)], body)


def write_report(rows: list[dict[str, Any]], out_dir: Path, min_size: int, datasheet: str,
                 measured: ClusterSpec, command: str) -> Path:
    """reports/comm/README.md, busbw.png and the rows, all from the measured JSONL."""
    out_dir.mkdir(parents=True, exist_ok=True)
    timed = [r for r in rows if r.get("time_s")]
    env = timed[0]["env"]
    line = _line_cluster(measured, *fit_all(rows, min_size))
    held, test_rows = held_out_cluster(rows, min_size, measured.name)
    plot(rows, {f"model: {datasheet} datasheet": datasheet, "model: one alpha-beta line": line,
                "model: protocols + host floor (fitted)": measured}, out_dir / "busbw.png")
    lines = [
        f"# NCCL collectives on {env['world_size']} x {env['gpu']}: measured vs the collective model", "",
        f"Generated by `{command}` from `rows.jsonl` (do not edit by hand).", "",
        f"- card: {env['world_size']} x {env['gpu']} on one host ({env.get('hostname')}), NCCL {env.get('nccl')}, "
        f"torch {env['torch']}, CUDA {env.get('cuda')}, NCCL_NVLS_ENABLE={env.get('nccl_nvls_enable')}",
        f"- commit: {env.get('git_commit')}; measured {timed[0].get('measured_at')} .. {timed[-1].get('measured_at')}",
        f"- method: float32 buffers, every result checked element by element on every rank before timing; "
        f"{timed[0]['trials']} trials of back-to-back calls timed with "
        f"{'CUDA events' if env['backend'] == 'nccl' else 'the wall clock'} after warm-up; a row's time "
        "is the slowest rank's median trial. busbw/algbw as nccl-tests defines them; p2p is nccl-tests' "
        "sendrecv (every rank sends to the next and receives from the previous at once).", "",
    ]
    lines += _model_section(measured, min_size)
    lines += _error_section(rows, {"datasheet": datasheet, "line": line, "measured": measured, "held out": held},
                            test_rows, min_size)
    lines += _variants_section(rows, min_size)
    lines += _observations(timed, datasheet)
    lines += _size_table(timed, datasheet, line, measured, {_key(r) for r in test_rows})
    path = out_dir / "README.md"
    path.write_text("\n".join(lines) + "\n")
    (out_dir / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _size_table(timed: list[dict[str, Any]], datasheet: str, line: ClusterSpec, measured: ClusterSpec,
                held_out: set[tuple]) -> list[str]:
    lines = ["", "![busbw against size](busbw.png)", "", "## Every size", "",
             "regime: the protocol the model picks, or `host` where the host floor H sets the time; held out: "
             "a size the held-out fit did not see.", ""]
    body = []
    for r in timed:
        data, one, fitted = (collective_cost(r["collective"], r["size_bytes"], r["gpus"], s) for s in (datasheet, line, measured))
        regime = "host" if fitted.host_wait_s > 0 else fitted.phases[0].protocol
        err = lambda c: _pct((c.time_s - r["time_s"]) / r["time_s"])  # noqa: E731
        body.append([r['collective'], fmt_bytes(r['size_bytes']), f"{r['time_s'] * 1e6:.1f}", f"{r['algbw_GBps']:.2f}",
                     f"{r['busbw_GBps']:.2f}", f"{data.busbw_Bps / 1e9:.1f}", err(data), err(one),
                     f"{fitted.time_s * 1e6:.1f}", err(fitted), regime, 'yes' if _key(r) in held_out else ''])
    lines += _table(["collective", "size", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "datasheet model busbw", "err",
                     "one line err", "protocol model time (us)", "err", "regime", "held out"], body)
    lines += ["", "Errors are (predicted - measured) / measured: negative means the model is too optimistic."]
    return lines


def card_name(device: Any) -> str:
    """The card's model in a device name as torch reports it: its first word with a digit, up to a dash, in lower
    case ('NVIDIA H100 80GB HBM3' -> 'h100', 'NVIDIA A100-SXM4-80GB' -> 'a100', 'NVIDIA H200' -> 'h200');
    'gpu' when there is none."""
    words = [w for w in str(device or "").split() if any(ch.isdigit() for ch in w)]
    return words[0].split("-")[0].lower() if words else "gpu"


def write(folder: Path, command: str, min_size: int = 2**20) -> Path:
    """folder/README.md from folder/rows.jsonl: the datasheet cluster of the card, and a protocol
    model fitted to the rows (named <card>-x<gpus>-measured, as the calibration file would be)."""
    from ..bench.comm_bench import default_cluster

    rows = load_rows(folder / "rows.jsonl")
    check_rows(rows)
    env = rows[0].get("env", {})
    name = f"{card_name(env.get('gpu'))}-x{rows[0]['gpus']}-measured"
    return write_report(rows, folder, min_size, default_cluster(env), measured_cluster(rows, min_size, name), command)

