"""Benchmark cases for kernels/matmul.py: x (M,K) @ W.T with W (N,K) against cuBLAS / torch._scaled_mm.

One case per (shape, dtype, split_k choice, launch cache on/off); the choice is part of the
kernel name, so a sweep can time the persistent kernel and the split-K kernel side by side:

    triton_matmul                   split_k=None, path "auto", launch cache on: matmul()'s defaults
    triton_matmul_splitk_auto       split_k="auto" (extra_split_k: what it resolved to, 0 = persistent)
    triton_matmul_splitk<S>         split_k=S forced
    ..._<path>                      path forced: tma (host-built descriptors), dtma (device-built), ptr
    ..._nocache                     launch_cache=False (autotuner + binder on every call)

On a GPU each row also records `extra_host_us` / `extra_baseline_host_us`: host microseconds per
call of the kernel and of the baseline, from back-to-back calls without synchronisation
(matmul_launch.host_us). Where these exceed the kernel time, the launch path, not the GPU, sets
the pace of a loop of calls.
"""

from __future__ import annotations

import torch

from ...kernels.matmul import _num_sms, matmul, matmul_ref, quantize_fp8, resolve_split_k
from ...kernels.matmul_launch import add_host_times
from .. import harness
from ..sweep import Bench, Case


def kernel_name(split_k: int | str | None = None, launch_cache: bool = True, path: str = "auto") -> str:
    name = "triton_matmul" if split_k is None else f"triton_matmul_splitk{'_auto' if split_k == 'auto' else split_k}"
    name += "" if path == "auto" else f"_{path}"
    return name if launch_cache else name + "_nocache"


def parse_split_k(text: str) -> int | str | None:
    """CLI spelling -> matmul()'s split_k: 'none' -> None, 'auto', or a positive integer."""
    if text in ("none", "auto"):
        return None if text == "none" else "auto"
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"split-K {text!r} is not none, auto or a positive integer")
    return int(text)


def bench_case(M: int, N: int, K: int, dtype: str = "bfloat16", activation: str = "none",
               split_k: int | str | None = None, launch_cache: bool = True, path: str = "auto"):
    """A harness case: x (M,K) @ W.T with W (N,K), nn.Linear's layout, against the torch path.

    dtype: "bfloat16" | "float16" | "float32" (vs torch.matmul, i.e. cuBLAS) or
    "fp8_tensor" | "fp8_row" (e4m3 inputs, bf16 output, vs torch._scaled_mm with the same scales).
    """
    fp8 = dtype.startswith("fp8")
    in_bytes = 1 if fp8 else torch.empty((), dtype=getattr(torch, dtype)).element_size()
    out_bytes = 2 if fp8 else in_bytes
    opts = dict(split_k=split_k, launch_cache=launch_cache, path=path)

    def build() -> Bench:
        dev = harness.device()
        if not fp8:
            tdtype = getattr(torch, dtype)
            x = torch.randn(M, K, device=dev, dtype=tdtype)
            w = torch.randn(N, K, device=dev, dtype=tdtype) / K**0.5
            bench = Bench(run=lambda: matmul(x, w.T, activation=activation, **opts),
                          reference=lambda: matmul_ref(x, w.T, activation=activation),
                          baseline=(lambda: torch.matmul(x, w.T)) if activation == "none" else None)
        else:
            rowwise = dtype == "fp8_row"
            x8, sx = quantize_fp8(torch.randn(M, K, device=dev), rowwise)
            w8, sw = quantize_fp8(torch.randn(N, K, device=dev), rowwise)
            bench = Bench(run=lambda: matmul(x8, w8.T, a_scale=sx, b_scale=sw, **opts),
                          reference=lambda: matmul_ref(x8, w8.T, a_scale=sx, b_scale=sw),
                          baseline=lambda: torch._scaled_mm(x8, w8.T, scale_a=sx.reshape(-1, 1) if rowwise else sx,
                                                            scale_b=sw.reshape(1, -1) if rowwise else sw,
                                                            out_dtype=torch.bfloat16))
        bench.extra["split_k"] = resolve_split_k(split_k, M, N, K, _num_sms(torch.device(dev))) or 0
        add_host_times(bench, dev == "cuda")
        return bench

    return Case(kernel=kernel_name(split_k, launch_cache, path), baseline="torch._scaled_mm" if fp8 else "torch.matmul",
                shape=f"{M}x{N}x{K}", dtype=dtype, build=build, flops=2.0 * M * N * K,
                bytes=float(in_bytes * (M * K + N * K) + out_bytes * M * N),
                variant="" if activation == "none" else activation, gate="fp8" if fp8 else dtype)
