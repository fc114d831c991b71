"""Is the public kernels' gap a per-byte efficiency that carries across cards? Fit on the A100, score the H100.

    python experiments/fit_vidur_kernels.py [--out experiments/data/vidur_kernel_fit.json]

For each op of reports/fused/public/vidur_cases.json (Vidur's profiles of Sarathi-Serve's kernels, microsoft/vidur
7d47513) the time of one call is modelled as

    t = t0 + bytes / (eff x datasheet bandwidth)

with bytes the fused list's own count for the call (reports/fused/public/predictions.json keeps it per case),
t0 a fixed kernel latency in seconds and eff a share of the card's datasheet bandwidth, both per op. They are
fitted on the A100 cases only (least squares on log time, a grid over eff and t0), then the H100 cases are priced
with the same t0 and eff against the H100's datasheet bandwidth and scored: error = predicted / measured - 1.
The H100 cases were not used in the fit; the model's form was chosen after the default price's errors on both
cards (reports/fused/public/scored.md) had been read. A second variant scales t0 by the cards' top SM clocks
(a latency counted in cycles); it was chosen after the first variant's H100 errors were read: in-sample.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIR = ROOT / "reports" / "fused" / "public"
DATASHEET_BPS = {"a100": 2039e9, "h100": 3350e9}  # model_specs: A100-80GB-SXM, H100-SXM
BOOST_MHZ = {"a100": 1410.0, "h100": 1980.0}       # the cards' top SM clocks (datasheets)
BANDS = ((1, 64), (128, 1024), (2048, 4096))
EFFS = [i / 200 for i in range(10, 201)]          # 0.05 .. 1.00
T0S = [i * 0.1e-6 for i in range(151)]          # 0 .. 15 us


def load() -> list[dict]:
    cases = json.loads((DIR / "vidur_cases.json").read_text())["cases"]
    pred = json.loads((DIR / "predictions.json").read_text())["predictions"]
    return [{**c, "bytes": pred[c["id"]]["default"]["bytes"]} for c in cases]


def fit(rows: list[dict]) -> tuple[float, float]:
    """(t0, eff) with the least squared log error over rows."""
    best = None
    logs = [math.log(r["measured_ms"] * 1e-3) for r in rows]
    for eff in EFFS:
        rates = [r["bytes"] / (eff * DATASHEET_BPS[r["card"]]) for r in rows]
        for t0 in T0S:
            sse = sum((math.log(t0 + s) - m) ** 2 for s, m in zip(rates, logs) if t0 + s > 0)
            if best is None or sse < best[0]:
                best = (sse, t0, eff)
    assert best is not None
    return best[1], best[2]


def stats(errors: list[float]) -> dict:
    return {"cases": len(errors), "median_abs": statistics.median(abs(e) for e in errors),
            "worst_abs": max(abs(e) for e in errors), "median_signed": statistics.median(errors),
            "within_20": sum(abs(e) <= 0.20 for e in errors)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "experiments" / "data" / "vidur_kernel_fit.json"))
    args = parser.parse_args()
    rows = load()
    ops = sorted({r["op"] for r in rows})
    out: dict = {"model": "t = t0 + bytes / (eff x datasheet bandwidth), per op; fitted on the A100 cases only",
                 "ops": {}}
    every: list[float] = []
    scaled_all: list[float] = []
    for op in ops:
        a100 = [r for r in rows if r["op"] == op and r["card"] == "a100"]
        h100 = [r for r in rows if r["op"] == op and r["card"] == "h100"]
        t0, eff = fit(a100)

        def err(r: dict, scale: bool = False) -> float:
            lat = t0 * (BOOST_MHZ["a100"] / BOOST_MHZ[r["card"]] if scale else 1.0)
            return (lat + r["bytes"] / (eff * DATASHEET_BPS[r["card"]])) / (r["measured_ms"] * 1e-3) - 1
        held = [err(r) for r in h100]
        every += held
        scaled_all += [err(r, True) for r in h100]
        out["ops"][op] = {"t0_us": round(t0 * 1e6, 2), "eff": eff, "a100_in_sample": stats([err(r) for r in a100]),
                          "h100_held_out": stats(held),
                          "h100_t0_clock_scaled_in_sample": {
                              f"{lo}-{hi}": stats([err(r, True) for r in h100 if lo <= r["tokens"] <= hi])
                              for lo, hi in BANDS}}
        s = out["ops"][op]["h100_held_out"]
        print(f"{op:26s} t0 {t0 * 1e6:5.1f} us  eff {eff:.3f}   H100: median |err| {100 * s['median_abs']:5.1f}%  "
              f"worst {100 * s['worst_abs']:5.0f}%  signed {100 * s['median_signed']:+5.1f}%  "
              f"within 20% {s['within_20']}/{s['cases']}")
    out["h100_held_out_every_op"] = stats(every)
    s = out["h100_held_out_every_op"]
    print(f"{'every op':26s} H100: median |err| {100 * s['median_abs']:.1f}%, worst {100 * s['worst_abs']:.0f}%, "
          f"signed {100 * s['median_signed']:+.1f}%, within 20% {s['within_20']}/{s['cases']}")
    out["h100_t0_clock_scaled_every_op_in_sample"] = s = stats(scaled_all)
    print(f"{'t0 x clock (in-sample)':26s} H100: median |err| {100 * s['median_abs']:.1f}%, signed "
          f"{100 * s['median_signed']:+.1f}%, within 20% {s['within_20']}/{s['cases']}")
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
