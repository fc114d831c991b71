"""Per-kernel times of one model step (torch.profiler) joined with the roofline's op table.

Kernels are sorted into the roofline's kinds by name: attention (flash / fmha / SDPA / the
project's attention and decode kernels), matmul (cuBLAS / CUTLASS GEMMs, the project's GEMV and
weight-only kernels) and memory (everything else: norms, rotary, activations, copies, AdamW).
The decoder's linears are additionally timed one by one: each runs inside a profiler range
named after its roofline row (q_proj, experts.gate_proj, lm_head, ...), so forward matmuls are
compared op by op.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

KIND_PATTERNS = (  # first match wins
    # cuBLAS's split-K reduction and cuDNN's flash-decoding combine: memory-bound, as the roofline prices them
    ("memory", re.compile(r"splitKreduce|lean_reduction", re.I)),
    ("attention", re.compile(r"flash|fmha|attention|sdpa|attn|mha", re.I)),
    ("matmul", re.compile(r"gemm|gemv|nvjet|cutlass|xmma|matmul|_mm_|weight_only|w4_packed|splitk|sm90_", re.I)),
)
RANGE = "op:"  # profiler range prefix of one linear


def kernel_kind(name: str) -> str:
    for kind, pattern in KIND_PATTERNS:
        if pattern.search(name):
            return kind
    return "memory"


def linear_op_name(module_path: str) -> str:
    """The roofline row a linear belongs to: 'layers.3.mlp.experts.7.up_proj' -> 'experts.up_proj'."""
    parts = module_path.split(".")
    last = parts[-1]
    if "experts" in parts:
        return f"experts.{last}"
    if "shared" in parts:
        return f"shared_experts.{last}"
    return last


@dataclass
class StepProfile:
    kernel_s: dict[str, float] = field(default_factory=dict)  # kind -> summed kernel seconds
    kernels: dict[str, int] = field(default_factory=dict)  # kind -> kernel launches
    linear_s: dict[str, float] = field(default_factory=dict)  # roofline row name -> seconds (forward)
    top: list[tuple[str, float, int]] = field(default_factory=list)  # (kernel, seconds, calls), largest first

    @property
    def total_kernel_s(self) -> float:
        return sum(self.kernel_s.values())


def _device_us(event) -> float:
    for attr in ("self_device_time_total", "device_time"):
        value = getattr(event, attr, None)
        if value:
            return float(value)
    return 0.0


def _range_us(event) -> float:
    for attr in ("device_time_total",):
        value = getattr(event, attr, None)
        if value:
            return float(value)
    return 0.0


def _range_copy(name: str) -> bool:
    """A profiler range's GPU-side copy ('Optimizer.step#AdamW.step'), not a kernel: kernel names
    may hold '#' too ('...silu_kernel(...)::{lambda()#1}...'), but never without a '('."""
    return "#" in name and "(" not in name


def profile_step(fn, model, top: int = 12) -> StepProfile:
    """Run fn() once under torch.profiler (CUDA activity) with a range around every linear."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    from ._torch_layers import GroupedExperts, QuantLinear

    handles, open_ranges, grouped = [], [], []
    for path, module in model.named_modules():
        if isinstance(module, GroupedExperts):  # labels its grouped GEMMs itself
            module.ranges = RANGE + "experts."
            grouped.append(module)
        if isinstance(module, (torch.nn.Linear, QuantLinear)):
            label = RANGE + linear_op_name(path)
            handles.append(module.register_forward_pre_hook(
                lambda m, a, label=label: open_ranges.append(record_function(label).__enter__())))
            handles.append(module.register_forward_hook(lambda m, a, o: open_ranges.pop().__exit__(None, None, None)))
    try:
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
    finally:
        for handle in handles:
            handle.remove()
        for module in grouped:
            module.ranges = None
    out = StepProfile()
    per_kernel: dict[str, tuple[float, int]] = {}   # kernel name -> (seconds, calls)
    for event in prof.events():
        if event.name.startswith(RANGE):
            if event.device_type != DeviceType.CUDA:
                name = event.name[len(RANGE):]
                out.linear_s[name] = out.linear_s.get(name, 0.0) + _range_us(event) * 1e-6
            continue
        if event.device_type != DeviceType.CUDA or getattr(event, "is_user_annotation", False) or _range_copy(event.name):
            continue  # CPU ops, and GPU-side copies of profiler ranges (Optimizer.step#AdamW.step)
        seconds, kind = _device_us(event) * 1e-6, kernel_kind(event.name)
        out.kernel_s[kind] = out.kernel_s.get(kind, 0.0) + seconds
        out.kernels[kind] = out.kernels.get(kind, 0) + 1
        total, calls = per_kernel.get(event.name, (0.0, 0))
        per_kernel[event.name] = (total + seconds, calls + 1)
    ranked = sorted(per_kernel.items(), key=lambda kv: -kv[1][0])[:top]
    out.top = [(name[:120], s, n) for name, (s, n) in ranked]
    return out


def join_roofline(prof: StepProfile, roofline) -> dict:
    """Measured beside predicted: per kind (all passes) and per forward linear (JSON-ready, seconds)."""
    kinds: dict[str, dict] = {}
    for row in roofline.rows:
        entry = kinds.setdefault(row.pred.kind, {"predicted_s": 0.0, "predicted_kernels": 0})
        entry["predicted_s"] += row.busy_s
        entry["predicted_kernels"] += row.count
    for kind in set(kinds) | set(prof.kernel_s):
        entry = kinds.setdefault(kind, {"predicted_s": 0.0, "predicted_kernels": 0})
        entry.update(measured_s=prof.kernel_s.get(kind, 0.0), measured_kernels=prof.kernels.get(kind, 0))
    linears: dict[str, dict] = {}
    for row in roofline.rows:
        if row.pred.kind == "matmul" and row.pass_name == "forward" and row.pred.name in prof.linear_s:
            entry = linears.setdefault(row.pred.name, {"predicted_s": 0.0, "count": 0, "shape": row.pred.shape,
                                                       "bound": row.pred.bound})
            entry["predicted_s"] += row.busy_s
            entry["count"] += row.count
    for row in roofline.rows:  # a split-K reduction runs inside its linear's profiler range
        name = row.pred.name.removesuffix(".splitk_reduce")
        if row.pass_name == "forward" and name != row.pred.name and name in linears:
            linears[name]["predicted_s"] += row.busy_s
    for name, entry in linears.items():
        entry["measured_s"] = prof.linear_s[name]
    for table in (kinds, linears):
        for entry in table.values():
            p, m = entry.get("predicted_s"), entry.get("measured_s")
            entry["error"] = (m - p) / p if p and m is not None else None
    return {"kinds": kinds, "linears": linears,
            "top_kernels": [{"name": n, "measured_s": s, "calls": c} for n, s, c in prof.top]}
