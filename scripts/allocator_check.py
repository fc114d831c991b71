"""The caching allocator's rounding, measured beside its replay (calc.memory.caching_allocator over
bench.torch_alloc's event list). Needs a GPU.

For each case (MODEL:PHASE:BATCH:SEQ:MODE[:LAYERS]) this builds the model as `mlsys bench model`
does and walks its memory path (a graph row: graph step, drop, empty cache, eager step), and at three
points reads what the allocator holds: after the build, after the step's inputs and caches (before
any step), and after the warm-up step (with gradients, optimizer states and cuBLAS workspaces). Each
point has memory_allocated and memory_stats' requested bytes (their difference is the rounding,
measured), the snapshot's allocated blocks (block and requested sizes, and the odd ones grouped),
and the replay's allocated, requested and reserved bytes for the same allocations. Then one step:
max_memory_allocated and the peak of requested bytes beside predicted_peak_bytes.

    python scripts/allocator_check.py gpt2:decode:1:1023:graph llama2-7b:decode:1:2048:graph:2 --out alloc.json
    python scripts/allocator_check.py llama2-7b:decode:1:2048:graph::int4 --out alloc.json   (all layers, int4 weights)
"""

from __future__ import annotations

import argparse
import json
from collections import Counter


def _held(torch) -> dict:
    """What the allocator holds now, measured."""
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    blocks = [(b["requested_size"], b["size"]) for seg in torch.cuda.memory_snapshot() for b in seg["blocks"]
              if b["state"] == "active_allocated"]
    odd = Counter(f"{r}->{s}" for r, s in blocks if s - r >= 512)
    by_size: Counter = Counter()
    for r, _ in blocks:
        by_size[r] += r
    return {"allocated_bytes": torch.cuda.memory_allocated(), "requested_bytes": stats["requested_bytes.all.current"],
            "reserved_bytes": torch.cuda.memory_reserved(), "segments": stats["segment.all.current"],
            "snapshot_block_bytes": sum(s for _, s in blocks), "snapshot_requested_bytes": sum(r for r, _ in blocks),
            "odd_blocks": dict(odd.most_common(40)),
            "largest_groups": {f"{size} x {total // max(size, 1)}": total for size, total in by_size.most_common(12)}}


def _point(torch, events) -> dict:
    from mlsyscalc.calc.memory.caching_allocator import simulate

    held = _held(torch)
    sim = simulate(events)
    held.update(sim_allocated_bytes=sim.allocated_bytes, sim_requested_bytes=sim.requested_bytes,
                sim_reserved_bytes=sim.reserved_bytes, sim_segments=sim.segments,
                rounding_bytes=held["allocated_bytes"] - held["requested_bytes"], sim_rounding_bytes=sim.rounding_bytes)
    return held


def check(text: str, device: str = "cuda") -> dict:
    """One case's three points and its peak (`device` other than cuda: a CPU smoke test with torch.cuda faked)."""
    import torch

    from mlsyscalc.bench.cases.model import (ModelCase, _build, _capability, _free, _release_tuning, blas_workspaces,
                                             eager_peak_step, predicted_peak_bytes, reduced_spec, step_fn)
    from mlsyscalc.bench.torch_alloc import build_events, step_events
    from mlsyscalc.bench.torch_models import build_model
    from mlsyscalc.calc.memory.caching_allocator import Alloc
    from mlsyscalc.specs.lookup import load_model

    name, phase, batch, seq, mode, *rest = text.split(":")
    layers, dtype, kernels = (rest + ["", "bf16", ""])[:3]
    case = ModelCase(phase, int(batch), int(seq), graphs=mode == "graph", layers=int(layers) if layers else None,
                     dtype=dtype, kernels=kernels or ("torch" if dtype == "bf16" else "triton"))
    spec = reduced_spec(load_model(name), case.layers)
    _free()
    row: dict = {"case": text, "start_allocated_bytes": torch.cuda.memory_allocated(), "torch": torch.__version__,
                 "gpu": torch.cuda.get_device_name()}
    model = _build(build_model, spec, case, device)
    row["build"] = _point(torch, build_events(spec))
    events = step_events(spec, phase, case.batch, case.seq, case.graphs, case.kernels)
    fn = step_fn(model, spec, case, device)
    if case.mode == "graph":
        fn()
        del fn
        fn = eager_peak_step(model, spec, case, device)
    if phase != "train":
        row["inputs"] = _point(torch, events)
    fn()  # warm-up: workspaces, and for train the gradients and optimizer states
    _release_tuning()  # as the bench does before its peak
    spaces = [Alloc(("workspace", i), n) for i, n in enumerate(blas_workspaces(spec, _capability(device)))]
    row["before_step"] = _point(torch, events + spaces)
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    peak, predicted = torch.cuda.max_memory_allocated(), predicted_peak_bytes(spec, case, _capability(device))
    row.update(peak_bytes=peak, peak_requested_bytes=stats["requested_bytes.all.peak"], predicted_peak_bytes=predicted,
               memory_error=(predicted - peak) / peak,
               step_transient_bytes=peak - row["before_step"]["allocated_bytes"])
    del model, fn
    _free()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="+", help="MODEL:PHASE:BATCH:SEQ:MODE[:LAYERS[:DTYPE[:KERNELS]]] (mode graph or eager; DTYPE int4/int8 runs the triton kernels)")
    ap.add_argument("--out", required=True)
    opts = ap.parse_args()
    rows = []
    for text in opts.cases:
        try:
            rows.append(check(text))
        except Exception as exc:  # noqa: BLE001 - one failed case is a row, the rest go on
            rows.append({"case": text, "error": f"{type(exc).__name__}: {exc}"[:400]})
        brief = {k: v for k, v in rows[-1].items() if not isinstance(v, dict)}
        brief.update({k: {f: v[f] for f in ("allocated_bytes", "sim_allocated_bytes", "rounding_bytes", "sim_rounding_bytes")}
                      for k, v in rows[-1].items() if isinstance(v, dict)})
        print(json.dumps(brief), flush=True)
        with open(opts.out, "w") as f:  # rewritten after each case: a timeout keeps the cases done
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
