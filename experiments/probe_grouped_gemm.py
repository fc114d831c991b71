"""The routed experts' GEMMs of a training step, timed on one GPU, against the calculator's price for them.

    python experiments/probe_grouped_gemm.py --out DIR        # DIR/probe_grouped_gemm.jsonl, one summary line a case

Why: the held-out MoE runs (reports/train/heldout_bridge_mlperf6) are priced 19-44% too fast, and the calculator
prices a grouped GEMM of E local experts at the dense GEMM class's rate (calc.roofline.ops.predict_grouped_matmul).
This times, for the expert shapes of those runs (one micro-batch's routed rows on one GPU of the published layout,
routing balanced), the three GEMMs of each expert projection (forward, data gradient, weight gradient):
- `torch._grouped_mm` (one CUTLASS grouped kernel over the experts, what torch and Transformer Engine style
  grouped GEMMs run) where this torch has it;
- one cuBLAS `torch.matmul` per expert back to back (the loop a plain MoE runs);
- the same FLOPs as one dense GEMM (rows x K @ K x N), the rate the calculator assumes;
and the calculator's prediction for the grouped GEMM at the card's datasheet ceilings (`predicted_us`).
Times: triton.testing.do_bench medians (L2 flushed between calls), bf16 in and out. Every grouped result is
checked against the per-expert loop first (max relative error in the row).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

# (case, hidden, expert width, local experts, routed rows a GPU in one micro-batch): the published layouts of
# reports/train/heldout_bridge_mlperf6 with balanced routing (rows = micro-batch x seq x top-k / TP when
# the sequence is split over TP, the experts' tokens after the all-to-all over EP)
CASES = [
    ("gpt-oss-120b ep8", 2880, 2880, 16, 4 * 4096 * 4),
    ("qwen3-235b-a22b ep32 tp2", 4096, 1536, 4, 4096 * 8 // 2),
    ("qwen3-30b-a3b ep8", 2048, 768, 16, 4096 * 8),
]


def _commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1])
    return out.stdout.strip() or "unknown"


def main() -> None:
    import torch
    from triton.testing import do_bench

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "probe_grouped_gemm.jsonl"
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from mlsyscalc.calc.roofline.ops import predict_grouped_matmul

    dev = torch.device("cuda")
    gpu = torch.cuda.get_device_name()
    spec_gpu = "H200" if "H200" in gpu else "H100-SXM"
    env = {"torch": torch.__version__, "gpu": gpu, "commit": _commit(), "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    has_grouped = hasattr(torch, "_grouped_mm")
    with path.open("a") as f:
        f.write(json.dumps({"env": env, "grouped_mm": has_grouped}) + "\n")
        for case, h, width, experts, rows in CASES:
            per = rows // experts
            offs = torch.arange(1, experts + 1, device=dev, dtype=torch.int32) * per
            for proj, k, n in (("fc1", h, 2 * width), ("fc2", width, h)):
                for pass_name in ("forward", "dgrad", "wgrad"):
                    if pass_name == "forward":        # (rows, k) @ (k, n) per expert
                        m_, k_, n_ = rows, k, n
                    elif pass_name == "dgrad":        # (rows, n) @ (n, k)
                        m_, k_, n_ = rows, n, k
                    else:                             # (k, rows_e) @ (rows_e, n): the weight gradient, K = rows
                        m_, k_, n_ = k, per, n
                    flops = 2.0 * rows * k * n
                    row = {"section": "grouped_gemm", "case": case, "proj": proj, "pass": pass_name, "experts": experts,
                           "rows": rows, "k": k, "n": n, "gpu": gpu, "commit": env["commit"]}
                    if pass_name == "wgrad":
                        a = [torch.randn(m_, k_, device=dev, dtype=torch.bfloat16) for _ in range(experts)]
                        b = [torch.randn(k_, n_, device=dev, dtype=torch.bfloat16) for _ in range(experts)]
                        loop = lambda: [x @ y for x, y in zip(a, b)]  # noqa: E731
                        dense_a = torch.randn(m_, k_ * experts, device=dev, dtype=torch.bfloat16)
                        dense_b = torch.randn(k_ * experts, n_, device=dev, dtype=torch.bfloat16)
                        grouped = None
                        if has_grouped:
                            at = torch.cat(a, dim=1)                      # (k, rows): the experts' rows side by side
                            bt = torch.cat(b, dim=0)                      # (rows, n)
                            grouped = lambda: torch._grouped_mm(at, bt, offs=offs)  # noqa: E731
                    else:
                        x = torch.randn(m_, k_, device=dev, dtype=torch.bfloat16)
                        w = torch.randn(experts, k_, n_, device=dev, dtype=torch.bfloat16)
                        loop = lambda: [x[i * per:(i + 1) * per] @ w[i] for i in range(experts)]  # noqa: E731
                        dense_a, dense_b = x, w[0] if experts == 1 else torch.randn(k_, n_, device=dev, dtype=torch.bfloat16)
                        grouped = (lambda: torch._grouped_mm(x, w, offs=offs)) if has_grouped else None  # noqa: E731
                    ref = torch.cat(loop(), dim=0) if pass_name != "wgrad" else torch.stack(loop())
                    if grouped is not None:
                        try:
                            got = grouped()
                            got = got if pass_name != "wgrad" else got.reshape(ref.shape)
                            row["rel_err"] = float((got.float() - ref.float()).norm() / ref.float().norm())
                            row["grouped_us"] = do_bench(grouped) * 1e3
                        except Exception as exc:  # noqa: BLE001 - a probe: record why and go on
                            row["grouped_error"] = f"{type(exc).__name__}: {exc}"[:300]
                    row["loop_us"] = do_bench(loop) * 1e3
                    row["dense_us"] = do_bench(lambda: dense_a @ dense_b) * 1e3
                    pn, pk = (k, n) if pass_name == "dgrad" else (n, k)   # wgrad priced as the forward's shape
                    pred = predict_grouped_matmul(rows, experts, pn, pk, "bf16", spec_gpu, experts=True,
                                                  name=f"experts.{proj}")
                    row["predicted_us"] = pred.predicted_s * 1e6
                    for key in ("grouped_us", "loop_us", "dense_us", "predicted_us"):
                        if key in row:
                            row[key.replace("_us", "_tflops")] = flops / row[key] / 1e6
                    f.write(json.dumps(row) + "\n")
                    f.flush()
                    print(f"{case} {proj} {pass_name}: grouped {row.get('grouped_us', float('nan')):.1f} us "
                          f"({row.get('grouped_tflops', float('nan')):.0f} TF/s, err {row.get('rel_err', float('nan')):.1e}) | "
                          f"loop {row['loop_us']:.1f} ({row['loop_tflops']:.0f}) | dense {row['dense_us']:.1f} "
                          f"({row['dense_tflops']:.0f}) | predicted {row['predicted_us']:.1f} ({row['predicted_tflops']:.0f})"
                          + (f" | {row['grouped_error']}" if "grouped_error" in row else ""), flush=True)


if __name__ == "__main__":
    main()
