"""Collectives fitted on one GPU count with parameters shared across collectives, checked on another.

    python scripts/validate/comm_shared.py [--rows reports/comm/h200-x4-same-host/rows.jsonl] [--fit-gpus 2]
                                  [--min-size BYTES] [--out FILE]

Model (NVLS off, ring; steps and share as in scripts/validate/comm_transfer.py and docs/comm.md):

    t = f_c + S share_c(n) / B_g + S / C_g

f_c      a per-call floor of collective c (launch, synchronisation, protocol start): not per ring step --
         the measured small-message times do not grow with the step count from 2 to 4 GPUs
B_g      the bandwidth of a link, shared by the collectives of group g (bytes one GPU sends)
C_g      a cost per byte of the whole buffer at every GPU, shared by group g (bytes the kernel moves
         through its SMs, whatever the ring length)

Group "ring" (all-reduce, all-gather, reduce-scatter) shares B and C. At one GPU count S share and S are
proportional for one collective, but not across the group: on 2 GPUs an all-reduce sends S a GPU and an
all-gather or reduce-scatter S/2, each over a buffer of S. So B and C are identifiable from the 2-GPU rows
alone. All-to-all, broadcast and reduce each have their own B and no C (their busbw does not change with
the GPU count). The fit is least squares in relative error over --fit-gpus rows of sizes >= --min-size;
every other GPU count is held out. `mlsys bench comm --model shared` (mlsyscalc/bench/comm_shared_fit.py)
carries this fit into a cluster spec, with the host floor H and the buffer bytes (1 + 1/p) n.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # validate/, scripts/

from comm_transfer import RING  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MIB = 2**20
GROUPS = {"ring": ("all-reduce", "all-gather", "reduce-scatter"), "all-to-all": ("all-to-all",),
          "broadcast": ("broadcast",), "reduce": ("reduce",)}
BUFFER = {"ring"}  # groups with a buffer term C


class Shared:
    """Columns: one floor a collective, then B of each group, then C of each buffered group."""

    def __init__(self, collectives: list[str]):
        self.coll = [c for g in GROUPS.values() for c in g if c in collectives]
        self.groups = [g for g, members in GROUPS.items() if any(c in self.coll for c in members)]
        self.buffered = [g for g in self.groups if g in BUFFER]
        self.group_of = {c: g for g, members in GROUPS.items() for c in members}

    def row(self, r: dict) -> list[float]:
        c, n, size = r["collective"], r["gpus"], float(r["size_bytes"])
        g = self.group_of[c]
        floor = [1.0 if c == k else 0.0 for k in self.coll]
        link = [size * RING[c][1](n) if g == k else 0.0 for k in self.groups]
        buf = [size if g == k else 0.0 for k in self.buffered]
        return floor + link + buf

    def fit(self, rows: list[dict], key: str = "time_s") -> np.ndarray:
        a, t = np.array([self.row(r) for r in rows]), np.array([r[key] for r in rows])
        if np.linalg.matrix_rank(a) < a.shape[1]:
            raise SystemExit("the rows do not determine every parameter (a buffered group needs two of its "
                             "collectives with different bytes a GPU per byte of buffer)")
        x, *_ = np.linalg.lstsq(a / t[:, None], np.ones(len(t)), rcond=None)
        return x

    def params(self, x: np.ndarray) -> dict:
        k, m = len(self.coll), len(self.groups)
        return {"floor_s": dict(zip(self.coll, x[:k])),
                "B_GBps": {g: 1 / v / 1e9 for g, v in zip(self.groups, x[k:k + m])},
                "C_GBps": {g: 1 / v / 1e9 for g, v in zip(self.buffered, x[k + m:])}}


def signed_errors(model: Shared, x: np.ndarray, rows: list[dict], key: str = "time_s") -> list[float]:
    """predicted / measured - 1 per row."""
    return [float(np.dot(model.row(r), x)) / r[key] - 1 for r in rows]


def render(rows: list[dict], fit_gpus: int, min_size: int, source: str) -> str:
    from mlsyscalc.report.markdown import markdown_table

    rows = [r for r in rows if r["size_bytes"] >= min_size and r["collective"] in RING]
    model = Shared(sorted({r["collective"] for r in rows}))
    x = model.fit([r for r in rows if r["gpus"] == fit_gpus])
    p = model.params(x)
    counts = sorted({r["gpus"] for r in rows})
    sizes = sorted({r["size_bytes"] for r in rows})
    summary, per_size = [], []
    for c in model.coll:
        for n in counts:
            mine = sorted((r for r in rows if r["collective"] == c and r["gpus"] == n), key=lambda r: r["size_bytes"])
            err = dict(zip((r["size_bytes"] for r in mine), signed_errors(model, x, mine)))
            best = signed_errors(model, x, mine, "time_min_s")
            kind = "in-sample" if n == fit_gpus else "held out"
            summary.append([c, n, kind, f"{100 * statistics.median(map(abs, err.values())):.1f}% / "
                            f"{100 * max(map(abs, err.values())):.1f}%",
                            f"{100 * statistics.median(map(abs, best)):.1f}% / {100 * max(map(abs, best)):.1f}%"])
            per_size.append([c, n, kind] + [f"{100 * err[s]:+.0f}" if s in err else "-" for s in sizes])
    lines = [f"## Shared link and buffer parameters fitted on {fit_gpus} GPUs (scripts/validate/comm_shared.py)", "",
             f"Rows: `{source}`, sizes >= {min_size // MIB} MiB. t = f_c + S share / B_g + S / C_g (the "
             "script's docstring). Fitted on the {0}-GPU rows only (median trials).".format(fit_gpus), "",
             "Parameters: B (GB/s) " + ", ".join(f"{g} {v:.0f}" for g, v in p["B_GBps"].items())
             + "; C (GB/s) " + ", ".join(f"{g} {v:.0f}" for g, v in p["C_GBps"].items())
             + "; floor (us) " + ", ".join(f"{c} {v * 1e6:.1f}" for c, v in p["floor_s"].items()) + ".", "",
             "|predicted - measured| / measured, median / max:", "",
             *markdown_table(["collective", "GPUs", "rows", "vs median trial", "vs best trial"], summary), "",
             "predicted / measured - 1 (%) per size (MiB), against the median trial:", "",
             *markdown_table(["collective", "GPUs", "rows"] + [f"{s // MIB}" for s in sizes], per_size), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default=str(ROOT / "reports/comm/h200-x4-same-host/rows.jsonl"))
    ap.add_argument("--fit-gpus", type=int, default=2)
    ap.add_argument("--min-size", type=int, default=MIB)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    rows = [json.loads(x) for x in Path(args.rows).read_text().splitlines() if x.strip()]
    rows = [r for r in rows if r.get("ok")]
    source = Path(args.rows).resolve()
    source = source.relative_to(ROOT) if source.is_relative_to(ROOT) else source
    page = render(rows, args.fit_gpus, args.min_size, str(source))
    print(page)
    if args.out:
        args.out.write_text(page)


if __name__ == "__main__":
    main()
