"""Quantisation kernels and quantised matmuls in Triton.

- `quantize(x, mode, group)`: symmetric absmax quantisation of each row of x (N, K), per row
  (group = K) or per group of `group` columns. Modes: "int8" (|q| <= 127), "int4" (|q| <= 7, two
  per byte, `(q + 8)` in the low nibble for even k and the high nibble for odd k), "fp8" (e4m3,
  |q| <= 448). Scales are stored in the dtype asked for and q is computed with the *stored*
  scale, so dequantisation is exactly `q * scale`. Rounding is half away from zero.
- `dequantize(q, scale, mode, group)`: the inverse, to bf16/fp16/fp32 (int4 in either packing).
- `weight_only_matmul(x, q, scale, bits, group)`: y (M,N) = x (M,K) @ dequant(W).T for every M, the
  one public W8A16 / W4A16 entry point; it picks the path by M (`weight_only_path`): decode (M <= 16)
  runs the one-launch GEMV of kernels/quant_gemv.py; int8 at mid M a tiled kernel here (tensor-core
  dots or CUDA-core multiply-and-sum, autotuned tiles, K split over programs with fp32 atomics for
  narrow weights); from PREFILL_M rows on the weight is dequantized once per call (`dequantize`) and
  cuBLAS multiplies. int4 weights come in the "halves" packing (`pack_halves`, a one-time repack).
- W8A8: `w8a8_matmul` = the persistent TMA matmul of kernels/matmul.py on int8 inputs, int32
  accumulation, per-row x per-column scales in the epilogue.
- `*_ref`: plain torch. Benchmark cases against torch baselines: mlsyscalc/bench/cases/quant.py.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from . import matmul as _mm
from .tuning import gpu_time_ms

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
    if MODE == 1:  # int4: one contiguous load, split into even and odd columns that pack into a byte
        half = tl.arange(0, BLOCK_K // 2)
        cols = tl.arange(0, BLOCK_K)
        full_ok = row_ok[:, None] & (cols[None, :] < GROUP) & (k0 + cols[None, :] < K)
        x = tl.load(x_ptr + rows[:, None] * stride_xn + k0 + cols[None, :], mask=full_ok, other=0.0).to(tl.float32)
        xe, xo = tl.split(tl.reshape(x, (BLOCK_N, BLOCK_K // 2, 2)))
        ok = row_ok[:, None] & (half[None, :] < GROUP // 2) & (k0 + 2 * half[None, :] < K)
        amax = tl.max(tl.abs(x), axis=1)
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
    if MODE == 1:   # byte j: k = 2j low, 2j + 1 high (quantize's packing)
        byte = tl.load(q_ptr + rows[:, None] * stride_qn + cols[None, :] // 2, mask=ok, other=0)
        nib = tl.where((cols % 2 == 0)[None, :], byte & 15, byte >> 4)
        q = nib.to(tl.float32) - 8.0
    else:
        q = tl.load(q_ptr + rows[:, None] * stride_qn + cols[None, :], mask=ok).to(tl.float32)
    s = tl.load(s_ptr + rows[:, None] * stride_sn + cols[None, :] // GROUP, mask=ok, other=0.0).to(tl.float32)
    tl.store(y_ptr + rows[:, None] * stride_yn + cols[None, :], (q * s).to(y_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _dequantize_halves_kernel(
    q_ptr, s_ptr, y_ptr, N, K, stride_qn, stride_sn, stride_yn,   # q (N, K/2) "halves" int4; s (N, K/GROUP)
    GROUP: tl.constexpr, BLOCK_N: tl.constexpr, GROUPS: tl.constexpr,
):
    """GROUPS whole groups of BLOCK_N rows a program: each group's bytes in one contiguous load, the
    low nibbles stored as its first half and the high nibbles as its second, one scale per row."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    j = tl.arange(0, GROUP // 2)
    for g in tl.static_range(GROUPS):
        grp = tl.program_id(1) * GROUPS + g
        row_ok = (rows < N) & (grp * GROUP < K)
        ok = row_ok[:, None]
        byte = tl.load(q_ptr + rows[:, None] * stride_qn + grp * (GROUP // 2) + j[None, :], mask=ok, other=0)
        s = tl.load(s_ptr + rows * stride_sn + grp, mask=row_ok, other=0.0).to(tl.float32)[:, None]
        out = y_ptr + rows[:, None] * stride_yn + grp * GROUP + j[None, :]
        tl.store(out, (((byte & 15).to(tl.float32) - 8.0) * s).to(y_ptr.dtype.element_ty), mask=ok)
        tl.store(out + GROUP // 2, (((byte >> 4).to(tl.float32) - 8.0) * s).to(y_ptr.dtype.element_ty), mask=ok)


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
               out_dtype: torch.dtype = torch.bfloat16, halves: bool = False) -> torch.Tensor:
    """q * scale in out_dtype; halves: int4 q in the `pack_halves` layout instead of quantize's."""
    N = q.shape[0]
    K = q.shape[1] * (2 if mode == "int4" else 1)
    group = group or K
    assert scale.shape == (N, K // group), f"scale must be ({N}, {K // group})"
    y = torch.empty((N, K), device=q.device, dtype=out_dtype)
    if halves:   # whole groups, contiguous loads and stores
        assert mode == "int4" and K % group == 0, "the halves packing holds whole groups"
        groups = 2 if K // group >= 2 else 1
        grid = (triton.cdiv(N, 32), triton.cdiv(K // group, groups))
        _dequantize_halves_kernel[grid](q, scale, y, N, K, q.stride(0), scale.stride(0), y.stride(0), GROUP=group,
                                        BLOCK_N=32, GROUPS=groups, num_warps=4)
        return y
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
def _wo_tile(M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr):
    """A weight-only program's rows of x and y, columns of W and y, their masks, and its K slice [k_start, k_end)."""
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = offs_m < M
    n_ok = offs_n < N
    k_per_split = tl.cdiv(tl.cdiv(K, SPLIT_K), BLOCK_K) * BLOCK_K   # whole BLOCK_K tiles per slice
    k_start = pid_k * k_per_split
    return offs_m, offs_n, m_ok, n_ok, k_start, tl.minimum(k_start + k_per_split, K)


@triton.jit(do_not_specialize=["M"])
def _w8a16_kernel(
    x_ptr, w_ptr, s_ptr, y_ptr,          # x (M,K) fp16/bf16/fp32; w (N,K) int8; s (N, 1)
    M, N, K,                             # y (M,N): x's dtype, or fp32 summed atomically when SPLIT_K > 1
    stride_xm, stride_wn, stride_sn, stride_ym,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    USE_DOT: tl.constexpr, SPLIT_K: tl.constexpr,
):
    dt = x_ptr.dtype.element_ty
    offs_m, offs_n, m_ok, n_ok, k_start, k_end = _wo_tile(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_start, k_end, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        k_ok = k < k_end
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        w = tl.load(w_ptr + offs_n[:, None] * stride_wn + k[None, :], mask=n_ok[:, None] & k_ok[None, :],
                    other=0).to(tl.float32)
        if USE_DOT:   # tensor cores: BLOCK_M >= 16
            acc = tl.dot(x, w.to(dt).T, acc)
        else:         # CUDA cores: a broadcast multiply and a row sum, for M = 1..4
            acc += tl.sum(x.to(tl.float32)[:, None, :] * w[None, :, :], axis=2)
    acc = acc * tl.load(s_ptr + offs_n * stride_sn, mask=n_ok, other=0.0).to(tl.float32)[None, :]   # per channel
    out = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :]
    if SPLIT_K == 1:
        tl.store(out, acc.to(y_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])
    else:   # fp32, added atomically to the other K slices' partial sums
        tl.atomic_add(out, acc, mask=m_ok[:, None] & n_ok[None, :], sem="relaxed")


def _wo_configs(split: bool):
    dot = [(16, 256, 4, 4), (32, 256, 4, 4), (64, 256, 4, 3), (16, 512, 4, 3)]
    fma = [(8, 512, 4, 2), (4, 1024, 4, 2), (16, 256, 4, 2), (8, 1024, 8, 2)]
    splits = (2, 4, 8) if split else (1,)
    if split:
        dot, fma = dot[:2], fma[:2]
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "USE_DOT": use_dot, "SPLIT_K": sk},
                          num_warps=w, num_stages=st)
            for use_dot, tiles, bms in ((True, dot, (16, 32, 64)), (False, fma, (1, 2, 4)))
            for bn, bk, w, st in tiles for bm in bms for sk in splits]


def _wo_prune(configs, named_args, **kwargs):
    """Keep the BLOCK_M that fits M for each variant; CUDA-core configs only for M <= 4."""
    M = named_args["M"]
    want_dot = 16 if M <= 16 else (32 if M <= 32 else 64)
    want_fma = triton.next_power_of_2(M) if M <= 4 else None
    return [c for c in configs if c.kwargs["BLOCK_M"] == (want_dot if c.kwargs["USE_DOT"] else want_fma)]


_WO_KEY = ["M", "N", "K"]
_WO_DIRECT = triton.autotune(_wo_configs(False), key=_WO_KEY, do_bench=gpu_time_ms,
                             prune_configs_by={"early_config_prune": _wo_prune})(_w8a16_kernel)
_WO_SPLIT = triton.autotune(_wo_configs(True), key=_WO_KEY, reset_to_zero=["y_ptr"], do_bench=gpu_time_ms,
                            prune_configs_by={"early_config_prune": _wo_prune})(_w8a16_kernel)
_WO_CHOICE: dict = {}   # (M, N, K, dtype) -> "direct" | "split", measured on first use


def _w8a16_tiled(x, q, scale, split: int):
    """One launch of the tiled W8A16 kernel: its autotuners on a GPU, fixed small tiles under the interpreter."""
    M, K = x.shape
    N = q.shape[0]
    y = torch.zeros((M, N), device=x.device, dtype=torch.float32) if split else \
        torch.empty((M, N), device=x.device, dtype=x.dtype)
    args = (x, q, scale, y, M, N, K, x.stride(0), q.stride(0), scale.stride(0), y.stride(0))
    if os.environ.get("TRITON_INTERPRET") == "1" or not x.is_cuda:
        use_dot = M > 4
        bm = 16 if use_dot else triton.next_power_of_2(M)
        grid = (triton.cdiv(N, 16), triton.cdiv(M, bm), split or 1)
        _w8a16_kernel[grid](*args, BLOCK_M=bm, BLOCK_N=16, BLOCK_K=64, USE_DOT=use_dot, SPLIT_K=split or 1)
    else:
        def grid(meta):
            return (triton.cdiv(N, meta["BLOCK_N"]), triton.cdiv(M, meta["BLOCK_M"]), meta["SPLIT_K"])
        (_WO_SPLIT if split else _WO_DIRECT)[grid](*args)
    return y.to(x.dtype) if split else y


def pack_halves(q: torch.Tensor, group: int) -> torch.Tensor:
    """Repack int4 weights from `quantize`'s layout (even k low, odd k high) to the "halves" layout
    that weight_only_matmul takes: byte j of each group holds k = j in its low nibble and
    k = group/2 + j in its high nibble. q (N, K/2) uint8 -> (N, K/2) uint8; a one-time weight
    transform, in torch ops (any device)."""
    N, half_k = q.shape
    assert q.dtype == torch.uint8 and group % 2 == 0 and (2 * half_k) % group == 0, "q (N, K/2) uint8, K % group == 0"
    nib = torch.stack((q & 15, q >> 4), dim=2).reshape(N, -1, group)   # (N, K/group, group) in k order
    lo, hi = nib[..., : group // 2], nib[..., group // 2:]
    return (lo | (hi << 4)).reshape(N, half_k).contiguous()


GEMV_MAX_M = 16   # rows of x the one-launch decode kernel takes (quant_gemv.MAX_M)
# Rows of x from which the weight is dequantized once per call to x's dtype and cuBLAS multiplies
# (bits -> M). int4 has no tiled kernel of its own: past the GEMV it always dequantizes.
PREFILL_M = {8: 256, 4: GEMV_MAX_M + 1}
PATHS = ("gemv", "tiled", "dequant")


def weight_only_path(M: int, bits: int, x_dtype: torch.dtype) -> str:
    """The path weight_only_matmul takes for M rows of x: "gemv" (decode), "tiled" (int8, mid M), "dequant"."""
    if M <= GEMV_MAX_M and x_dtype in (torch.float16, torch.bfloat16):
        return "gemv"
    return "dequant" if M >= PREFILL_M[bits] or bits == 4 else "tiled"


def weight_only_matmul(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, bits: int,
                       group: int | None = None, path: str | None = None, split_k: int | None = None) -> torch.Tensor:
    """y (M,N) = x (M,K) @ dequant(q, scale).T for any M; bits 8 (q int8 (N,K), scale (N,1)) or 4 (q (N,K/2)
    uint8 in the `pack_halves` layout, scale (N, K/group), group 32, 64 or 128).

    path None picks by M (`weight_only_path`): the one-launch GEMV of quant_gemv.py for decode
    (M <= 16), the tiled W8A16 kernel for int8 at mid M, and from PREFILL_M on the weight dequantized
    once (a Triton kernel) and multiplied by cuBLAS (torch.matmul). A path may be forced.
    split_k (tiled path only): None = time the direct and the K-split launch once per shape on the
    GPU and keep the faster; an int forces it (1 = direct).
    """
    assert bits in (8, 4), "bits must be 8 or 4"
    assert x.dim() == 2 and x.stride(1) == 1 and q.stride(1) == 1, "x and q need contiguous rows"
    assert x.dtype in (torch.float16, torch.bfloat16, torch.float32), f"activations in {x.dtype}?"
    M, K = x.shape
    N = q.shape[0]
    group = group or K
    assert q.shape[1] * (2 if bits == 4 else 1) == K, f"weight {tuple(q.shape)} does not match K={K}"
    assert scale.shape == (N, K // group), f"scale must be ({N}, {K // group})"
    assert bits == 8 or (group in (32, 64, 128) and K % group == 0), "int4 needs group 32, 64 or 128 dividing K"
    path = path or weight_only_path(M, bits, x.dtype)
    assert path in PATHS and (bits == 8 or path != "tiled"), f"path {path!r}?"
    if path == "gemv":
        from .quant_gemv import gemv

        return gemv(x, q, scale, bits, group)
    if path == "dequant":
        w = dequantize(q, scale, "int8" if bits == 8 else "int4", group, out_dtype=x.dtype, halves=bits == 4)
        return torch.matmul(x, w.T)
    if split_k is not None or not x.is_cuda:
        return _w8a16_tiled(x, q, scale, split_k if (split_k or 1) > 1 else 0)
    key = (M, N, K, x.dtype)
    if key not in _WO_CHOICE:   # by GPU time, as the autotuners choose (kernels/tuning.py)
        times = {mode: gpu_time_ms(lambda mode=mode: _w8a16_tiled(x, q, scale, 4 if mode == "split" else 0))
                 for mode in ("direct", "split")}
        _WO_CHOICE[key] = min(times, key=times.get)
    return _w8a16_tiled(x, q, scale, 4 if _WO_CHOICE[key] == "split" else 0)


def weight_only_matmul_ref(x, q, scale, bits, group=None):
    """fp32 torch; int4 q in quantize's layout (before pack_halves)."""
    return x.float() @ dequantize_ref(q, scale, "int8" if bits == 8 else "int4", group).T


def w8a8_matmul(x_q, x_scale, w_q, w_scale, out_dtype=torch.bfloat16):
    """y = (x_q @ w_q.T) * x_scale[:, None] * w_scale[None, :]: int8 operands, int32 accumulation."""
    return _mm.matmul(x_q, w_q.T, a_scale=x_scale.reshape(-1), b_scale=w_scale.reshape(-1), out_dtype=out_dtype)


def w8a8_matmul_ref(x_q, x_scale, w_q, w_scale):
    return _mm.matmul_ref(x_q, w_q.T, a_scale=x_scale.reshape(-1), b_scale=w_scale.reshape(-1))
