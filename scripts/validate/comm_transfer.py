"""Do collectives measured on 2 GPUs predict 4 GPUs of the same host? Two models, fitted on measured rows.

    python scripts/validate/comm_transfer.py [--rows reports/comm/h200-x4/rows.jsonl] [--min-size BYTES ...] [--out FILE]

Rows: `mlsys bench comm` rows of one host at two GPU counts (time_s = the slowest rank's median trial,
time_min_s = its best trial; size_bytes as nccl-tests counts it). Ring algorithm on n GPUs: `steps` per call
and `share`, the bytes one GPU sends per byte of size (docs/comm.md):

    all-reduce       steps 2(n-1), share 2(n-1)/n        all-gather, reduce-scatter, all-to-all: n-1, (n-1)/n
    broadcast, reduce (pipelined chain): n-1, 1

link      t = alpha steps + S share / B            the alpha-beta ring: every parameter a property of a link
buffer    t = alpha steps + S share / B + S / C    plus a cost per byte of the whole buffer at every GPU

Both are linear in their parameters (alpha, 1/B, 1/C); the fit is least squares in relative error (each
equation divided by the measured time), over sizes >= --min-size. `link` is rank-independent; fitted on
the lower GPU count only it is the calibration a 2-GPU run gives, and fitted on both it is the best any
alpha-beta link model can do. `buffer` is rank-independent too, but S share and S are proportional at one
GPU count: it needs two GPU counts to fit, and is checked on the sizes it was not fitted on (every other
size). Large-message busbw, which a link model holds constant in n, is listed per collective.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
RING = {  # collective -> (steps(n), share(n))
    "all-reduce": (lambda n: 2 * (n - 1), lambda n: 2 * (n - 1) / n),
    "all-gather": (lambda n: n - 1, lambda n: (n - 1) / n),
    "reduce-scatter": (lambda n: n - 1, lambda n: (n - 1) / n),
    "all-to-all": (lambda n: n - 1, lambda n: (n - 1) / n),
    "broadcast": (lambda n: n - 1, lambda n: 1.0),
    "reduce": (lambda n: n - 1, lambda n: 1.0),
}
MIB = 2**20


def design(rows: list[dict], model: str) -> np.ndarray:
    """One line per row: the coefficients of (alpha, 1/B[, 1/C]) in the time."""
    out = []
    for r in rows:
        steps, share = RING[r["collective"]]
        n, size = r["gpus"], float(r["size_bytes"])
        out.append([steps(n), size * share(n)] + ([size] if model == "buffer" else []))
    return np.array(out)


def fit(rows: list[dict], model: str, key: str) -> np.ndarray:
    """Least squares in relative error: sum ((A x - t) / t)^2."""
    a, t = design(rows, model), np.array([r[key] for r in rows])
    x, *_ = np.linalg.lstsq(a / t[:, None], np.ones(len(t)), rcond=None)
    return x


def errors(rows: list[dict], model: str, x: np.ndarray, key: str) -> list[float]:
    """|predicted - measured| / measured per row."""
    pred = design(rows, model) @ x
    return [abs(p / r[key] - 1) for p, r in zip(pred, rows)]


def stat(errs: list[float]) -> str:
    return f"{100 * statistics.median(errs):.1f}% / {100 * max(errs):.1f}%" if errs else "-"


def held_out_split(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """Every other size (by log2 size) to fit, the rest to test."""
    sizes = sorted({r["size_bytes"] for r in rows})
    keep = set(sizes[::2])
    return [r for r in rows if r["size_bytes"] in keep], [r for r in rows if r["size_bytes"] not in keep]


def busbw_ratio(rows: list[dict], low: int, high: int, size: int) -> float | None:
    by = {(r["gpus"], r["size_bytes"]): r["busbw_GBps"] for r in rows}
    if (low, size) in by and (high, size) in by:
        return by[(high, size)] / by[(low, size)]
    return None


def collective_rows(rows: list[dict], name: str, min_size: int) -> list[dict]:
    return [r for r in rows if r["collective"] == name and r.get("ok") and r["size_bytes"] >= min_size]


def table_for(rows: list[dict], low: int, high: int, key: str) -> list[list[str]]:
    """Per collective: busbw ratio, link fitted on `low` (held out: `high`), link on both, buffer in/held out."""
    lines = []
    for name in RING:
        mine = [r for r in rows if r["collective"] == name]
        if not mine:
            continue
        at = {n: [r for r in mine if r["gpus"] == n] for n in (low, high)}
        big = max(r["size_bytes"] for r in mine)
        ratio = busbw_ratio(mine, low, high, big)
        x_low = fit(at[low], "link", key)
        x_both = fit(mine, "link", key)
        train, test = held_out_split(mine)
        x_buf = fit(train, "buffer", key)
        inv_b, inv_c = x_buf[1], x_buf[2]
        lines.append([name, f"{ratio:.3f}" if ratio else "-",
                      stat(errors(at[low], "link", x_low, key)), stat(errors(at[high], "link", x_low, key)),
                      stat(errors(at[low], "link", x_both, key)), stat(errors(at[high], "link", x_both, key)),
                      stat(errors([r for r in train if r["gpus"] == high], "buffer", x_buf, key)),
                      stat(errors([r for r in test if r["gpus"] == low], "buffer", x_buf, key)),
                      stat(errors([r for r in test if r["gpus"] == high], "buffer", x_buf, key)),
                      f"{x_buf[0] * 1e6:.1f}", f"{1 / inv_b / 1e9:.0f}" if inv_b > 0 else "inf",
                      f"{1 / inv_c / 1e9:.0f}" if inv_c > 0 else f"inf ({inv_c:.1e})"])
    return lines


def eight_gpu(rows: list[dict], key: str) -> list[list[str]]:
    """The buffer model fitted on every row, extrapolated to 8 GPUs at the largest size (busbw, GB/s)."""
    out = []
    for name in ("all-reduce", "all-gather", "reduce-scatter"):
        mine = [r for r in rows if r["collective"] == name]
        if not mine:
            continue
        x = fit(mine, "buffer", key)
        size = max(r["size_bytes"] for r in mine)
        steps, share = RING[name]
        t8 = x[0] * steps(8) + size * share(8) * x[1] + size * x[2]
        out.append([name, f"{size / MIB:.0f} MiB", f"{size * share(8) / t8 / 1e9:.0f}"])
    return out


def noise(rows: list[dict], gpus: int) -> list[list[str]]:
    """Rows whose median trial is more than 20% above the best trial: timing jitter, not the collective."""
    bad = [r for r in rows if r["gpus"] == gpus and r["time_s"] > 1.2 * r["time_min_s"]]
    return [[r["collective"], f"{r['size_bytes'] / MIB:g} MiB", f"{r['time_s'] * 1e6:.1f}",
             f"{r['time_min_s'] * 1e6:.1f}"] for r in sorted(bad, key=lambda r: (r["collective"], r["size_bytes"]))]


def render(rows: list[dict], min_sizes: list[int], source: str) -> str:
    from mlsyscalc.report.markdown import markdown_table

    counts = sorted({r["gpus"] for r in rows})
    low, high = counts[0], counts[-1]
    head = ["collective", f"busbw {high}/{low} GPUs, largest size", f"link fit {low}: {low} in-sample",
            f"link fit {low}: {high} held out", f"link fit {low}+{high}: {low}", f"link fit {low}+{high}: {high}",
            f"buffer: {high} fitted sizes", f"buffer: {low} held-out sizes", f"buffer: {high} held-out sizes",
            "alpha (us)", "B (GB/s)", "C (GB/s)"]
    lines = [f"## Rank-independent models, {low} -> {high} GPUs (scripts/validate/comm_transfer.py)", "",
             f"Rows: `{source}`. |predicted - measured| / measured, median / max. `link`: t = alpha steps + "
             "S share / B; `buffer`: + S / C (the script's docstring). Fitted parameters are the buffer model's.", ""]
    for min_size in min_sizes:
        big = [r for name in RING for r in collective_rows(rows, name, min_size)]
        for key, label in (("time_s", "median trial (the rows' time)"), ("time_min_s", "best trial")):
            lines += [f"### Sizes >= {min_size // MIB} MiB, measured time: {label}", "",
                      *markdown_table(head, table_for(big, low, high, key)), ""]
    top = [r for name in RING for r in collective_rows(rows, name, min_sizes[-1])]
    low_rows = [r for name in RING for r in collective_rows(rows, name, min_sizes[0])]
    lines += [f"### The buffer model fitted on every row >= {min_sizes[-1] // MIB} MiB (median trials), "
              "extrapolated to 8 GPUs", "",
              *markdown_table(["collective", "size", "busbw predicted (GB/s)"], eight_gpu(top, "time_s")), "",
              f"### Rows of {high} GPUs >= {min_sizes[0] // MIB} MiB whose median trial is > 1.2 x the best trial", "",
              *markdown_table(["collective", "size", "median (us)", "best (us)"], noise(low_rows, high)), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default=str(ROOT / "reports/comm/h200-x4/rows.jsonl"))
    ap.add_argument("--min-size", type=int, action="append", help="bytes; repeatable (default 1 MiB and 16 MiB)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    rows = [json.loads(x) for x in Path(args.rows).read_text().splitlines() if x.strip()]
    rows = [r for r in rows if r.get("ok") and r["collective"] in RING]
    source = Path(args.rows).resolve()
    source = source.relative_to(ROOT) if source.is_relative_to(ROOT) else source
    page = render(rows, args.min_size or [MIB, 16 * MIB], str(source))
    print(page)
    if args.out:
        args.out.write_text(page)


if __name__ == "__main__":
    main()
