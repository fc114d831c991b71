"""Where the idle time between CUDA-graph-replayed kernels goes: one decode step of a model, replayed under
torch.profiler, each gap (next kernel's start - this kernel's end) attributed to the kernel before it and the one
after it.

The roofline priced a replayed step as the sum of its kernels, and the models pages found the step longer than
the profiled kernels' sum by 0.3-1.4 us a kernel. This shows which kernel pairs carry that time; its traces of the
H100 fit set set the roofline's gap before each kernel (calc.roofline.calibration.KERNEL_GAP_S).

    python experiments/graph_gaps.py MODEL --batch 1,8 [--context 2048] [--layers N] [--set KEY=VALUE ...] --out gaps.json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections import defaultdict


def kernel_class(name: str) -> str:
    """A short, stable label of a kernel: its template or symbol name without arguments."""
    name = re.sub(r"\(.*", "", name)
    name = re.sub(r"<.*", "", name)
    name = name.replace("void ", "").strip()
    return name.split("::")[-1][:60] or "?"


def replay_gaps(step, replays: int):
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            step()
        torch.cuda.synchronize()
    kernels = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                     key=lambda e: e.time_range.start)
    return [(k.name, k.time_range.start, k.time_range.end) for k in kernels]


def summarize(kernels, replays: int, wall_s: float) -> dict:
    """Gaps between consecutive kernels (us), by (previous, next) class; a gap above 50 us is the boundary between
    two replays and is left out."""
    pairs: dict[tuple[str, str], list[float]] = defaultdict(list)
    busy = sum(end - start for _, start, end in kernels)
    for (a, _, a_end), (b, b_start, _) in zip(kernels, kernels[1:]):
        gap = b_start - a_end
        if gap < 50:
            pairs[(kernel_class(a), kernel_class(b))].append(gap)
    gaps = [g for v in pairs.values() for g in v]
    top = sorted(pairs.items(), key=lambda kv: -sum(kv[1]))[:15]
    return {"kernels_per_replay": len(kernels) / replays, "busy_us_per_replay": busy / replays,
            "gap_us_per_replay": sum(gaps) / replays, "step_us": wall_s * 1e6,
            "median_gap_us": statistics.median(gaps) if gaps else 0.0,
            "negative_gaps": sum(g < 0 for g in gaps) / replays,
            "top_pairs": [{"before": a, "after": b, "count_per_replay": len(v) / replays,
                           "gap_us_per_replay": sum(v) / replays, "median_us": statistics.median(v)}
                          for (a, b), v in top]}


def decode_parser(doc: str, batch: str) -> argparse.ArgumentParser:
    """The arguments every decode-replay experiment takes (MODEL, --batch, --context, --layers, --set, --out)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--batch", default=batch)
    ap.add_argument("--context", type=int, default=2048)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--out", required=True)
    return ap


def each_batch(args, measure) -> None:
    """The model built once (bf16, random weights); per batch of --batch, one CUDA-graph decode step and
    measure(step) -> a row's fields; the rows and the device to args.out (JSON)."""
    import torch

    from mlsyscalc.bench.cases.model import ModelCase, reduced_spec, step_fn
    from mlsyscalc.bench.torch_models import build_model
    from mlsyscalc.specs.lookup import load_model, parse_overrides

    spec = reduced_spec(load_model(args.model, parse_overrides(tuple(args.set)) or None), args.layers)
    torch.manual_seed(0)
    model = build_model(spec, "bfloat16", "cuda")
    model.requires_grad_(False)
    out = {"model": args.model, "overrides": args.set, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "rows": []}
    for b in map(int, args.batch.split(",")):
        step = step_fn(model, spec, ModelCase("decode", b, args.context), "cuda")
        row = {"batch": b, **measure(step)}
        out["rows"].append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "top_pairs"}), flush=True)
        del step
        torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


def main() -> None:
    from mlsyscalc.bench.cases.model import _time_s

    ap = decode_parser(__doc__, "1,8")
    ap.add_argument("--replays", type=int, default=5)
    args = ap.parse_args()
    each_batch(args, lambda step: summarize(replay_gaps(step, args.replays), args.replays, _time_s(step, 20, 5)))


if __name__ == "__main__":
    main()
