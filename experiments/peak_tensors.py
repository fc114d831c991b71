"""What is allocated at the peak of one eager training step: torch's allocator history replayed to the moment
max_memory_allocated is reached, the live blocks grouped by the Python frame that allocated them.

`mlsys bench model` reports the step's peak (an eager step's, as the graph rows do) beside the memory calculator's;
where they disagree this names the tensors at the measured peak.

    python experiments/peak_tensors.py MODEL --layers N --seq S [--batch B] [--set KEY=VALUE ...] --out peak.json
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict


def _where(frames: list[dict]) -> str:
    """The innermost frames of this repository's code or torch's autograd/optim, as 'file:line function'."""
    keep = [f for f in frames if "mlsyscalc" in f.get("filename", "") or "torch/optim" in f.get("filename", "")
            or "torch/autograd" in f.get("filename", "")]
    pick = keep[:2] or frames[:2]
    return " <- ".join(f"{f['filename'].split('/')[-1]}:{f['line']} {f['name']}" for f in pick) or "?"


def live_at_peak(trace: list[dict]) -> tuple[int, list[dict]]:
    """(peak bytes, the blocks live at the first moment the allocated total reaches it)."""
    live: dict[int, dict] = {}
    total = peak = 0
    peak_live: list[dict] = []
    for e in trace:
        if e["action"] == "alloc":
            live[e["addr"]] = e
            total += e["size"]
            if total > peak:
                peak, peak_live = total, list(live.values())
        elif e["action"] in ("free_requested", "free") and e["addr"] in live:
            total -= live.pop(e["addr"])["size"]
    return peak, peak_live


def main() -> None:
    import torch

    from mlsyscalc.bench.cases.model import ModelCase, reduced_spec, step_fn
    from mlsyscalc.bench.torch_models import build_model
    from mlsyscalc.specs.lookup import load_model, parse_overrides

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    spec = reduced_spec(load_model(args.model, parse_overrides(tuple(args.set)) or None), args.layers)
    torch.manual_seed(0)
    model = build_model(spec, "bfloat16", "cuda")
    step = step_fn(model, spec, ModelCase("train", args.batch, args.seq, graphs=False), "cuda")
    step()  # the optimizer's states exist from here on, as in a timed step
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=200_000)
    step()
    torch.cuda.synchronize()
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    measured = torch.cuda.max_memory_allocated()
    before = sum(b["size"] for s in snapshot["segments"] for b in s["blocks"] if b["state"] == "active_allocated")
    trace = snapshot["device_traces"][torch.cuda.current_device()]
    # blocks alive before recording began have no alloc event: the replay counts from the step's start
    step_peak, blocks = live_at_peak(trace)
    groups: dict[str, list[int]] = defaultdict(list)
    for b in blocks:
        groups[_where(b.get("frames", []))].append(b["size"])
    top = sorted(((k, sum(v), len(v)) for k, v in groups.items()), key=lambda t: -t[1])[:25]
    out = {"model": args.model, "layers": spec.num_layers, "seq": args.seq, "batch": args.batch,
           "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "max_memory_allocated": measured, "allocated_after_step": before, "allocated_during_step_at_peak": step_peak,
           "live_at_peak": [{"where": k, "bytes": s, "blocks": n} for k, s, n in top]}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps({k: v for k, v in out.items() if k != "live_at_peak"}))
    for g in out["live_at_peak"][:12]:
        print(f"{g['bytes'] / 2**30:8.3f} GiB {g['blocks']:4d}  {g['where']}")


if __name__ == "__main__":
    main()
