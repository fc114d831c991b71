"""The per-iteration host time `mlsys serve` charges by default, from the measured replay.

    python scripts/serve_host_fit.py                                   # reports/serving/replay_h200.json
    python scripts/serve_host_fit.py reports/serving/replay_h100.json  # another replay file

Every iteration of a replay (scripts/validate/serve_replay.py) records its wall time and its GPU time (CUDA events
around the forward); wall - GPU is the host's share: scheduling, building and copying the inputs,
sampling, bookkeeping. A least-squares line over every decode iteration of every run, against the
sequences that sample a token in it, gives calc.serve.simulator's HOST_BASE_S and HOST_PER_SEQ_S. Prints the fit,
the per-run medians, and the rows it used; writes nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "reports" / "serving" / "replay_h200.json"


def decode_rows(data: dict) -> list[tuple[float, int, float]]:
    """(rate, sequences, host seconds) of every decode iteration: the `clock` rows
    [kind, sequences or tokens, wall_s, gpu_s] of each run."""
    return [(run["rate"], int(size), wall - gpu) for run in data["runs"]
            for kind, size, wall, gpu in run["times"]["clock"] if kind == "decode"]


def fit(rows: list[tuple[float, int, float]]) -> tuple[float, float]:
    """(seconds per iteration, seconds per sequence): least squares of host time on sequences."""
    xs, ys = [float(n) for _, n, _ in rows], [h for _, _, h in rows]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("replay", nargs="?", default=str(DEFAULT), help="a replay JSON with per-iteration clocks")
    args = parser.parse_args()
    data = json.loads(Path(args.replay).read_text())
    if not all("clock" in run["times"] for run in data["runs"]):
        raise SystemExit(f"{args.replay}: no per-iteration clocks (replays from before they were recorded)")
    rows = decode_rows(data)
    base, per_seq = fit(rows)
    print(f"{args.replay}: {data['device']}, commit {data['commit'][:7]}, {len(rows)} decode iterations "
          f"of {min(n for _, n, _ in rows)}-{max(n for _, n, _ in rows)} sequences")
    for rate in sorted({r for r, _, _ in rows}):
        host = [h for r, _, h in rows if r == rate]
        print(f"  {rate:g} requests/s: {len(host)} iterations, median host {statistics.median(host) * 1e6:.0f} us")
    print(f"host time = {base * 1e6:.0f} us + {per_seq * 1e6:.1f} us per sequence (least squares)")


if __name__ == "__main__":
    main()
