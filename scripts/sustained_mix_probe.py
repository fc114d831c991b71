"""The step-clock model of calc.roofline.steady, checked on mixes of known shares: bf16 GEMMs and device copies run back to
back in a fixed ratio until the card settles, the SM clock and each kernel's time read, beside what calc.roofline.steady
predicts for that mix (the clock, and the GEMM's rate at it).

    python scripts/sustained_mix_probe.py --out mix.jsonl [--seconds 8]

Each mix is a window of G GEMMs of 8192 x 8192 x 4096 (bf16) then C copies of 1 GiB, repeated for --seconds; the GEMMs
and the copies are timed apart with CUDA events in the last half of the run, NVML samples the clock beside it
(bench.cases.sustained.CardSampler). The shares are each kind's share of the window's time at burst rates, the mix
calc.roofline.steady reads.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

MIXES = ((1, 0), (4, 1), (2, 1), (1, 1), (1, 2), (1, 4))  # (GEMMs, copies) a window


def run_mix(gemms: int, copies: int, seconds: float, sampler, fns) -> dict:
    import torch

    gemm, copy = fns
    events = []
    clock = lambda: time.perf_counter() - sampler.t0  # noqa: E731
    begin = clock()
    while clock() - begin < seconds:
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        t = clock()
        marks[0].record()
        for _ in range(gemms):
            gemm()
        marks[1].record()
        for _ in range(copies):
            copy()
        marks[2].record()
        events.append((t, marks))
        if len(events) > 2:
            events[-3][1][2].synchronize()
    torch.cuda.synchronize()
    end = clock()
    late = [(m[0].elapsed_time(m[1]) / max(gemms, 1), m[1].elapsed_time(m[2]) / max(copies, 1))
            for t, m in events if t - begin >= seconds / 2]
    return {"gemms": gemms, "copies": copies, "gemm_ms": statistics.median(g for g, _ in late),
            "copy_ms": statistics.median(c for _, c in late) if copies else None,
            "card": sampler.between(begin + (end - begin) / 2, end)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--seconds", type=float, default=8.0)
    args = ap.parse_args()

    import torch

    from mlsyscalc.bench import harness
    from mlsyscalc.bench.cases.sustained import CardSampler
    from mlsyscalc.calc.roofline.steady import H200_STEADY

    harness.use_backend(False)
    m, n, k = 8192, 8192, 4096
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    src = torch.randn(2**28, device="cuda")
    dst = torch.empty_like(src)
    gemm, copy = (lambda: a @ w.T), (lambda: dst.copy_(src))
    burst_gemm, burst_copy = harness.time_ms(gemm), harness.time_ms(copy)
    flops = 2.0 * m * n * k
    env = dict(harness.env_metadata())
    with CardSampler() as sampler, args.out.open("a") as f:
        for gemms, copies in MIXES:
            row = run_mix(gemms, copies, args.seconds, sampler, (gemm, copy))
            busy = gemms * burst_gemm + copies * burst_copy
            mix = {"matmul": gemms * burst_gemm / busy, "memory": copies * burst_copy / busy}
            mhz = H200_STEADY.clock_MHz(mix)
            # the GEMM at that clock: its steady rate (656 TFLOP/s at 1,447 MHz: the steady share of 989.5) x c / c_gemm,
            # at most its burst rate
            predicted_rate = min(flops / (burst_gemm * 1e-3), H200_STEADY.matmul * 989.5e12 * mhz / H200_STEADY.matmul_MHz)
            row |= {"burst_gemm_ms": burst_gemm, "burst_copy_ms": burst_copy, "mix": mix, "predicted_MHz": mhz,
                    "measured_gemm_TFLOPps": flops / (row["gemm_ms"] * 1e-3) / 1e12,
                    "predicted_gemm_TFLOPps": predicted_rate / 1e12, "env": env, "measured_at": harness.now()}
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(gemms, copies, "clock", row["card"].get("sm_clock_MHz"), "pred", round(mhz),
                  "GEMM", round(row["measured_gemm_TFLOPps"]), "pred", round(row["predicted_gemm_TFLOPps"]),
                  "power", row["card"].get("power_W"), row["card"].get("throttle"))
            time.sleep(1.0)


if __name__ == "__main__":
    main()
