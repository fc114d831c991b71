"""Render roofline results: JSON data (base units), tables and notes. No arithmetic beyond display."""

from __future__ import annotations

from typing import Any

from ..calc.roofline.calibration import Ceilings
from ..calc.roofline.model import ModelRoofline
from ..calc.roofline.ops import OpPrediction
from ..calc.roofline.sweep import Sweep
from ..units import fmt_bytes, fmt_flops, fmt_seconds
from . import render

FORMULA = ("predicted = max(compute, memory, GEMM floor) + fixed per-kernel cost; compute = waves x padded tile FLOPs at "
           "the achievable peak; memory = read/read BW + write/write BW")


def _ceiling_note(ceil: Ceilings) -> str:
    eff = ceil.efficiency
    if ceil.calibrated:
        where = f"measured ceilings from {ceil.source}"
    else:
        where = f"{ceil.gpu.name} datasheet"
    memory_launch = ceil.overhead_s("memory")
    fixed = (f"{ceil.launch_s * 1e6:g} us per kernel" if memory_launch == ceil.launch_s else
             f"{ceil.launch_s * 1e6:g} us per GEMM / attention kernel, {memory_launch * 1e6:g} us per memory-bound one")
    cap = ceil.memory_cap_Bps
    capped = (f"; memory-bound kernels at most {cap / ceil.sm_count / 1e9:g} GB/s per SM ({cap / 1e12:.2f} TB/s, "
              "below the memory ceiling: MEMORY_STREAM_SM_BPS)") if cap and cap < ceil.bandwidth_Bps else ""
    return (f"Ceilings: {where}; efficiency matmul {eff.matmul:g}, attention {eff.attention:g}, memory "
            f"{eff.memory:g}; {ceil.sm_count} SMs; fixed cost {fixed}; {ceil.gap_s * 1e6:g} us idle on the stream "
            f"before each kernel{capped}.")


def op_output(pred: OpPrediction, ceil: Ceilings) -> render.Output:
    data = {"gpu": ceil.gpu.name, **pred.as_dict(),
            "ceilings": ceil.as_dict("fp32" if pred.kind == "memory" else pred.dtype)}
    t = pred.tiling
    rows: list[list[Any]] = [
        ["FLOPs", pred.flops, fmt_flops(pred.flops)],
        ["bytes (minimum)", pred.bytes, fmt_bytes(pred.bytes)],
        ["intensity (FLOP/byte)", pred.intensity_flops_per_byte, ""],
        ["ridge point (FLOP/byte)", pred.ridge_flops_per_byte, ""],
        ["compute time", pred.compute_s, fmt_seconds(pred.compute_s)],
        ["memory time", pred.memory_s, fmt_seconds(pred.memory_s)],
        ["fixed cost", pred.overhead_s, fmt_seconds(pred.overhead_s)],
        ["predicted time", pred.predicted_s, fmt_seconds(pred.predicted_s)],
        ["bound", pred.bound, ""],
        ["naive roofline time (datasheet)", pred.roofline_s, fmt_seconds(pred.roofline_s)],
        ["achievable fraction of the roof", pred.achievable_fraction, f"{100 * pred.achievable_fraction:.1f}%"],
        ["attained FLOP/s", pred.attained_flops_per_s, f"{pred.attained_flops_per_s / 1e12:.4g} TFLOP/s"],
    ]
    if t is not None:
        rows.append(["tiling", f"{t.block_m}x{t.block_n} split {t.split}", f"{t.units} CTAs, {t.waves} waves, "
                     f"{100 * t.wave_fill:.0f}% busy"])
    notes = (FORMULA, _ceiling_note(ceil), *ceil.notes)
    return render.Output(data, (render.table(f"{pred.name} {pred.shape} ({pred.dtype}) on {ceil.gpu.name}",
                                             ["quantity", "value", "readable"], rows),), notes)


def _latency_name(phase: str) -> str:
    return {"prefill": "time to first token", "decode": "time per output token", "train": "training step"}[phase]


def model_data(r: ModelRoofline) -> dict:
    o = r.options
    totals = r.totals()
    return {
        "model": r.model, "gpu": r.gpu, "phase": o.phase, "batch": o.batch, "seq": o.new_tokens,
        "context": o.context, "kv_len": o.kv_len, "tp": o.tp, "dtype": o.dtype, "kv_dtype": o.kv_dtype_name,
        "sliding_window": o.window, "recompute": o.recompute, "dp": o.dp, "zero": o.zero, "dp_overlap": o.dp_overlap,
        "predicted_s": r.time_s, "bound": r.bound, "tokens_per_s": r.tokens_per_s, "mfu": r.mfu, "mbu": r.mbu,
        "totals": totals, "ops": [row.as_dict() for row in r.rows], "comm": [c.as_dict() for c in r.comm],
        "ceilings": r.ceilings.as_dict(o.compute_dtype),
    }


def model_output(r: ModelRoofline) -> render.Output:
    o, total = r.options, r.time_s
    train = o.phase == "train"
    ops = [[row.pred.name + (f" ({row.pass_name[:3]})" if train else ""), row.count, row.pred.shape, row.pred.flops,
            row.pred.bytes, row.pred.intensity_flops_per_byte, row.pred.bound, row.pred.predicted_s * 1e6,
            row.total_s * 1e3, f"{100 * row.total_s / total:.1f}%"] for row in r.rows]
    comm = [[c.name, c.pass_name, c.count, fmt_bytes(c.size_bytes), c.time_s * 1e6, c.total_s * 1e3,
             c.exposed_s * 1e3, f"{100 * c.exposed_s / total:.1f}%", c.method] for c in r.comm]
    summary: list[list[Any]] = [
        [_latency_name(o.phase), total, fmt_seconds(total)],
        ["tokens/s", r.tokens_per_s, f"{r.tokens_per_s:,.0f}"],
        ["MFU (of datasheet peak)", r.mfu, f"{100 * r.mfu:.1f}%"],
        ["MBU (of datasheet bandwidth)", r.mbu, f"{100 * r.mbu:.1f}%"],
        ["bound (sum compute vs sum memory)", r.bound, ""],
        ["kernels: compute / memory / fixed", r.compute_s, f"{fmt_seconds(r.compute_s)} / "
         f"{fmt_seconds(r.memory_s)} / {fmt_seconds(r.overhead_s)}"],
        ["idle between kernels", r.gap_s, f"{fmt_seconds(r.gap_s)} ({r.kernels:,} kernels)"],
        ["communication (exposed / total)", r.comm_s - r.comm_hidden_s,
         f"{fmt_seconds(r.comm_s - r.comm_hidden_s)} / {fmt_seconds(r.comm_s)}"],
        ["weights per GPU", r.weight_bytes, fmt_bytes(r.weight_bytes)],
        ["KV cache per GPU", r.kv_cache_bytes, fmt_bytes(r.kv_cache_bytes)],
    ]
    if train:
        summary[1:1] = [[f"{name} kernels", r.pass_s(name), fmt_seconds(r.pass_s(name))]
                        for name in ("forward", "backward", "recompute", "optimizer")]
    title = (f"{r.model} {o.phase} on {r.gpu}" + (f" x{o.tp} (TP)" if o.tp > 1 else "") +
             f": batch {o.batch}, " + (f"context {o.context}" if o.phase == "decode" else f"seq {o.seq}") +
             f", {o.dtype}")
    tables = [render.table(title, ["quantity", "value", "readable"], summary),
              render.table("kernels (count = runs per step: layers x per layer)", ["op", "count", "shape", "FLOPs",
                           "bytes", "FLOP/B", "bound", "each us", "total ms", "share"], ops)]
    if comm:
        tables.append(render.table("collectives (tensor parallel; data parallel with --dp)", ["collective", "pass",
                                   "count", "size", "each (us)", "total (ms)", "exposed (ms)", "share", "method"], comm))
    notes = (FORMULA + "; total = count x (predicted + the stream's idle gap before each kernel)", _ceiling_note(r.ceilings),
             "Kernels and collectives run back to back (overlap only with --dp-overlap); MFU uses calc.counts.flops model FLOPs "
             "(train: 3x forward), MBU every kernel's minimum bytes.", *r.notes, *r.ceilings.notes)
    return render.Output(model_data(r), tuple(tables), notes)


def sweep_output(s: Sweep) -> render.Output:
    first = s.points[0]
    o = first.options
    rows = [[p.options.batch, p.time_s * 1e3, p.tokens_per_s, p.bound, p.mfu, p.mbu, p.fits] for p in s.points]
    points = [{"batch": p.options.batch, "predicted_s": p.time_s, "tokens_per_s": p.tokens_per_s, "bound": p.bound,
               "compute_s": p.compute_s, "memory_s": p.memory_s, "comm_s": p.comm_s, "mfu": p.mfu, "mbu": p.mbu,
               "fits": p.fits if o.phase != "train" else None} for p in s.points]
    data = {"model": first.model, "gpu": first.gpu, "phase": o.phase, "seq": o.new_tokens, "context": o.context,
            "tp": o.tp, "dtype": o.dtype, "sweep": points, "compute_bound_batch": s.compute_bound_batch,
            "ceilings": first.ceilings.as_dict(o.compute_dtype)}
    cross = (f"The step turns compute-bound at batch {s.compute_bound_batch}." if s.compute_bound_batch else
             "The step stays memory-bound for every batch up to 65536 (KV-cache reads grow with the batch).")
    notes = (cross, "fits: weights + KV cache within one GPU's memory.", _ceiling_note(first.ceilings))
    title = f"{first.model} {o.phase} on {first.gpu}" + (f" x{o.tp} (TP)" if o.tp > 1 else "") + ": batch sweep"
    return render.Output(data, (render.table(title, ["batch", _latency_name(o.phase) + " (ms)", "tokens/s", "bound",
                                                     "MFU", "MBU", "fits"], rows),), notes, records="sweep")
