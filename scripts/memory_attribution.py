"""Where a whole-model step's peak memory goes: the allocator's own record, beside calc.memory's parts.

For each case (MODEL PHASE BATCH SEQ MODE) this builds the model exactly as `mlsys bench model` does,
runs the step as its measurement does (a CUDA-graph row is timed, its graph dropped, then one eager
step gives the peak), and replays torch's allocator trace (`torch.cuda.memory._record_memory_history`)
to split `max_memory_allocated` into what was alive before the step (weights, KV cache, cuBLAS
workspaces of each stream, graph leftovers) and what the step itself allocated at its peak, each
grouped by the Python line that allocated it. The trace records each allocation's requested size,
while max_memory_allocated counts the allocator's blocks (rounded up, unsplit remainders included):
the difference is the caching allocator's rounding, which scripts/allocator_check.py measures and
calc.memory.caching_allocator replays. Needs a GPU.

    python scripts/memory_attribution.py gpt2:decode:1:1023:graph gpt2:prefill:2:1024:graph --out rows.json
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict


def _where(frames: list[dict]) -> str:
    """The innermost frame inside mlsyscalc (else the innermost Python frame, else 'C++')."""
    py = [f for f in frames if f.get("filename", "").endswith(".py")]
    ours = [f for f in py if "mlsyscalc" in f["filename"]]
    f = (ours or py or [None])[0]
    return f"{f['filename'].split('mlsyscalc/')[-1]}:{f['line']} {f['name']}" if f else "C++ (no Python frame)"


def _replay(trace: list[dict], start: int) -> tuple[int, dict[int, tuple[int, dict]], int]:
    """Replay alloc/free events: (bytes alive at the peak after event `start`, the live blocks there
    as (event index, event), bytes alive just before `start`)."""
    live: dict[int, tuple[int, dict]] = {}
    total = peak = before = 0
    at_peak: dict[int, tuple[int, dict]] = {}
    for i, ev in enumerate(trace):
        if i == start:
            before, peak, at_peak = total, total, dict(live)
        if ev["action"] == "alloc":
            live[ev["addr"]] = (i, ev)
            total += ev["size"]
        elif ev["action"] == "free_completed" and ev["addr"] in live:
            total -= live.pop(ev["addr"])[1]["size"]
        if i >= start and total > peak:
            peak, at_peak = total, dict(live)
    return peak, at_peak, before


def _sizes(blocks) -> dict[str, int]:
    """How many blocks of each size of 1 MiB or more (cuBLAS workspaces show as 32 MiB on Hopper)."""
    out: dict[str, int] = defaultdict(int)
    for ev in blocks:
        if ev["size"] >= 1 << 20:
            out[f"{ev['size'] / 2**20:g} MiB"] += 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _group(blocks) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for ev in blocks:
        out[_where(ev.get("frames", []))] += ev["size"]
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def attribute(model_name: str, phase: str, batch: int, seq: int, mode: str) -> dict:
    import torch

    from mlsyscalc.bench.cases.model import (ModelCase, _build, _free, _time_s, eager_peak_step, predicted_peak_bytes,
                                             step_fn)
    from mlsyscalc.bench.torch_models import build_model
    from mlsyscalc.calc.memory.inference import InferOptions, infer_memory
    from mlsyscalc.specs.lookup import load_model

    spec = load_model(model_name)
    case = ModelCase(phase, batch, seq, graphs=mode == "graph")
    _free()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(stacks="python", max_entries=2_000_000)
    start_bytes = torch.cuda.memory_allocated()
    model = _build(build_model, spec, case, "cuda")
    weights = torch.cuda.memory_allocated() - start_bytes
    fn = step_fn(model, spec, case, "cuda")
    median_s = _time_s(fn, 5, warmup=3)
    after_timing = torch.cuda.memory_allocated() - start_bytes
    if case.mode == "graph":
        del fn
        fn = eager_peak_step(model, spec, case, "cuda")
        fn()
    torch.cuda.synchronize()
    mark = len(torch.cuda.memory._snapshot()["device_traces"][0])
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - start_bytes
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    torch.cuda.memory._record_memory_history(enabled=None)
    replay_peak, live, before = _replay(trace, mark)
    persistent = [ev for i, ev in live.values() if i < mark]
    transient = [ev for i, ev in live.values() if i >= mark]
    row = {"case": f"{model_name} {phase} B{batch} {'ctx' if phase == 'decode' else 'S'}{seq} {mode}",
           "measured_peak_bytes": peak, "replayed_peak_bytes": replay_peak, "weights_bytes": weights,
           "alive_after_timing_bytes": after_timing, "alive_before_step_bytes": before,
           "persistent_at_peak": _group(persistent),
           "persistent_block_sizes": _sizes(persistent), "step_block_sizes": _sizes(transient), "step_at_peak": _group(transient),
           "predicted_peak_bytes": predicted_peak_bytes(spec, case), "median_ms": median_s * 1e3,
           "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
    if phase != "train":
        tokens = batch * (1 if phase == "decode" else seq)
        mem = infer_memory(spec, InferOptions(batch=batch, context=seq + (phase == "decode"), prefill_chunk=tokens))
        row["predicted_detail"] = {**mem.breakdown, **mem.detail}
    del model, fn
    _free()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="+", help="MODEL:PHASE:BATCH:SEQ:MODE (mode graph or eager)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--same-process", action="store_true",
                    help="run the cases one after another in this process, as a `mlsys bench model` sweep "
                         "does (default: each in a fresh process)")
    opts = ap.parse_args()
    if not opts.same_process and len(opts.cases) > 1:
        import subprocess
        import sys
        import tempfile

        rows = []
        for text in opts.cases:
            with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
                subprocess.run([sys.executable, __file__, text, "--out", tmp.name], check=False)
                rows += json.load(open(tmp.name)) if open(tmp.name).read().strip() else [{"case": text, "error": "no output"}]
        with open(opts.out, "w") as f:
            json.dump(rows, f, indent=1)
        return
    rows = []
    for text in opts.cases:
        name, phase, batch, seq, mode = text.split(":")
        try:
            rows.append(attribute(name, phase, int(batch), int(seq), mode))
        except Exception as exc:  # noqa: BLE001 - one failed case is a row, the rest go on
            rows.append({"case": text, "error": f"{type(exc).__name__}: {exc}"[:400]})
        print(json.dumps(rows[-1])[:3000], flush=True)
    with open(opts.out, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
