"""Weight-only decode matmul (W8A16, W4A16 g=128) without integer-to-float conversion instructions.

y (M, N) = x (M, K) @ dequant(W).T for M = 1..16 (decode), W (N, K) int8 with a scale per row, or
int4 packed two per byte with a bf16/fp16 scale per group of GROUP k.

Why a second kernel: the first one (kernels/quant.py) turns each weight into a float with the
hardware's integer-to-float conversion (I2F, a quarter-rate instruction on Hopper) and, for int4,
gathers one scale per element; the compiled code spends more issue slots on that than the memory
system needs to stream the weights. Here every weight becomes a float with integer bit operations
only, the classic "magic number" construction:

- int4 (nibble n in 0..15, value n - 8): the 16-bit pattern 0x4300 | n is the bf16 (and 0x5800 | n
  the fp16... not used: fp16 needs 0x6400 | n = 1024 + n) number 128 + n, exact. The kernel feeds
  128 + n to the tensor-core dot and subtracts 136 * (sum of x over the group) from the group's
  partial sum: sum_k x_k (n_k - 8) = sum_k x_k (128 + n_k) - 136 sum_k x_k. The products are exact
  in the dot's fp32 accumulator; the subtraction loses about log2(136 / 4.6) ~ 5 of fp32's 24 bits.
- int8 (q in -128..127): q + 128 fits 8 bits, and 0x4B000000 | (q + 128) is the fp32 number
  2^23 + q + 128; one integer add and one float subtraction give q exactly.

int4 weights use the "halves" packing of kernels/quant_w4.py (`pack_halves`): byte j of a group
holds k = j (low nibble) and k = GROUP/2 + j (high nibble), so the two nibbles of a byte tile pair
with two contiguous halves of x's group. Every group is one pair of dots and one scale multiply on
the fp32 partial sum.

M <= 16 rows of x ride in one 16-row tensor-core tile (masked rows read nothing); the grid is one
program per BLOCK_N columns and no split of K, so there is one launch and no workspace.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .matmul_launch import launch
from .tuning import gpu_time_ms


@triton.jit
def _int4_plus_bias(nib, dt: tl.constexpr):
    """uint8 nibbles n (0..15) -> BIAS + n in dt (fp16: 1024 + n; else bf16 128 + n), with bit operations only."""
    if dt == tl.float16:
        return (nib.to(tl.int16) | 0x6400).to(tl.float16, bitcast=True)
    else:
        return (nib.to(tl.int16) | 0x4300).to(tl.bfloat16, bitcast=True).to(dt)


@triton.jit
def _int8_as_f32(q):
    """int8 q -> q as fp32 through 2^23 + (q + 128) (integer add, bitcast, one float subtraction)."""
    return (q.to(tl.int32) + 0x4B000080).to(tl.float32, bitcast=True) - 8388736.0


def _int4_ptx(magic: str, one: str, minus_bias: str) -> str:
    """PTX for 4 packed bytes ($4) -> low nibbles ($0, $1) and high nibbles ($2, $3) as 16-bit floats minus 8."""
    fma = "bf16x2" if magic == "0x43004300" else "f16x2"
    fix = " ".join(f"fma.rn.{fma} ${i}, ${i}, c1, c2;" for i in range(4))
    return (f"{{ .reg .b32 t0, t1, c1, c2; mov.b32 c1, {one}; mov.b32 c2, {minus_bias}; prmt.b32 t0, $4, 0, 0x5150; prmt.b32 t1, $4, 0, 0x5352; "
            f"lop3.b32 $0, t0, 0x000F000F, {magic}, 0xEA; lop3.b32 $1, t1, 0x000F000F, {magic}, 0xEA; "
            "shr.u32 t0, t0, 4; shr.u32 t1, t1, 4; "
            f"lop3.b32 $2, t0, 0x000F000F, {magic}, 0xEA; lop3.b32 $3, t1, 0x000F000F, {magic}, 0xEA; {fix} }}")


# bf16: 0x4300 | n = 128 + n, minus 136 (0xC308); fp16: 0x6400 | n = 1024 + n, minus 1032 (0xE408)
_INT4_PTX_BF16 = tl.constexpr(_int4_ptx("0x43004300", "0x3F803F80", "0xC308C308"))
_INT4_PTX_F16 = tl.constexpr(_int4_ptx("0x64006400", "0x3C003C00", "0xE408E408"))


def _int8_ptx(fp16: bool) -> str:
    """PTX for 4 packed int8 ($2) -> 4 16-bit floats ($0: elements 0, 1; $1: 2, 3), exact, no conversion of ints.

    u = q ^ 0x80 = q + 128 as an unsigned byte. fp16: 0x6400 | u = 1024 + u, minus 1152 in one f16x2 FMA
    per pair. bf16 (8-bit significand, too short for 1024 + u): fp32 0x4B000000 | u = 2^23 + u, minus
    2^23 + 128, then one packing conversion per pair."""
    if fp16:
        return ("{ .reg .b32 u, t0, t1, c1, c2; xor.b32 u, $2, 0x80808080; mov.b32 c1, 0x3C003C00; "
                "mov.b32 c2, 0xE480E480; prmt.b32 t0, u, 0x64646464, 0x4140; prmt.b32 t1, u, 0x64646464, 0x4342; "
                "fma.rn.f16x2 $0, t0, c1, c2; fma.rn.f16x2 $1, t1, c1, c2; }")
    return ("{ .reg .b32 u, t0, t1, t2, t3; .reg .f32 f0, f1, f2, f3; xor.b32 u, $2, 0x80808080; "
            "prmt.b32 t0, u, 0x4B000000, 0x7440; prmt.b32 t1, u, 0x4B000000, 0x7441; "
            "prmt.b32 t2, u, 0x4B000000, 0x7442; prmt.b32 t3, u, 0x4B000000, 0x7443; "
            "mov.b32 f0, t0; mov.b32 f1, t1; mov.b32 f2, t2; mov.b32 f3, t3; "
            "sub.f32 f0, f0, 0f4B000080; sub.f32 f1, f1, 0f4B000080; sub.f32 f2, f2, 0f4B000080; "
            "sub.f32 f3, f3, 0f4B000080; cvt.rn.bf16x2.f32 $0, f1, f0; cvt.rn.bf16x2.f32 $1, f3, f2; }")


_INT8_PTX_BF16 = tl.constexpr(_int8_ptx(False))
_INT8_PTX_F16 = tl.constexpr(_int8_ptx(True))


@triton.jit
def _int8_asm(q, dt: tl.constexpr):
    """int8 weights -> the same values in dt (fp16: 1.25 instructions a weight; bf16: 2.75)."""
    if dt == tl.float16:
        return tl.inline_asm_elementwise(_INT8_PTX_F16, "=r,=r,r", [q], dtype=tl.float16, is_pure=True, pack=4)
    else:
        return tl.inline_asm_elementwise(_INT8_PTX_BF16, "=r,=r,r", [q], dtype=tl.bfloat16, is_pure=True, pack=4)


@triton.jit
def _int4_asm(byte, dt: tl.constexpr):
    """uint8 bytes -> (low nibble - 8, high nibble - 8) in dt: per 4 bytes two PRMT, four LOP3, two shifts and
    four packed bf16x2/f16x2 FMAs (1.5 instructions a weight), no conversion instructions."""
    if dt == tl.float16:
        return tl.inline_asm_elementwise(_INT4_PTX_F16, "=r,=r,=r,=r,r", [byte], dtype=(tl.float16, tl.float16), is_pure=True, pack=4)
    else:
        return tl.inline_asm_elementwise(_INT4_PTX_BF16, "=r,=r,=r,=r,r", [byte], dtype=(tl.bfloat16, tl.bfloat16), is_pure=True,
                                         pack=4)


@triton.jit(do_not_specialize=["M"])
def _gemv_kernel(
    x_ptr, w_ptr, s_ptr, y_ptr,          # x (M,K) bf16/fp16; w (N,K) int8 or (N,K/2) uint8 ("halves"); s (N, K/GROUP)
    M, N, K,
    stride_xm, stride_wn, stride_sn, stride_ym,
    BITS: tl.constexpr, GROUP: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SWAP: tl.constexpr, ASM: tl.constexpr,
):
    BLOCK_M: tl.constexpr = 16
    dt = x_ptr.dtype.element_ty
    pid = tl.program_id(0)
    offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    n_ok = offs_n < N
    m_ok = offs_m < M
    if SWAP:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if BITS == 8:
        kk = tl.arange(0, BLOCK_K)
        for k0 in range(0, K, BLOCK_K):
            k = k0 + kk
            k_ok = k < K
            x = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0)
            q = tl.load(w_ptr + offs_n[:, None] * stride_wn + k[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0)
            if ASM:
                w = _int8_asm(q, dt)
            else:
                w = _int8_as_f32(q).to(dt)
            if SWAP:
                acc = tl.dot(w, tl.trans(x), acc)
            else:
                acc = tl.dot(x, tl.trans(w), acc)
        s = tl.load(s_ptr + offs_n * stride_sn, mask=n_ok, other=0.0).to(tl.float32)
        if SWAP:
            acc = acc * s[:, None]
        else:
            acc = acc * s[None, :]
    else:
        H: tl.constexpr = GROUP // 2
        BIAS: tl.constexpr = 1032.0 if dt == tl.float16 else 136.0   # magic base + the int4 offset 8
        j = tl.arange(0, H)
        for k0 in range(0, K, BLOCK_K):          # K % GROUP == 0; BLOCK_K holds whole groups
            for g in tl.static_range(BLOCK_K // GROUP):
                kg = k0 + g * GROUP
                g_ok = kg < K
                x_row = x_ptr + offs_m[:, None] * stride_xm + kg
                x_mask = m_ok[:, None] & g_ok
                x_lo = tl.load(x_row + j[None, :], mask=x_mask, other=0.0)          # (16, H)
                x_hi = tl.load(x_row + H + j[None, :], mask=x_mask, other=0.0)
                byte = tl.load(w_ptr + offs_n[:, None] * stride_wn + kg // 2 + j[None, :],
                               mask=n_ok[:, None] & g_ok, other=0)                  # (BLOCK_N, H) uint8
                if ASM:
                    lo, hi = _int4_asm(byte, dt)
                    x_sum = tl.zeros((BLOCK_M,), dtype=tl.float32)
                    bias = 0.0
                else:
                    lo = _int4_plus_bias(byte & 15, dt)
                    hi = _int4_plus_bias(byte >> 4, dt)
                    x_sum = tl.sum(x_lo.to(tl.float32) + x_hi.to(tl.float32), axis=1)  # (16,)
                    bias = BIAS
                s = tl.load(s_ptr + offs_n * stride_sn + kg // GROUP, mask=n_ok & g_ok, other=0.0).to(tl.float32)
                if SWAP:
                    part = tl.dot(lo, tl.trans(x_lo))
                    part = tl.dot(hi, tl.trans(x_hi), part)
                    acc += (part - bias * x_sum[None, :]) * s[:, None]
                else:
                    part = tl.dot(x_lo, tl.trans(lo))
                    part = tl.dot(x_hi, tl.trans(hi), part)
                    acc += (part - bias * x_sum[:, None]) * s[None, :]
    if SWAP:
        out = y_ptr + offs_m[None, :] * stride_ym + offs_n[:, None]
        tl.store(out, acc.to(y_ptr.dtype.element_ty), mask=m_ok[None, :] & n_ok[:, None])
    else:
        out = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :]
        tl.store(out, acc.to(y_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


MAX_M = 16   # rows of x one 16-row tensor-core tile holds


def _configs():
    # (BLOCK_N, BLOCK_K, warps, stages); the tensor-core layout gives each warp >= 8 columns (BLOCK_N 16 -> 2 warps),
    # else warps repeat each other's work
    tiles = [(16, 512, 2, 4), (16, 256, 2, 3), (32, 128, 4, 4), (32, 256, 4, 4), (32, 512, 4, 3), (32, 512, 4, 4),
             (32, 256, 4, 6), (64, 128, 4, 4), (64, 256, 4, 4), (64, 512, 8, 3), (64, 256, 8, 5), (128, 256, 8, 3),
             (128, 256, 8, 4)]
    return [triton.Config({"BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w, num_stages=st) for bn, bk, w, st in tiles]


def _quick_bench(fn, quantiles):
    """The autotuner's timer: GPU time per call on a cold L2, host launch cost excluded (kernels/tuning.py)."""
    return gpu_time_ms(fn, quantiles)


_TUNED = triton.autotune(_configs(), key=["M", "N", "K", "BITS", "GROUP"], do_bench=_quick_bench)(_gemv_kernel)


def gemv(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, bits: int, group: int | None = None,
         cache: bool = True) -> torch.Tensor:
    """y (M,N) = x (M,K) @ dequant(q, scale).T for M <= 16 in one launch.

    bits 8: q (N, K) int8, scale (N, 1). bits 4: q (N, K/2) uint8 in the "halves" packing
    (`quant_w4.pack_halves(quantize(...)[0], group)`), scale (N, K/group) with group 32, 64 or 128 dividing K.
    """
    M, K = x.shape
    N = q.shape[0]
    group = group or K
    assert 1 <= M <= MAX_M, f"gemv takes 1..{MAX_M} rows of x, not {M}"
    assert bits == 8 or (group in (32, 64, 128) and K % group == 0), "int4 needs group 32, 64 or 128 dividing K"
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    args = (x, q, scale, y, M, N, K, x.stride(0), q.stride(0), scale.stride(0), y.stride(0))
    interpret = os.environ.get("TRITON_INTERPRET") == "1" or not x.is_cuda
    if interpret:   # fixed small tiles; two groups a tile so a group past K is exercised
        _gemv_kernel[(triton.cdiv(N, 16),)](*args, BITS=bits, GROUP=group, BLOCK_N=16,
                                           BLOCK_K=64 if bits == 8 else 2 * group, SWAP=False, ASM=False)
    else:
        def grid(meta):
            return (triton.cdiv(N, meta["BLOCK_N"]),)
        # BLOCK_K (128..512) holds whole groups of 32..128 (group 256: the 256/512 tiles); the PTX conversions need 16-bit activations.
        # Repeated shapes go straight to the compiled kernel (matmul_launch: no autotuner or binder per call).
        launch(_TUNED, grid, args, dict(BITS=bits, GROUP=group, SWAP=False, ASM=x.dtype in (torch.float16, torch.bfloat16)),
               cache=cache)
    return y
