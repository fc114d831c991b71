"""Benchmark cases for `mlsys bench quant`: the kernels of kernels/quant.py against torch baselines.

`bench_cases(kinds, ...)` turns kinds into harness cases: quantize (GB/s and measured
quantisation error), w8a16, w4a16 (the default "interleave" int4 kernel), w4a16_evenodd and
w4a16_halves (the same weights through the variants of kernels/quant_w4.py; rows are named
`triton_w4a16_evenodd` / `triton_w4a16_halves`, so one sweep times all three side by side against
the same baseline), and w8a8.
"""

from __future__ import annotations

import torch

from ...kernels.matmul_launch import add_host_times
from ...kernels.quant import (
    dequantize_ref,
    quantize,
    quantize_ref,
    w8a8_matmul,
    w8a8_matmul_ref,
    weight_only_matmul,
    weight_only_matmul_ref,
)
from ...kernels.quant_w4 import pack_halves
from .. import harness, shapes as shape_sets
from ..sweep import Bench, Case

KINDS = ("quantize", "w8a16", "w8a16_gemv", "w4a16", "w4a16_evenodd", "w4a16_halves", "w4a16_gemv", "w8a8")
W4_KINDS = {"w4a16": "interleave", "w4a16_evenodd": "evenodd", "w4a16_halves": "halves", "w4a16_gemv": "gemv"}  # -> variant

QUANT_SIZES = ((4096, 4096), (8192, 8192), (22016, 4096), (8192, 28672))   # (N, K) llama weights
QUANT_MODES = (("int8", None, "float32"), ("int4", 128, "bfloat16"), ("fp8", None, "float32"))


def _quantize_case(N, K, mode, group, scale_dtype, dev_dtype):
    sdt = getattr(torch, scale_dtype)
    q_bytes = N * K // 2 if mode == "int4" else N * K
    s_bytes = N * (K // (group or K)) * sdt.itemsize

    def build():
        x = torch.randn(N, K, device=harness.device(), dtype=dev_dtype)
        q, s = quantize(x, mode, group, sdt)
        deq = dequantize_ref(q, s, mode, group)
        err = (torch.linalg.vector_norm(deq - x.float()) / torch.linalg.vector_norm(x.float())).item()
        return Bench(run=lambda: quantize(x, mode, group, sdt), view=lambda qs: dequantize_ref(*qs, mode, group),
                     reference=lambda: dequantize_ref(*quantize_ref(x, mode, group, sdt), mode, group),
                     baseline=lambda: quantize_ref(x, mode, group, sdt), extra={"quant_rel_err": err})

    return Case("triton_quantize", "torch eager", f"{N}x{K}", mode + (f"_g{group}" if group else "_row"), build,
                bytes=float(N * K * torch.empty((), dtype=dev_dtype).element_size() + q_bytes + s_bytes),
                gate="int8", tol=1e-2)


def _weight_only_case(M, N, K, bits, dev_dtype, variant="interleave"):
    group = 128 if bits == 4 else None
    mode = "int4" if bits == 4 else "int8"

    def build():
        dev = harness.device()
        q, s = quantize(torch.randn(N, K, device=dev, dtype=dev_dtype), mode, group, dev_dtype)
        w = dequantize_ref(q, s, mode, group).to(dev_dtype)   # the same weights in 16 bits for the baseline
        x = torch.randn(M, K, device=dev, dtype=dev_dtype)
        qk = pack_halves(q, group) if bits == 4 and variant in ("halves", "gemv") else q   # repacked once, untimed
        bench = Bench(run=lambda: weight_only_matmul(x, qk, s, bits, group, variant=variant),
                      reference=lambda: weight_only_matmul_ref(x, q, s, bits, group),
                      baseline=lambda: torch.matmul(x, w.T))
        add_host_times(bench, x.is_cuda)
        if x.is_cuda and variant == "gemv":   # which kernel and tile the shape got
            from ...kernels import quant_gemv as G

            bench.extra["config"] = G.chosen(M, N, K, bits, group, x.dtype)
        return bench

    w_bytes = N * K * bits // 8 + N * (K // (group or K)) * 2
    io_bytes = 2 * (M * K + M * N)
    name = f"triton_w{bits}a16" + ("" if variant == "interleave" else f"_{variant}")
    return Case(name, "torch.matmul bf16", f"{M}x{N}x{K}", f"w{bits}a16" + ("_g128" if group else ""),
                build, flops=2.0 * M * N * K, bytes=float(w_bytes + io_bytes), gate="bfloat16")


def _w8a8_case(M, N, K, dev_dtype):
    def build():
        dev = harness.device()
        xq, xs = quantize(torch.randn(M, K, device=dev, dtype=dev_dtype), "int8")
        wq, ws = quantize(torch.randn(N, K, device=dev, dtype=dev_dtype), "int8")
        out = dev_dtype if dev_dtype != torch.float16 else torch.float32
        return Bench(run=lambda: w8a8_matmul(xq, xs, wq, ws, out_dtype=out),
                     reference=lambda: w8a8_matmul_ref(xq, xs, wq, ws),
                     baseline=(lambda: torch._int_mm(xq, wq.T).float() * xs * ws.reshape(1, -1)) if not xq.is_cuda
                     else (lambda: torch._int_mm(xq, wq.T)),
                     view=lambda y: y.float() * (xs * ws.reshape(1, -1)) if y.dtype == torch.int32 else y)

    return Case("triton_w8a8", "torch._int_mm", f"{M}x{N}x{K}", "int8_rowcol", build, flops=2.0 * M * N * K,
                bytes=float(M * K + N * K + 2 * M * N), gate="int8")


def bench_cases(kinds, shapes: str | None = None, sweep: str | None = None, small: bool = False):
    """Harness cases for `mlsys bench quant` (kinds: KINDS)."""
    assert set(kinds) <= set(KINDS), f"unknown kinds {sorted(set(kinds) - set(KINDS))} (choose from {KINDS})"
    dev_dtype = torch.float16 if small else torch.bfloat16
    cases = []
    for kind in kinds:
        if kind == "quantize":
            sizes = [(n, k) for _, n, k in shape_sets.parse_shapes(shapes)] if shapes else \
                ([(48, 256)] if small else list(QUANT_SIZES))
            cases += [_quantize_case(n, k, mode, group, sdt if not small else "float32", dev_dtype)
                      for n, k in sizes for mode, group, sdt in QUANT_MODES if not (small and mode == "fp8")]
        elif kind in ("w8a16", "w8a16_gemv") or kind in W4_KINDS:
            chosen = shape_sets.pick(shapes, sweep, "decode") if shapes or not small else [(1, 40, 256), (5, 40, 256)]
            bits, variant = (8, "gemv" if kind == "w8a16_gemv" else "interleave") if kind.startswith("w8") \
                else (4, W4_KINDS[kind])
            cases += [_weight_only_case(m, n, k, bits, dev_dtype, variant) for m, n, k in chosen]
        else:
            chosen = shape_sets.pick(shapes, sweep, "int8_squares") if not small else [(33, 48, 64)]
            cases += [_w8a8_case(m, n, k, dev_dtype) for m, n, k in chosen]
    return cases
