"""Where a training step's GPU time goes, from a torch.profiler Chrome trace (one rank).

    python scripts/trace_summary.py TRACE.json[.gz] [--steps N]

Kernels (cat "kernel", plus "gpu_memcpy"/"gpu_memset") are put in classes by name: NCCL collectives, matmuls
(cuBLAS/CUTLASS), attention (flash / fused SDPA), and everything else (elementwise, norms, optimizer, casts).
Intervals are merged per class and over all streams, so the answer is wall time on the GPU, not a sum of
kernels on several streams:
  window_s          first kernel start to last kernel end
  busy_s            union of all kernels;  idle_s = window_s - busy_s (the GPU waited for the host or a peer)
  compute_busy_s    union of the non-NCCL kernels
  nccl_s            union of the NCCL kernels;  nccl_exposed_s = the part of it with no compute kernel running
  <class>_s         union of that class's kernels
and the host side (CPU events; the profiler's own overhead inflates them, so read them as upper bounds):
  host_ops          top-level aten ops (cat "cpu_op" not inside another cpu_op of the same thread)
  host_launches     kernel launches (cat "cuda_runtime"/"cuda_driver", name with "LaunchKernel")
  host_busy_s       union over threads of the top-level aten ops that do not wait for the GPU: the time the
                    host spent issuing work
  host_blocked_s    union of the top-level ops that wait for the GPU (a tensor read to the host: .item())
  host_us_per_op    host_busy_s / host_ops, in microseconds
Divided by --steps when the trace holds several steps.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from pathlib import Path

CLASSES = (  # first match wins: attention kernels carry GEMM words too (cuDNN's "sdpa_sm90_flash_..._wgmma")
    ("nccl", re.compile(r"nccl", re.I)),
    ("attention", re.compile(r"flash|fmha|attention|sdpa", re.I)),
    ("matmul", re.compile(r"gemm|cutlass|nvjet|xmma|cublas|sm\d+_.*mma", re.I)),
)
KINDS = ("kernel", "gpu_memcpy", "gpu_memset")


def kernel_class(name: str) -> str:
    return next((label for label, pattern in CLASSES if pattern.search(name)), "other")


def merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted, non-overlapping union of [start, end) intervals."""
    out: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def length(intervals: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in intervals)


def minus(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Length of the merged intervals a outside the merged intervals b."""
    total, j = 0.0, 0
    for start, end in a:
        cursor = start
        while j < len(b) and b[j][1] <= cursor:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            if b[k][0] > cursor:
                total += b[k][0] - cursor
            cursor = max(cursor, b[k][1])
            k += 1
        total += max(0.0, end - cursor)
    return total


def top_level(spans: list) -> list:
    """The spans (start, end, ...) not nested inside an earlier span (one thread's op stack: children start
    and end inside their parent)."""
    out: list = []
    for span in sorted(spans, key=lambda iv: (iv[0], -iv[1])):
        if not out or span[0] >= out[-1][1]:
            out.append(span)
    return out


BLOCKING = ("aten::item", "aten::_local_scalar_dense")  # read a device scalar: wait for the GPU


def host_summary(events: list[dict], steps: int = 1) -> dict[str, float]:
    """host_ops, host_launches, host_busy_s, host_blocked_s, host_us_per_op (module docstring), per step."""
    threads: dict[tuple, list[tuple[float, float, bool]]] = {}
    launches = 0
    for e in events:
        if e.get("ph") != "X":
            continue
        if e.get("cat") == "cpu_op":
            threads.setdefault((e.get("pid"), e.get("tid")), []).append(
                (e["ts"], e["ts"] + e.get("dur", 0), e.get("name") in BLOCKING))
        elif e.get("cat") in ("cuda_runtime", "cuda_driver") and "LaunchKernel" in e.get("name", ""):
            launches += 1
    tops = [iv for spans in threads.values() for iv in top_level(spans)]
    busy = length(merge([(a, b) for a, b, blocked in tops if not blocked])) * 1e-6
    blocked = length(merge([(a, b) for a, b, waits in tops if waits])) * 1e-6
    issued = sum(not waits for _, _, waits in tops)
    return {"host_ops": len(tops) / steps, "host_launches": launches / steps, "host_busy_s": busy / steps,
            "host_blocked_s": blocked / steps, "host_us_per_op": busy / issued * 1e6 if issued else 0.0}


def summarize(events: list[dict], steps: int = 1) -> dict[str, float]:
    """The keys of the module docstring, in seconds per step, from Chrome-trace events (ts, dur in us)."""
    spans: dict[str, list[tuple[float, float]]] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in KINDS and e.get("dur", 0) > 0:
            spans.setdefault(kernel_class(e.get("name", "")), []).append((e["ts"], e["ts"] + e["dur"]))
    every = merge([iv for ivs in spans.values() for iv in ivs])
    host = host_summary(events, steps)
    if not every:
        return {"window_s": 0.0, "busy_s": 0.0, "idle_s": 0.0} | host
    compute = merge([iv for label, ivs in spans.items() if label != "nccl" for iv in ivs])
    nccl = merge(spans.get("nccl", []))
    window = every[-1][1] - every[0][0]
    us = 1e-6 / steps
    out = {"window_s": window * us, "busy_s": length(every) * us, "idle_s": (window - length(every)) * us,
           "compute_busy_s": length(compute) * us, "nccl_s": length(nccl) * us,
           "nccl_exposed_s": minus(nccl, compute) * us}
    out |= {f"{label}_s": length(merge(spans.get(label, []))) * us for label, _ in CLASSES if label != "nccl"}
    out["other_s"] = length(merge(spans.get("other", []))) * us
    return out | host


def load(path: Path) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--steps", type=int, default=1)
    args = ap.parse_args(argv)
    print(json.dumps(summarize(load(args.trace), args.steps), indent=1))


if __name__ == "__main__":
    main()
