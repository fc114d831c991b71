"""Weight-only decode matmul (W8A16, W4A16) without integer-to-float conversion instructions.

y (M, N) = x (M, K) @ dequant(W).T for M = 1..16 (decode), W (N, K) int8 with a scale per row, or
int4 packed two per byte with a bf16/fp16 scale per group of GROUP (32, 64, 128) k.

Why its own kernel: a tiled kernel that turns each weight into a float with the hardware's
integer-to-float conversion (and, for int4, gathers one scale per element) spends more
instructions per weight than streaming the weights needs (experiments/README.md has the
measurements of the earlier W4A16 kernels this one replaced). Here every weight
becomes a 16-bit float with integer bit operations only, the "magic number" construction, in
inline PTX on 4 packed bytes at a time (`_int4_ptx`, `_int8_ptx`):

- int4 nibble n (value n - 8): the bf16 bits 0x4300 | n are the number 128 + n (fp16: 0x6400 | n
  = 1024 + n), exact; one packed bf16x2 (f16x2) FMA per pair subtracts 136 (1032): n - 8, exact.
- int8 q: u = q ^ 0x80 = q + 128 as an unsigned byte; fp32 bits 0x4B000000 | u are 2^23 + u; one
  subtraction of 2^23 + 128 gives q exactly, and one packing conversion per pair makes bf16x2
  (fp16: 0x6400 | u = 1024 + u, minus 1152 in f16x2).

Without the PTX (the CPU interpreter in CI, fp32 activations) the same constructions run as plain
Triton integer ops; int4 then feeds BIAS + n to the dot and subtracts BIAS * (sum of x over the
group) from the group's fp32 partial sum, which is exact up to fp32 rounding of that sum.

int4 weights use the "halves" packing (`quant.pack_halves`, a one-time repack):
byte j of a group holds k = j (low nibble) and k = GROUP/2 + j (high nibble), so the two nibbles
of a byte tile pair with two contiguous halves of x's group. Every group is one pair of dots and
one scale multiply on the fp32 partial sum.

M <= 16 rows of x ride in one 16-row tensor-core tile (masked rows read nothing); the grid is one
program per BLOCK_N columns and no split of K, so there is one launch and no workspace.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .matmul_launch import current_stream, launch, remember, run_entry
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
        return tl.inline_asm_elementwise(_INT4_PTX_F16, "=r,=r,=r,=r,r", [byte], dtype=(tl.float16, tl.float16),
                                         is_pure=True, pack=4)
    else:
        return tl.inline_asm_elementwise(_INT4_PTX_BF16, "=r,=r,=r,=r,r", [byte],
                                         dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=4)


@triton.jit
def _gemv_acc(x_ptr, w_ptr, s_ptr, offs_m, offs_n, m_ok, n_ok, k_lo, k_hi, K, stride_xm, stride_wn, stride_sn,
              BITS: tl.constexpr, GROUP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              ASM: tl.constexpr):
    """fp32 (16, BLOCK_N) = x[:, k_lo:k_hi] @ dequant(W)[offs_n, k_lo:k_hi].T, scales applied; k_lo is a
    multiple of BLOCK_K, and tiles past K read nothing (masked)."""
    BLOCK_M: tl.constexpr = 16
    dt = x_ptr.dtype.element_ty
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if BITS == 8:
        kk = tl.arange(0, BLOCK_K)
        for k0 in range(k_lo, k_hi, BLOCK_K):
            k = k0 + kk
            k_ok = k < K
            x = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0)
            q = tl.load(w_ptr + offs_n[:, None] * stride_wn + k[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0)
            if ASM:
                w = _int8_asm(q, dt)
            else:
                w = _int8_as_f32(q).to(dt)
            acc = tl.dot(x, tl.trans(w), acc)
        s = tl.load(s_ptr + offs_n * stride_sn, mask=n_ok, other=0.0).to(tl.float32)
        acc = acc * s[None, :]
    else:
        H: tl.constexpr = GROUP // 2
        BIAS: tl.constexpr = 1032.0 if dt == tl.float16 else 136.0   # magic base + the int4 offset 8
        j = tl.arange(0, H)
        for k0 in range(k_lo, k_hi, BLOCK_K):    # K % GROUP == 0; BLOCK_K holds whole groups
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
                part = tl.dot(x_lo, tl.trans(lo))
                part = tl.dot(x_hi, tl.trans(hi), part)
                acc += (part - bias * x_sum[:, None]) * s[None, :]
    return acc


@triton.jit(do_not_specialize=["M"])
def _gemv_kernel(
    x_ptr, w_ptr, s_ptr, y_ptr,          # x (M,K) bf16/fp16; w (N,K) int8 or (N,K/2) uint8 ("halves"); s (N, K/GROUP)
    M, N, K,
    stride_xm, stride_wn, stride_sn, stride_ym,
    BITS: tl.constexpr, GROUP: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, ASM: tl.constexpr,
):
    pid = tl.program_id(0)
    offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, 16)
    n_ok = offs_n < N
    m_ok = offs_m < M
    acc = _gemv_acc(x_ptr, w_ptr, s_ptr, offs_m, offs_n, m_ok, n_ok, 0, K, K, stride_xm, stride_wn, stride_sn,
                    BITS, GROUP, BLOCK_N, BLOCK_K, ASM)
    out = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :]
    tl.store(out, acc.to(y_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


@triton.jit(do_not_specialize=["M"])
def _gemv_sk_kernel(
    x_ptr, w_ptr, s_ptr, y_ptr,          # as _gemv_kernel
    ws_ptr, lock_ptr,                    # fp32 (SPLIT, M, N) partial sums; int32 per column tile, zero between calls
    M, N, K,
    stride_xm, stride_wn, stride_sn, stride_ym,
    BITS: tl.constexpr, GROUP: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr, ASM: tl.constexpr,
):
    """_gemv_kernel over a (column tile, K slice) grid: SPLIT programs per column tile, each over one
    K slice (a whole number of BLOCK_K). Small weights get several programs per SM, and so more
    loads in flight and more warps converting weights, still in one launch: each program stores
    its fp32 partial sum, counts itself in its tile's counter (release/acquire), and the tile's last
    program adds the SPLIT partials in slice order (the same sum whichever program is last), stores
    y and puts the counter back to zero for the next call."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, 16)
    n_ok = offs_n < N
    m_ok = offs_m < M
    chunk = tl.cdiv(tl.cdiv(K, SPLIT), BLOCK_K) * BLOCK_K
    k_lo = pid_k * chunk
    k_hi = tl.minimum(k_lo + chunk, K)
    acc = _gemv_acc(x_ptr, w_ptr, s_ptr, offs_m, offs_n, m_ok, n_ok, k_lo, k_hi, K, stride_xm, stride_wn, stride_sn,
                    BITS, GROUP, BLOCK_N, BLOCK_K, ASM)
    mask = m_ok[:, None] & n_ok[None, :]
    ws = ws_ptr + offs_m[:, None] * N + offs_n[None, :]
    tl.store(ws + pid_k * M * N, acc, mask=mask)
    tl.debug_barrier()                   # every thread's partial is written before the counter moves
    arrived = tl.atomic_add(lock_ptr + pid_n, 1, sem="acq_rel", scope="gpu")
    if arrived == SPLIT - 1:
        tl.debug_barrier()
        total = tl.zeros((16, BLOCK_N), dtype=tl.float32)
        for sl in tl.static_range(SPLIT):
            total += tl.load(ws + sl * M * N, mask=mask, other=0.0, cache_modifier=".cg")
        tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :], total.to(y_ptr.dtype.element_ty), mask=mask)
        tl.atomic_xchg(lock_ptr + pid_n, 0, sem="relaxed", scope="gpu")


@triton.jit(do_not_specialize=["M"])
def _gemv_ks_kernel(
    x_ptr, w_ptr, s_ptr, y_ptr,          # as _gemv_kernel
    M, N, K,
    stride_xm, stride_wn, stride_sn, stride_ym,
    BITS: tl.constexpr, GROUP: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, KS: tl.constexpr, ASM: tl.constexpr,
):
    """_gemv_kernel with K split KS ways inside the program: a batched (KS, 16, BLOCK_N) dot whose
    batch runs on different warps, summed once at the end. For few columns (N / BLOCK_N programs)
    the warps of a plain tile cannot outnumber N / 8, about 4 per SM at N = 4096; KS multiplies that
    without a second launch or a workspace. int4: each K slice is one group (BLOCK_K = KS * GROUP)."""
    BLOCK_M: tl.constexpr = 16
    dt = x_ptr.dtype.element_ty
    SL: tl.constexpr = BLOCK_K // KS                    # k per slice
    pid = tl.program_id(0)
    offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    ks = tl.arange(0, KS)
    n_ok = offs_n < N
    m_ok = offs_m < M
    acc = tl.zeros((KS, BLOCK_M, BLOCK_N), dtype=tl.float32)
    if BITS == 8:
        j = tl.arange(0, SL)
        for k0 in range(0, K, BLOCK_K):
            k = k0 + ks[:, None] * SL + j[None, :]                                   # (KS, SL)
            k_ok = k < K
            x = tl.load(x_ptr + offs_m[None, :, None] * stride_xm + k[:, None, :],
                        mask=m_ok[None, :, None] & k_ok[:, None, :], other=0.0)    # (KS, 16, SL)
            q = tl.load(w_ptr + offs_n[None, None, :] * stride_wn + k[:, :, None],
                        mask=n_ok[None, None, :] & k_ok[:, :, None], other=0)      # (KS, SL, BLOCK_N)
            if ASM:
                w = _int8_asm(q, dt)
            else:
                w = _int8_as_f32(q).to(dt)
            acc = tl.dot(x, w, acc)
        out = tl.sum(acc, axis=0) * tl.load(s_ptr + offs_n * stride_sn, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    else:
        H: tl.constexpr = GROUP // 2
        BIAS: tl.constexpr = 1032.0 if dt == tl.float16 else 136.0
        tl.static_assert(SL == GROUP, "int4: one group per K slice")
        j = tl.arange(0, H)
        for k0 in range(0, K, BLOCK_K):
            kg = k0 + ks * GROUP                                                     # (KS,) first k of each group
            g_ok = kg < K
            x_row = x_ptr + offs_m[None, :, None] * stride_xm + kg[:, None, None] + j[None, None, :]
            x_mask = m_ok[None, :, None] & g_ok[:, None, None]
            x_lo = tl.load(x_row, mask=x_mask, other=0.0)                           # (KS, 16, H)
            x_hi = tl.load(x_row + H, mask=x_mask, other=0.0)
            byte = tl.load(w_ptr + offs_n[None, None, :] * stride_wn + (kg // 2)[:, None, None] + j[None, :, None],
                           mask=n_ok[None, None, :] & g_ok[:, None, None], other=0)  # (KS, H, BLOCK_N) uint8
            if ASM:
                lo, hi = _int4_asm(byte, dt)
                part = tl.dot(x_lo, lo)
                part = tl.dot(x_hi, hi, part)
            else:
                lo = _int4_plus_bias(byte & 15, dt)
                hi = _int4_plus_bias(byte >> 4, dt)
                x_sum = tl.sum(x_lo.to(tl.float32) + x_hi.to(tl.float32), axis=2)  # (KS, 16)
                part = tl.dot(x_lo, lo)
                part = tl.dot(x_hi, hi, part) - BIAS * x_sum[:, :, None]
            s = tl.load(s_ptr + offs_n[None, :] * stride_sn + (kg // GROUP)[:, None],
                        mask=n_ok[None, :] & g_ok[:, None], other=0.0).to(tl.float32)  # (KS, BLOCK_N)
            acc += part * s[:, None, :]
        out = tl.sum(acc, axis=0)
    ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :]
    tl.store(ptrs, out.to(y_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


MAX_M = 16   # rows of x one 16-row tensor-core tile holds


def _configs():
    # (BLOCK_N, BLOCK_K, warps, stages); the tensor-core layout gives each warp >= 8 columns (BLOCK_N 16 -> 2 warps),
    # else warps repeat each other's work
    tiles = [(16, 512, 2, 4), (16, 256, 2, 3), (32, 128, 4, 4), (32, 256, 4, 4), (32, 512, 4, 3), (32, 512, 4, 4),
             (32, 256, 4, 6), (64, 128, 4, 4), (64, 256, 4, 4), (64, 512, 8, 3), (64, 256, 8, 5), (128, 256, 8, 3),
             (128, 256, 8, 4),
             # 32-64 columns a warp: each x fragment feeds more MMAs (int4: 2.8-3.5 instructions a weight in
             # the sm_90 SASS of the loop, against 4.1 at 16 columns a warp)
             (128, 128, 4, 4), (128, 256, 4, 3), (256, 128, 4, 3)]
    return [triton.Config({"BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w, num_stages=st) for bn, bk, w, st in tiles]


def _ks_configs():
    # (BLOCK_N, KS, k per slice, warps, stages): BLOCK_K = KS * slice; int4 keeps only slice == GROUP
    tiles = [(32, 4, 128, 4, 3), (32, 4, 128, 4, 4), (16, 4, 128, 4, 4), (32, 8, 128, 8, 3), (16, 8, 128, 8, 3),
             (64, 4, 128, 8, 3), (32, 4, 256, 8, 3), (16, 8, 256, 8, 3), (32, 2, 128, 4, 4), (32, 2, 256, 4, 4),
             (64, 4, 128, 4, 3), (64, 4, 128, 4, 4)]   # 64 columns a warp (int4: 2.9 instructions a weight)
    return [triton.Config({"BLOCK_N": bn, "BLOCK_K": ks * sl, "KS": ks}, num_warps=w, num_stages=st)
            for bn, ks, sl, w, st in tiles]


def _ks_prune(configs, named_args, **kwargs):
    """int4 slices are whole groups: BLOCK_K == KS * GROUP."""
    bits = kwargs.get("BITS", named_args.get("BITS"))
    group = kwargs.get("GROUP", named_args.get("GROUP"))
    if bits == 8:
        return configs
    return [c for c in configs if c.kwargs["BLOCK_K"] == c.kwargs["KS"] * group] or configs[:1]


def _sk_configs():
    # (BLOCK_N, BLOCK_K, SPLIT, warps, stages): K slices of one to a few BLOCK_K each, several programs per SM
    tiles = [(32, 256, 4, 4, 3), (32, 256, 8, 4, 3), (32, 512, 4, 4, 3), (32, 512, 2, 4, 3), (64, 256, 4, 4, 3),
             (64, 256, 8, 8, 3), (64, 512, 4, 8, 3), (16, 256, 4, 2, 3), (16, 512, 8, 2, 2), (32, 128, 8, 4, 4),
             (64, 128, 4, 4, 4), (32, 256, 2, 4, 4), (128, 256, 4, 8, 3),
             (128, 256, 4, 4, 3), (256, 128, 4, 4, 3), (128, 128, 4, 4, 4), (256, 128, 2, 4, 3)]
    return [triton.Config({"BLOCK_N": bn, "BLOCK_K": bk, "SPLIT": sp}, num_warps=w, num_stages=st)
            for bn, bk, sp, w, st in tiles]


MAX_SPLIT = max(c.kwargs["SPLIT"] for c in _sk_configs())   # the workspace holds this many partial sums
_WORKSPACE: dict = {}   # (device index, stream handle, N) -> (fp32 partial sums, int32 counters); never dropped


def _workspace(N: int, device: int, stream: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The split kernel's partial sums (MAX_SPLIT x 16 x N fp32: any M <= 16) and per-tile counters (zeroed
    once; each launch leaves them at zero) for one stream and one N. Launches on one stream run in order,
    so they may share them; another stream gets its own. Kept for the process's life: a launch captured
    in a CUDA graph keeps their addresses, so they are never replaced or freed. Graphs captured on one
    stream (torch's default capture stream) share them too: replay such graphs one at a time."""
    key = (device, stream, N)
    bufs = _WORKSPACE.get(key)
    if bufs is None:
        bufs = _WORKSPACE[key] = (torch.empty(MAX_SPLIT * MAX_M * N, device=f"cuda:{device}", dtype=torch.float32),
                                  torch.zeros(triton.cdiv(N, 16), device=f"cuda:{device}", dtype=torch.int32))
    return bufs


_KEY = ["M", "N", "K", "BITS", "GROUP"]
TUNED = {"plain": triton.autotune(_configs(), key=_KEY, do_bench=gpu_time_ms)(_gemv_kernel),
         "ks": triton.autotune(_ks_configs(), key=_KEY, do_bench=gpu_time_ms,
                               prune_configs_by={"early_config_prune": _ks_prune})(_gemv_ks_kernel),
         "sk": triton.autotune(_sk_configs(), key=_KEY, do_bench=gpu_time_ms)(_gemv_sk_kernel)}
KINDS = tuple(TUNED)
_CHOICE: dict = {}   # (M, N, K, bits, group, dtype) -> one of KINDS: the fastest by GPU time, measured on first use
_FAST: dict = {}     # shapes, strides, dtypes, alignment of a chosen-kind call -> (kind, its launch entry)
SK_MARGIN = 0.97     # the split kernel is chosen only when this much faster (GPU time) than the best one-pass kernel:
#                      it costs more host work per call (two more arguments, a workspace lookup), and its fp32
#                      partial sums make a round trip through global memory


def _choice_key(M: int, N: int, K: int, bits: int, group: int | None, dtype: torch.dtype) -> tuple:
    return (M, N, K, bits, group or K, dtype)


def chosen(M: int, N: int, K: int, bits: int, group: int | None, dtype: torch.dtype) -> str | None:
    """The kernel and tile the default (kind=None) settled on for this shape, once it has run; None before."""
    kind = _CHOICE.get(_choice_key(M, N, K, bits, group, dtype))
    return None if kind is None else f"{kind}: {TUNED[kind].best_config}"


def gemv(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, bits: int, group: int | None = None,
         cache: bool = True, kind: str | None = None, config: dict | None = None) -> torch.Tensor:
    """y (M,N) = x (M,K) @ dequant(q, scale).T for M <= 16 in one launch.

    bits 8: q (N, K) int8, scale (N, 1). bits 4: q (N, K/2) uint8 in the "halves" packing
    (`quant.pack_halves(quantize(...)[0], group)`), scale (N, K/group) with group 32, 64 or 128 dividing K.
    kind: "plain" (_gemv_kernel), "ks" (_gemv_ks_kernel: K split over the warps of a program), "sk"
    (_gemv_sk_kernel: K split over programs, reduced in the same launch), or None: on a GPU, all three
    are tuned and timed once per shape (GPU time, kernels/tuning.py) and the fastest is kept (the split
    kernel only when SK_MARGIN faster); under the interpreter, "plain".
    config: with a kind, its tile without tuning (BLOCK_N, BLOCK_K, KS or SPLIT, num_warps, num_stages):
    for tests and probes.
    """
    if cache and kind is None and x.is_cuda:   # a repeated call: one key, one allocation, one launch
        fkey = (x.shape, x.stride(), x.dtype, q.shape, q.stride(), q.dtype, scale.shape, scale.stride(), scale.dtype,
                bits, group, x.device, x.data_ptr() % 16 == 0, q.data_ptr() % 16 == 0, scale.data_ptr() % 16 == 0)
        hit = _FAST.get(fkey)
        if hit is not None:
            hit_kind, entry = hit
            dev = x.device.index
            stream = current_stream(dev)
            y = torch.empty((x.shape[0], q.shape[0]), device=x.device, dtype=x.dtype)
            bufs = _workspace(q.shape[0], dev, stream) if hit_kind == "sk" else ()
            run_entry(entry, (x, q, scale, y, *bufs, x.shape[0], q.shape[0], x.shape[1], x.stride(0), q.stride(0),
                              scale.stride(0), y.stride(0)), dev, stream=stream)
            return y
    M, K = x.shape
    N = q.shape[0]
    group = group or K
    assert 1 <= M <= MAX_M, f"gemv takes 1..{MAX_M} rows of x, not {M}"
    assert bits == 8 or (group in (32, 64, 128) and K % group == 0), "int4 needs group 32, 64 or 128 dividing K"
    assert kind in (None, *KINDS), f"kind {kind!r}?"
    assert config is None or kind is not None, "a config needs its kind"
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    tail = (M, N, K, x.stride(0), q.stride(0), scale.stride(0), y.stride(0))
    interpret = os.environ.get("TRITON_INTERPRET") == "1" or not x.is_cuda
    if interpret:   # fixed small tiles; two groups a tile (two K slices) so a group past K is exercised
        bk = 64 if bits == 8 else 2 * group
        if kind == "ks":
            _gemv_ks_kernel[(triton.cdiv(N, 16),)](x, q, scale, y, *tail, BITS=bits, GROUP=group, BLOCK_N=16, KS=2,
                                                  BLOCK_K=128 if bits == 8 else 2 * group, ASM=False)
        elif kind == "sk":   # three slices: with K of 2-3 tiles, the last slice is partly or wholly past K
            ws = torch.empty(3 * M * N, device=x.device, dtype=torch.float32)
            lock = torch.zeros(triton.cdiv(N, 16), device=x.device, dtype=torch.int32)
            _gemv_sk_kernel[(triton.cdiv(N, 16), 3)](x, q, scale, y, ws, lock, *tail, BITS=bits, GROUP=group,
                                                    BLOCK_N=16, BLOCK_K=bk // 2 if bits == 8 else group, SPLIT=3,
                                                    ASM=False)
            assert not lock.any(), "split GEMV left a counter set"
        else:
            _gemv_kernel[(triton.cdiv(N, 16),)](x, q, scale, y, *tail, BITS=bits, GROUP=group, BLOCK_N=16,
                                               BLOCK_K=bk, ASM=False)
        return y
    choose = kind is None
    if choose:
        key = _choice_key(M, N, K, bits, group, x.dtype)
        if key not in _CHOICE:
            times = {k: gpu_time_ms(lambda k=k: gemv(x, q, scale, bits, group, cache, k)) for k in KINDS}
            one_pass = min(("plain", "ks"), key=times.get)
            _CHOICE[key] = "sk" if times["sk"] < SK_MARGIN * times[one_pass] else one_pass
        kind = _CHOICE[key]

    def grid(meta):
        return (triton.cdiv(N, meta["BLOCK_N"]), meta.get("SPLIT", 1))
    # BLOCK_K holds whole groups (group <= 128); the PTX conversions need 16-bit activations.
    # Repeated shapes go straight to the compiled kernel (matmul_launch: no autotuner or binder per call).
    consts = dict(BITS=bits, GROUP=group, ASM=x.dtype in (torch.float16, torch.bfloat16))
    bufs = _workspace(N, x.device.index, current_stream(x.device.index)) if kind == "sk" else ()
    if config is not None:
        assert config.get("SPLIT", 1) <= MAX_SPLIT, f"the workspace holds {MAX_SPLIT} partial sums"
        TUNED[kind].fn[grid(config)](x, q, scale, y, *bufs, *tail, **consts, **config)
        return y
    entry = launch(TUNED[kind], grid, (x, q, scale, y, *bufs, *tail), consts, cache=cache)
    if choose and cache and entry is not None:
        remember(_FAST, fkey, (kind, entry))
    return y
