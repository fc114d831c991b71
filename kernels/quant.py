"""Quantisation kernels and quantised matmuls in Triton.

- `quantize(x, mode, group)`: symmetric absmax quantisation of each row of x (N, K), per row
  (group = K) or per group of `group` columns. Modes: "int8" (|q| <= 127), "int4" (|q| <= 7, two
  per byte, `(q + 8)` in the low nibble for even k and the high nibble for odd k), "fp8" (e4m3,
  |q| <= 448). Scales are stored in the dtype asked for and q is computed with the *stored*
  scale, so dequantisation is exactly `q * scale`. Rounding is half away from zero.
- `dequantize(q, scale, mode, group)`: the inverse, to bf16/fp16/fp32.
- `weight_only_matmul(x, q, scale, bits, group)`: y (M,N) = x (M,K) @ dequant(W).T for decode
  (M = 1..64). Each program streams a BLOCK_N x K slab of the int8 or packed-int4 weight once,
  unpacks it in registers, and feeds tensor-core dots; int4 applies its per-group scale to each
  group's partial sum. `split_k > 1` splits K over programs (fp32 partials summed by torch) for
  weights too narrow to fill the GPU.
- W8A8: `w8a8_matmul` = the persistent TMA matmul of kernels/matmul.py on int8 inputs, int32
  accumulation, per-row x per-column scales in the epilogue.
- `*_ref`: plain torch; `bench_cases`: harness cases against torch baselines.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from . import matmul as _mm

QMAX = {"int8": 127.0, "int4": 7.0, "fp8": 448.0}
_MODE = {"int8": 0, "int4": 1, "fp8": 2}


@triton.jit
def _round_half_away(v):
    return tl.where(v >= 0, tl.floor(v + 0.5), -tl.floor(-v + 0.5))


@triton.jit
def _quantize_kernel(
    x_ptr, q_ptr, s_ptr,                  # x (N,K); q (N,K) or packed (N,K/2); scales (N, K/GROUP)
    N, K, stride_xn, stride_qn, stride_sn,
    GROUP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    MODE: tl.constexpr, QMAX: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_g = tl.program_id(1)
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    k0 = pid_g * GROUP
    if MODE == 1:  # int4: even and odd columns separately, so the pair packs into one byte
        half = tl.arange(0, BLOCK_K // 2)
        ok = row_ok[:, None] & (half[None, :] < GROUP // 2) & (k0 + 2 * half[None, :] < K)
        base = x_ptr + rows[:, None] * stride_xn + k0 + 2 * half[None, :]
        xe = tl.load(base, mask=ok, other=0.0).to(tl.float32)
        xo = tl.load(base + 1, mask=ok, other=0.0).to(tl.float32)
        amax = tl.maximum(tl.max(tl.abs(xe), axis=1), tl.max(tl.abs(xo), axis=1))
    else:
        cols = tl.arange(0, BLOCK_K)
        ok = row_ok[:, None] & (cols[None, :] < GROUP) & (k0 + cols[None, :] < K)
        x = tl.load(x_ptr + rows[:, None] * stride_xn + k0 + cols[None, :], mask=ok, other=0.0).to(tl.float32)
        amax = tl.max(tl.abs(x), axis=1)
    scale = tl.maximum(amax, 1e-12) / QMAX
    scale = scale.to(s_ptr.dtype.element_ty)           # round the scale first: dequant = q * stored scale
    tl.store(s_ptr + rows * stride_sn + pid_g, scale, mask=row_ok)
    stored = scale.to(tl.float32)[:, None]
    inv = tl.where(stored > 0, 1.0 / tl.where(stored > 0, stored, 1.0), 0.0)  # a scale that underflowed -> q = 0
    if MODE == 0:
        q = tl.minimum(tl.maximum(_round_half_away(x * inv), -QMAX), QMAX)
        tl.store(q_ptr + rows[:, None] * stride_qn + k0 + cols[None, :], q.to(tl.int8), mask=ok)
    if MODE == 1:
        qe = tl.minimum(tl.maximum(_round_half_away(xe * inv), -QMAX), QMAX) + 8.0
        qo = tl.minimum(tl.maximum(_round_half_away(xo * inv), -QMAX), QMAX) + 8.0
        packed = qe.to(tl.uint8) | (qo.to(tl.uint8) << 4)
        tl.store(q_ptr + rows[:, None] * stride_qn + k0 // 2 + half[None, :], packed, mask=ok)
    if MODE == 2:
        q = tl.minimum(tl.maximum(x * inv, -QMAX), QMAX)
        tl.store(q_ptr + rows[:, None] * stride_qn + k0 + cols[None, :], q.to(q_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _dequantize_kernel(
    q_ptr, s_ptr, y_ptr, N, K, stride_qn, stride_sn, stride_yn,
    GROUP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, MODE: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    ok = (rows[:, None] < N) & (cols[None, :] < K)
    if MODE == 1:
        byte = tl.load(q_ptr + rows[:, None] * stride_qn + cols[None, :] // 2, mask=ok, other=0)
        nib = tl.where((cols % 2 == 0)[None, :], byte & 15, byte >> 4)
        q = nib.to(tl.float32) - 8.0
    else:
        q = tl.load(q_ptr + rows[:, None] * stride_qn + cols[None, :], mask=ok).to(tl.float32)
    s = tl.load(s_ptr + rows[:, None] * stride_sn + cols[None, :] // GROUP, mask=ok, other=0.0).to(tl.float32)
    tl.store(y_ptr + rows[:, None] * stride_yn + cols[None, :], (q * s).to(y_ptr.dtype.element_ty), mask=ok)


def _check_rows(x: torch.Tensor, mode: str, group: int | None) -> int:
    assert mode in QMAX, f"mode must be one of {sorted(QMAX)}"
    assert x.dim() == 2 and x.stride(1) == 1, "quantize takes a 2-D tensor with contiguous rows"
    group = group or x.shape[1]
    assert x.shape[1] % group == 0, f"K={x.shape[1]} is not a multiple of group {group}"
    assert mode != "int4" or group % 2 == 0, "int4 packs pairs: group must be even"
    return group


def quantize(x: torch.Tensor, mode: str = "int8", group: int | None = None,
             scale_dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scale) with scale (N, K // group); group=None means one scale per row."""
    group = _check_rows(x, mode, group)
    N, K = x.shape
    qdtype = {"int8": torch.int8, "int4": torch.uint8, "fp8": _mm.FP8}[mode]
    q = torch.empty((N, K // 2 if mode == "int4" else K), device=x.device, dtype=qdtype)
    scale = torch.empty((N, K // group), device=x.device, dtype=scale_dtype)
    block_k = triton.next_power_of_2(group)
    assert block_k <= 32768, "groups over 32768 columns are not supported"
    block_n = max(1, min(64, 4096 // block_k))
    grid = (triton.cdiv(N, block_n), K // group)
    _quantize_kernel[grid](x, q, scale, N, K, x.stride(0), q.stride(0), scale.stride(0), GROUP=group,
                           BLOCK_N=block_n, BLOCK_K=block_k, MODE=_MODE[mode], QMAX=QMAX[mode],
                           num_warps=8 if block_k * block_n >= 4096 else 4)
    return q, scale


def dequantize(q: torch.Tensor, scale: torch.Tensor, mode: str, group: int | None = None,
               out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    N = q.shape[0]
    K = q.shape[1] * (2 if mode == "int4" else 1)
    group = group or K
    assert scale.shape == (N, K // group), f"scale must be ({N}, {K // group})"
    y = torch.empty((N, K), device=q.device, dtype=out_dtype)
    grid = (triton.cdiv(N, 16), triton.cdiv(K, 256))
    _dequantize_kernel[grid](q, scale, y, N, K, q.stride(0), scale.stride(0), y.stride(0), GROUP=group,
                             BLOCK_N=16, BLOCK_K=256, MODE=_MODE[mode])
    return y


def _round_half_away_ref(v: torch.Tensor) -> torch.Tensor:
    return torch.sign(v) * torch.floor(v.abs() + 0.5)


def quantize_ref(x, mode="int8", group=None, scale_dtype=torch.float32):
    """Torch twin of `quantize` (same rounding, same packing)."""
    N, K = x.shape
    group = group or K
    xg = x.float().reshape(N, K // group, group)
    scale = (xg.abs().amax(dim=2).clamp(min=1e-12) / QMAX[mode]).to(scale_dtype)
    v = (xg / scale.float()[..., None]).clamp(-QMAX[mode], QMAX[mode]).reshape(N, K)
    if mode == "fp8":
        return v.to(_mm.FP8), scale
    q = _round_half_away_ref(v)
    if mode == "int8":
        return q.to(torch.int8), scale
    q = (q + 8).to(torch.uint8)
    return q[:, 0::2] | (q[:, 1::2] << 4), scale


def dequantize_ref(q, scale, mode, group=None):
    if mode == "int4":
        q = torch.stack(((q & 15).float() - 8, (q >> 4).float() - 8), dim=2).reshape(q.shape[0], -1)
    N, K = q.shape
    group = group or K
    return (q.float().reshape(N, K // group, group) * scale.float()[..., None]).reshape(N, K)


@triton.jit
def _weight_only_kernel(
    x_ptr, w_ptr, s_ptr, y_ptr,          # x (M,K) fp16/bf16; w (N,K) int8 or (N,K/2) packed int4; s (N, K/GROUP)
    M, N, K, k_per_split,
    stride_xm, stride_wn, stride_sn, stride_ys, stride_ym,
    BITS: tl.constexpr, GROUP: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    dt = x_ptr.dtype.element_ty
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = offs_m < M
    n_ok = offs_n < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_start = pid_k * k_per_split
    k_end = tl.minimum(k_start + k_per_split, K)
    if BITS == 8:  # per-channel: plain dot over the int8 slab, scale once at the end
        offs_k = tl.arange(0, BLOCK_K)
        for k0 in range(k_start, k_end, BLOCK_K):
            k = k0 + offs_k
            w = tl.load(w_ptr + offs_n[:, None] * stride_wn + k[None, :],
                        mask=n_ok[:, None] & (k[None, :] < k_end), other=0)
            x = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :],
                        mask=m_ok[:, None] & (k[None, :] < k_end), other=0.0)
            acc = tl.dot(x, w.to(dt).T, acc)
        acc = acc * tl.load(s_ptr + offs_n * stride_sn, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    else:  # int4, GROUP columns per scale: even/odd halves of x meet low/high nibbles
        half = tl.arange(0, GROUP // 2)
        for k0 in range(k_start, k_end, BLOCK_K):
            for g in tl.static_range(BLOCK_K // GROUP):
                kg = k0 + g * GROUP
                g_ok = kg < k_end
                byte = tl.load(w_ptr + offs_n[:, None] * stride_wn + kg // 2 + half[None, :],
                               mask=n_ok[:, None] & g_ok, other=0)
                xe = tl.load(x_ptr + offs_m[:, None] * stride_xm + kg + 2 * half[None, :],
                             mask=m_ok[:, None] & g_ok, other=0.0)
                xo = tl.load(x_ptr + offs_m[:, None] * stride_xm + kg + 1 + 2 * half[None, :],
                             mask=m_ok[:, None] & g_ok, other=0.0)
                lo = ((byte & 15).to(tl.int8) - 8).to(dt)
                hi = ((byte >> 4).to(tl.int8) - 8).to(dt)
                part = tl.dot(xe, lo.T) + tl.dot(xo, hi.T)
                s = tl.load(s_ptr + offs_n * stride_sn + kg // GROUP, mask=n_ok & g_ok, other=0.0)
                acc += part * s.to(tl.float32)[None, :]
    out = y_ptr + pid_k * stride_ys + offs_m[:, None] * stride_ym + offs_n[None, :]
    tl.store(out, acc.to(y_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


def _wo_configs():
    return [triton.Config({"BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w, num_stages=s)
            for bn, bk, w, s in ((16, 256, 4, 4), (32, 256, 4, 4), (32, 512, 4, 3), (64, 256, 4, 4),
                                 (16, 512, 4, 4), (64, 512, 8, 3), (128, 256, 8, 3))]


_WO_TUNED = triton.autotune(_wo_configs(), key=["M", "N", "K", "BITS", "k_per_split"])(_weight_only_kernel)


def weight_only_matmul(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, bits: int,
                       group: int | None = None, split_k: int = 1) -> torch.Tensor:
    """y (M,N) = x (M,K) @ dequant(q, scale).T; bits 8 (per-channel, scale (N,1)) or 4 (scale (N, K/group))."""
    assert bits in (8, 4), "bits must be 8 or 4"
    assert x.dim() == 2 and x.stride(1) == 1 and q.stride(1) == 1, "x and q need contiguous rows"
    assert x.dtype in (torch.float16, torch.bfloat16, torch.float32), f"activations in {x.dtype}?"
    M, K = x.shape
    N = q.shape[0]
    group = group or K
    assert q.shape[1] * (2 if bits == 4 else 1) == K, f"weight {tuple(q.shape)} does not match K={K}"
    assert scale.shape == (N, K // group), f"scale must be ({N}, {K // group})"
    assert bits == 8 or (group in (32, 64, 128, 256) and K % group == 0), "int4 needs group 32..256 dividing K"
    block_m = 16 if M <= 16 else (32 if M <= 32 else 64)
    tile = 512 if bits == 8 else max(256, group)
    k_per_split = triton.cdiv(triton.cdiv(K, split_k), tile) * tile
    split_k = triton.cdiv(K, k_per_split)
    y = torch.empty((split_k, M, N), device=x.device, dtype=torch.float32 if split_k > 1 else x.dtype)
    args = (x, q, scale, y, M, N, K, k_per_split, x.stride(0), q.stride(0), scale.stride(0), y.stride(0), y.stride(1))
    if os.environ.get("TRITON_INTERPRET") == "1" or not x.is_cuda:
        bk = max(64, group) if bits == 4 else 64
        grid = (triton.cdiv(N, 16), triton.cdiv(M, block_m), split_k)
        _weight_only_kernel[grid](*args, BITS=bits, GROUP=group, BLOCK_M=block_m, BLOCK_N=16, BLOCK_K=bk)
    else:
        def grid(meta):
            return (triton.cdiv(N, meta["BLOCK_N"]), triton.cdiv(M, block_m), split_k)
        _WO_TUNED[grid](*args, BITS=bits, GROUP=group, BLOCK_M=block_m)
    return y[0] if split_k == 1 else y.sum(0).to(x.dtype)


def weight_only_matmul_ref(x, q, scale, bits, group=None):
    return x.float() @ dequantize_ref(q, scale, "int8" if bits == 8 else "int4", group).T


def w8a8_matmul(x_q, x_scale, w_q, w_scale, out_dtype=torch.bfloat16):
    """y = (x_q @ w_q.T) * x_scale[:, None] * w_scale[None, :]: int8 operands, int32 accumulation."""
    return _mm.matmul(x_q, w_q.T, a_scale=x_scale.reshape(-1), b_scale=w_scale.reshape(-1), out_dtype=out_dtype)


def w8a8_matmul_ref(x_q, x_scale, w_q, w_scale):
    return _mm.matmul_ref(x_q, w_q.T, a_scale=x_scale.reshape(-1), b_scale=w_scale.reshape(-1))


# --- benchmark entries -----------------------------------------------------------------------

QUANT_SIZES = ((4096, 4096), (8192, 8192), (22016, 4096), (8192, 28672))   # (N, K) llama weights
QUANT_MODES = (("int8", None, "float32"), ("int4", 128, "bfloat16"), ("fp8", None, "float32"))


def _quantize_case(N, K, mode, group, scale_dtype, dev_dtype):
    from mlsyscalc.bench import harness
    from mlsyscalc.bench.sweep import Bench, Case

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
    from mlsyscalc.bench import harness
    from mlsyscalc.bench.sweep import Bench, Case

    group = 128 if bits == 4 else None
    mode = "int4" if bits == 4 else "int8"

    def build():
        dev = harness.device()
        q, s = quantize(torch.randn(N, K, device=dev, dtype=dev_dtype), mode, group, dev_dtype)
        w = dequantize_ref(q, s, mode, group).to(dev_dtype)   # the same weights in 16 bits for the baseline
        x = torch.randn(M, K, device=dev, dtype=dev_dtype)
        return Bench(run=lambda: weight_only_matmul(x, q, s, bits, group),
                     reference=lambda: weight_only_matmul_ref(x, q, s, bits, group),
                     baseline=lambda: torch.matmul(x, w.T))

    w_bytes = N * K * bits // 8 + N * (K // (group or K)) * 2
    io_bytes = 2 * (M * K + M * N)
    return Case(f"triton_w{bits}a16", "torch.matmul bf16", f"{M}x{N}x{K}", f"w{bits}a16" + ("_g128" if group else ""),
                build, flops=2.0 * M * N * K, bytes=float(w_bytes + io_bytes), gate="bfloat16")


def _w8a8_case(M, N, K, dev_dtype):
    from mlsyscalc.bench import harness
    from mlsyscalc.bench.sweep import Bench, Case

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
    """Harness cases for `mlsys bench quant` (kinds: quantize, w8a16, w4a16, w8a8)."""
    from mlsyscalc.bench import shapes as shape_sets

    dev_dtype = torch.float16 if small else torch.bfloat16
    cases = []
    for kind in kinds:
        if kind == "quantize":
            sizes = [(n, k) for _, n, k in shape_sets.parse_shapes(shapes)] if shapes else \
                ([(48, 256)] if small else list(QUANT_SIZES))
            cases += [_quantize_case(n, k, mode, group, sdt if not small else "float32", dev_dtype)
                      for n, k in sizes for mode, group, sdt in QUANT_MODES if not (small and mode == "fp8")]
        elif kind in ("w8a16", "w4a16"):
            chosen = shape_sets.pick(shapes, sweep, "decode") if not small else [(1, 40, 256), (5, 40, 256)]
            cases += [_weight_only_case(m, n, k, 8 if kind == "w8a16" else 4, dev_dtype) for m, n, k in chosen]
        else:
            chosen = shape_sets.pick(shapes, sweep, "int8_squares") if not small else [(33, 48, 64)]
            cases += [_w8a8_case(m, n, k, dev_dtype) for m, n, k in chosen]
    return cases
