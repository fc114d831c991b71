"""Benchmark cases for `mlsys bench quant`: the kernels of kernels/quant.py against torch baselines.

`bench_cases(kinds, ...)` turns kinds into harness cases: quantize (GB/s and measured
quantisation error); w8a16 and w4a16 (g=128): `weight_only_matmul`, which picks its path by M
(recorded in extra_path), against bf16 torch.matmul on the same weights; w8a8: the int8 GEMM
against torch._int_mm, or bf16 torch.matmul where _int_mm cannot run (M <= 16).
"""

from __future__ import annotations

import torch

from ...kernels.matmul_launch import add_host_times
from ...kernels.quant import (
    dequantize_ref,
    pack_halves,
    quantize,
    quantize_ref,
    w8a8_matmul,
    w8a8_matmul_ref,
    weight_only_matmul,
    weight_only_matmul_ref,
    weight_only_path,
)
from .. import harness, shapes as shape_sets
from ..sweep import Bench, Case

KINDS = ("quantize", "w8a16", "w4a16", "w8a8")
INT_MM_MIN_M = 17   # torch._int_mm needs more than 16 rows of x

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


def _weight_only_case(M, N, K, bits, dev_dtype):
    group = 128 if bits == 4 else None
    mode = "int4" if bits == 4 else "int8"

    def build():
        dev = harness.device()
        q, s = quantize(torch.randn(N, K, device=dev, dtype=dev_dtype), mode, group, dev_dtype)
        w = dequantize_ref(q, s, mode, group).to(dev_dtype)   # the same weights in 16 bits for the baseline
        x = torch.randn(M, K, device=dev, dtype=dev_dtype)
        qk = pack_halves(q, group) if bits == 4 else q   # repacked once, untimed
        bench = Bench(run=lambda: weight_only_matmul(x, qk, s, bits, group),
                      reference=lambda: weight_only_matmul_ref(x, q, s, bits, group),
                      baseline=lambda: torch.matmul(x, w.T),
                      extra={"path": weight_only_path(M, bits, x.dtype)})
        add_host_times(bench, x.is_cuda)
        if x.is_cuda and bench.extra["path"] == "gemv":   # which kernel and tile the shape got
            from ...kernels import quant_gemv as G

            bench.run()
            bench.extra["config"] = G.chosen(M, N, K, bits, group, x.dtype)
        return bench

    w_bytes = N * K * bits // 8 + N * (K // (group or K)) * 2
    io_bytes = 2 * (M * K + M * N)
    return Case(f"triton_w{bits}a16", "torch.matmul bf16", f"{M}x{N}x{K}", f"w{bits}a16" + ("_g128" if group else ""),
                build, flops=2.0 * M * N * K, bytes=float(w_bytes + io_bytes), gate="bfloat16")


def _w8a8_case(M, N, K, dev_dtype):
    int_mm = M >= INT_MM_MIN_M

    def build():
        dev = harness.device()
        x, w = torch.randn(M, K, device=dev, dtype=dev_dtype), torch.randn(N, K, device=dev, dtype=dev_dtype)
        xq, xs = quantize(x, "int8")
        wq, ws = quantize(w, "int8")
        out = dev_dtype if dev_dtype != torch.float16 else torch.float32
        if not int_mm:   # the unquantized product in bf16 (what W8A8 replaces; its baseline_rel_err is the quantisation's)
            baseline = lambda: torch.matmul(x, w.T)   # noqa: E731
        elif xq.is_cuda:
            baseline = lambda: torch._int_mm(xq, wq.T)   # noqa: E731
        else:
            baseline = lambda: torch._int_mm(xq, wq.T).float() * xs * ws.reshape(1, -1)   # noqa: E731
        return Bench(run=lambda: w8a8_matmul(xq, xs, wq, ws, out_dtype=out),
                     reference=lambda: w8a8_matmul_ref(xq, xs, wq, ws), baseline=baseline,
                     view=lambda y: y.float() * (xs * ws.reshape(1, -1)) if y.dtype == torch.int32 else y)

    return Case("triton_w8a8", "torch._int_mm" if int_mm else "torch.matmul bf16", f"{M}x{N}x{K}", "int8_rowcol", build,
                flops=2.0 * M * N * K, bytes=float(M * K + N * K + 2 * M * N), gate="int8")


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
        elif kind in ("w8a16", "w4a16"):
            chosen = shape_sets.pick(shapes, sweep, "decode") if shapes or not small else [(1, 40, 256), (5, 40, 256),
                                                                                             (20, 40, 256)]
            cases += [_weight_only_case(m, n, k, 8 if kind == "w8a16" else 4, dev_dtype) for m, n, k in chosen]
        else:
            chosen = shape_sets.pick(shapes, sweep, "int8_squares") if not small else [(33, 48, 64), (1, 48, 64)]
            cases += [_w8a8_case(m, n, k, dev_dtype) for m, n, k in chosen]
    return cases
