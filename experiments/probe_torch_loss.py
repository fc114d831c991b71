"""Plain PyTorch cross-entropy on a vocabulary, with and without the fp32 upcast: time and memory on one GPU.

    python experiments/probe_torch_loss.py OUT.json

For each (tokens, vocabulary) and each variant, `F.cross_entropy(logits.float(), y)` ("fp32", what --framework torch
prices) and `F.cross_entropy(logits, y)` on bf16 logits ("bf16", e.g. NeMo AutoModel's MaskedCrossEntropy with
fp32_upcast false), the forward and backward from bf16 logits that require grad: the median time of 20 runs after 3
warm-ups (CUDA events), and the peak memory the loss adds above the logits (max_memory_allocated during forward +
backward minus the allocated bytes before it, the logits' gradient included), in bytes per logit element. The
ground truth for `--loss` of `mlsys train --framework torch` (docs/train.md).
"""

from __future__ import annotations

import json
import statistics
import sys

import torch
import torch.nn.functional as F

SHAPES = ((4096, 128256), (8192, 151936), (16384, 128256), (16384, 151936))


def one(tokens: int, vocab: int, variant: str) -> dict:
    logits = torch.randn(tokens, vocab, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    y = torch.randint(0, vocab, (tokens,), device="cuda")

    def step() -> None:
        x = logits.float() if variant == "fp32" else logits
        F.cross_entropy(x, y).backward()
        logits.grad = None

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    times = []
    for _ in range(20):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3)
    return {"tokens": tokens, "vocab": vocab, "variant": variant, "median_s": statistics.median(times),
            "peak_added_bytes": peak, "bytes_per_element": peak / (tokens * vocab)}


def main() -> None:
    rows = []
    for t, v in SHAPES:
        for variant in ("fp32", "bf16"):
            rows.append(one(t, v, variant))
            torch.cuda.empty_cache()
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda}
    json.dump({"meta": meta, "rows": rows}, open(sys.argv[1], "w"), indent=1)
    for r in rows:
        print(f"{r['tokens']:6d} x {r['vocab']:6d} {r['variant']}: {r['median_s'] * 1e3:7.2f} ms, "
              f"{r['bytes_per_element']:.2f} B/element")


if __name__ == "__main__":
    main()
