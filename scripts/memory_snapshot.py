"""What is alive at a training step's memory peak: the allocator's trace of a scripts/train_measure.py case, replayed.

    NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc_per_node N scripts/memory_snapshot.py --case C [--case ...] \
        --out $OUT [--seqs-per-gpu 2]

Each case runs as in train_measure.py (2 warm-up steps and 1 more) under torch.cuda.memory._record_memory_history;
the trace is replayed allocation by allocation (the allocated bytes the caching allocator counts, as
max_memory_allocated does), and the blocks alive at the largest total are grouped by the innermost Python frame
of mlsyscalc or scripts/ that allocated them. Each rank writes $OUT/peak_<case>_rank<r>.json: the peak, the
allocated bytes before recording, and the groups (bytes, count, frame, the torch frame below it) largest first.
GPU only; the replay (`replay`, `groups`) is a pure function of the trace.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

OURS = ("mlsyscalc/", "scripts/")


def replay(events: list[dict], baseline: int = 0) -> tuple[int, dict[int, dict]]:
    """(peak allocated bytes, {addr: alloc event} alive at the peak) of an allocator trace; `baseline` bytes were
    allocated before it began. A block counts from its alloc to its first free event."""
    live: dict[int, dict] = {}
    total = peak = baseline
    at_peak: dict[int, dict] = {}
    for e in events:
        if e["action"] == "alloc":
            live[e["addr"]] = e
            total += e["size"]
            if total > peak:
                peak, at_peak = total, dict(live)
        elif e["action"] in ("free_requested", "free_completed"):
            if e["addr"] in live:
                total -= live.pop(e["addr"])["size"]
            elif e["action"] == "free_requested":  # a block from before the trace
                total -= e["size"]
    return peak, at_peak


def _where(frames: list[dict]) -> tuple[str, str]:
    """(innermost frame of ours, the frame just inside it) as 'file:line name'."""
    ours = next((i for i, f in enumerate(frames) if any(k in f["filename"] for k in OURS)), None)
    if ours is None:
        return "(no mlsyscalc/scripts frame)", _fmt(frames[0]) if frames else "-"
    return _fmt(frames[ours]), _fmt(frames[ours - 1]) if ours else "-"


def _fmt(f: dict) -> str:
    return f"{Path(f['filename']).name}:{f['line']} {f['name']}"


def groups(alive: dict[int, dict]) -> list[dict]:
    """Alive blocks grouped by where they were allocated, largest first."""
    out: dict[tuple[str, str], dict] = {}
    for e in alive.values():
        key = _where(e.get("frames", []))
        g = out.setdefault(key, {"bytes": 0, "count": 0, "frame": key[0], "below": key[1]})
        g["bytes"] += e["size"]
        g["count"] += 1
    return sorted(out.values(), key=lambda g: -g["bytes"])


def run(args) -> None:
    import torch
    import torch.distributed as dist

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import train_measure as tm

    from mlsyscalc.specs.lookup import load_model

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(device)
    spec = load_model(*tm.MODEL)
    for case in args.case:
        lay = tm.layout(case, world, args.seqs_per_gpu)
        torch.cuda.synchronize(device)
        baseline = torch.cuda.memory_allocated(device)
        torch.cuda.memory._record_memory_history(max_entries=args.max_entries, stacks="python")
        row = tm.measure(case, spec, lay, args.seq, 2, 1, device)
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        events = snap["device_traces"][device.index]
        peak, alive = replay(events, baseline)
        out = {"case": case, "rank": rank, "world": world, **lay, "max_memory_allocated": row["peak_bytes"],
               "replayed_peak_bytes": peak, "baseline_bytes": baseline, "events": len(events),
               "truncated": len(events) >= args.max_entries, "groups": groups(alive)[:60]}
        Path(args.out, f"peak_{case}_rank{rank}.json").write_text(json.dumps(out, indent=1))
        dist.barrier()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", action="append", required=True, help="a train_measure.py case (repeatable)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--seqs-per-gpu", type=int, default=2)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--max-entries", type=int, default=1_000_000)
    run(ap.parse_args(argv))


if __name__ == "__main__":
    main()
