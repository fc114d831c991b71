"""Pair the NCCL kernels of two ranks' Chrome traces (the same profiled steps, torch.profiler, one host) call by
call, and split each kernel's time into the transfer and the wait for the other rank: both kernels of one call end
together, so the rank that started last waited least; min(d0, d1) bounds the transfer from above and
d - min(d0, d1) is that rank's wait for its peer. Only a host's own GPUs: their kernel timestamps share the host's
clock (the end times of paired kernels check it: `end_gap_us`).

    python scripts/nccl_pairs.py trace_tp_rank0.json.gz trace_tp_rank1.json.gz [--steps 2]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trace_summary import KINDS, load  # noqa: E402

NCCL = re.compile(r"nccl", re.I)


def nccl_kernels(events: list[dict]) -> list[tuple[str, float, float]]:
    """(name, start us, duration us) of every NCCL kernel, in start order."""
    out = [(e["name"], float(e["ts"]), float(e["dur"])) for e in events
           if e.get("ph") == "X" and e.get("cat") in KINDS and NCCL.search(e.get("name", "")) and e.get("dur", 0) > 0]
    return sorted(out, key=lambda k: k[1])


def pair(a: list[tuple[str, float, float]], b: list[tuple[str, float, float]], steps: int = 1) -> dict:
    """Per step: calls, each rank's NCCL seconds, the transfer bound (sum of min durations) and each rank's wait;
    the median gap between paired end times (us) and the largest start skew (us)."""
    if len(a) != len(b) or not a:
        raise SystemExit(f"the ranks ran {len(a)} and {len(b)} NCCL kernels: not the same calls")
    if any(x[0] != y[0] for x, y in zip(a, b)):
        raise SystemExit("paired kernels differ by name: not the same calls in the same order")
    shortest = [min(x[2], y[2]) for x, y in zip(a, b)]
    ends = [abs((x[1] + x[2]) - (y[1] + y[2])) for x, y in zip(a, b)]
    per = 1e-6 / steps
    names: dict[str, list[float]] = {}
    for (name, _, _), s in zip(a, shortest):
        names.setdefault(name.split("(")[0][:60], []).append(s)
    return {"calls": len(a) / steps, "rank0_s": sum(x[2] for x in a) * per, "rank1_s": sum(y[2] for y in b) * per,
            "transfer_bound_s": sum(shortest) * per,
            "rank0_wait_s": sum(x[2] - s for x, s in zip(a, shortest)) * per,
            "rank1_wait_s": sum(y[2] - s for y, s in zip(b, shortest)) * per,
            "end_gap_median_us": statistics.median(ends), "start_skew_max_us": max(abs(x[1] - y[1]) for x, y in zip(a, b)),
            "by_kernel": {n: {"calls": len(v) / steps, "transfer_bound_s": sum(v) * per,
                              "median_us": statistics.median(v)} for n, v in names.items()}}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rank0", type=Path)
    ap.add_argument("rank1", type=Path)
    ap.add_argument("--steps", type=int, default=2, help="profiled steps in the traces (train_measure: 2)")
    args = ap.parse_args(argv)
    print(json.dumps(pair(nccl_kernels(load(args.rank0)), nccl_kernels(load(args.rank1)), args.steps), indent=1))


if __name__ == "__main__":
    main()
