"""Quantisation kernels and quantised matmuls in Triton.

- `quantize(x, mode, group)`: symmetric absmax quantisation of each row of x (N, K), per row
  (group = K) or per group of `group` columns. Modes: "int8" (|q| <= 127), "int4" (|q| <= 7, two
  per byte, `(q + 8)` in the low nibble for even k and the high nibble for odd k), "fp8" (e4m3,
  |q| <= 448). Scales are stored in the dtype asked for and q is computed with the *stored*
  scale, so dequantisation is exactly `q * scale`. Rounding is half away from zero.
- `dequantize(q, scale, mode, group)`: the inverse, to bf16/fp16/fp32.
- `weight_only_matmul(x, q, scale, bits, group)`: y (M,N) = x (M,K) @ dequant(W).T for decode
  (M = 1..64). Each program streams a BLOCK_N x K slab of the int8 or packed-int4 weight once,
  unpacks it in registers, and feeds tensor-core dots. int4 (`variant="interleave"`, the default)
  dequantises in registers: nibbles interleaved back into k order, times their group's scale;
  `variant="evenodd"` / `"halves"` (kernels/quant_w4.py) keep nibbles in packed order and pair x
  with them instead ("halves" takes weights repacked by `quant_w4.pack_halves`).
  Autotuned between tensor-core dots and CUDA-core multiply-and-sum (M <= 4), tile shapes, and a
  split of K over programs with fp32 atomics (`split_k`) for weights too narrow to fill the GPU.
  `variant="gemv"` (kernels/quant_gemv.py) is the faster one-launch decode kernel, and the default
  for int8 weights with M <= 16 on a GPU; int4 needs its "halves" packing, so int4 asks for it.
- W8A8: `w8a8_matmul` = the persistent TMA matmul of kernels/matmul.py on int8 inputs, int32
  accumulation, per-row x per-column scales in the epilogue.
- `*_ref`: plain torch. Benchmark cases against torch baselines: kernels/quant_bench.py.
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


@triton.jit
def _wo_store(y_ptr, acc, offs_m, offs_n, m_ok, n_ok, stride_ym, SPLIT_K: tl.constexpr):
    """y tile = acc in y's dtype, or fp32 added atomically to the other K slices' partial sums."""
    out = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :]
    if SPLIT_K == 1:
        tl.store(out, acc.to(y_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])
    else:
        tl.atomic_add(out, acc, mask=m_ok[:, None] & n_ok[None, :], sem="relaxed")


@triton.jit(do_not_specialize=["M"])
def _weight_only_kernel(
    x_ptr, w_ptr, s_ptr, y_ptr,          # x (M,K) fp16/bf16; w (N,K) int8 or (N,K/2) packed int4; s (N, K/GROUP)
    M, N, K,                             # y (M,N): x's dtype, or fp32 summed atomically when SPLIT_K > 1
    stride_xm, stride_wn, stride_sn, stride_ym,
    BITS: tl.constexpr, GROUP: tl.constexpr,
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
        if BITS == 8:
            w = tl.load(w_ptr + offs_n[:, None] * stride_wn + k[None, :], mask=n_ok[:, None] & k_ok[None, :],
                        other=0).to(tl.float32)
        else:  # two int4 per byte: low nibble = even k, high = odd k; each group of GROUP k has a scale
            kh = k0 // 2 + tl.arange(0, BLOCK_K // 2)
            byte = tl.load(w_ptr + offs_n[:, None] * stride_wn + kh[None, :],
                           mask=n_ok[:, None] & (kh < k_end // 2)[None, :], other=0)
            w = tl.interleave((byte & 15).to(tl.float32) - 8.0, (byte >> 4).to(tl.float32) - 8.0)
            s = tl.load(s_ptr + offs_n[:, None] * stride_sn + k[None, :] // GROUP, mask=n_ok[:, None] & k_ok[None, :],
                        other=0.0)
            w = w * s.to(tl.float32)
        if USE_DOT:   # tensor cores: BLOCK_M >= 16, worth it from a few rows of x up
            acc = tl.dot(x, w.to(dt).T, acc)
        else:         # CUDA cores: a broadcast multiply and a row sum, for M = 1..4
            acc += tl.sum(x.to(tl.float32)[:, None, :] * w[None, :, :], axis=2)
    if BITS == 8:  # per-channel scale, once at the end
        acc = acc * tl.load(s_ptr + offs_n * stride_sn, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    _wo_store(y_ptr, acc, offs_m, offs_n, m_ok, n_ok, stride_ym, SPLIT_K)


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


_WO_KEY = ["M", "N", "K", "BITS", "GROUP"]
_WO_DIRECT = triton.autotune(_wo_configs(False), key=_WO_KEY, do_bench=gpu_time_ms, prune_configs_by={"early_config_prune": _wo_prune})(
    _weight_only_kernel)
_WO_SPLIT = triton.autotune(_wo_configs(True), key=_WO_KEY, reset_to_zero=["y_ptr"], do_bench=gpu_time_ms,
                            prune_configs_by={"early_config_prune": _wo_prune})(_weight_only_kernel)
_WO_CHOICE: dict = {}   # (M, N, K, bits, group, dtype, variant) -> "direct" | "split", measured on first use
W4_VARIANTS = ("interleave", "evenodd", "halves", "gemv")


def _wo_launch(x, q, scale, bits, group, split, variant="interleave"):
    """One launch of a variant's kernel: its autotuners on a GPU, fixed small tiles under the interpreter."""
    if variant == "interleave":
        kernel, direct, split_tuner = _weight_only_kernel, _WO_DIRECT, _WO_SPLIT
        block_k, extra = (max(64, group) if bits == 4 else 64), {}
    else:   # interpreter: two groups a tile, so CPU tests cover a group past K
        from .quant_w4 import KERNELS

        kernel, direct, split_tuner = KERNELS
        block_k, extra = 2 * group, {"X_HALVES": variant == "halves"}
    M, K = x.shape
    N = q.shape[0]
    y = torch.zeros((M, N), device=x.device, dtype=torch.float32) if split else \
        torch.empty((M, N), device=x.device, dtype=x.dtype)
    args = (x, q, scale, y, M, N, K, x.stride(0), q.stride(0), scale.stride(0), y.stride(0))
    if os.environ.get("TRITON_INTERPRET") == "1" or not x.is_cuda:
        use_dot = M > 4
        bm = 16 if use_dot else triton.next_power_of_2(M)
        grid = (triton.cdiv(N, 16), triton.cdiv(M, bm), split or 1)
        kernel[grid](*args, BITS=bits, GROUP=group, BLOCK_M=bm, BLOCK_N=16, BLOCK_K=block_k,
                     USE_DOT=use_dot, SPLIT_K=split or 1, **extra)
    else:
        def grid(meta):
            return (triton.cdiv(N, meta["BLOCK_N"]), triton.cdiv(M, meta["BLOCK_M"]), meta["SPLIT_K"])
        (split_tuner if split else direct)[grid](*args, BITS=bits, GROUP=group, **extra)
    return y.to(x.dtype) if split else y


def weight_only_matmul(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, bits: int,
                       group: int | None = None, split_k: int | None = None,
                       variant: str | None = None) -> torch.Tensor:
    """y (M,N) = x (M,K) @ dequant(q, scale).T; bits 8 (per-channel, scale (N,1)) or 4 (scale (N, K/group)).

    split_k: None = choose by timing both launches once per shape on the GPU (direct store vs K
    split over programs with fp32 atomics); an int forces it (1 = direct).
    variant: "interleave" (this module's kernel), "evenodd" or "halves" (int4 only, kernels/quant_w4.py;
    "halves" needs q repacked by `quant_w4.pack_halves(q, group)`), "gemv" (int8 and int4,
    M <= 16): kernels/quant_gemv.py, one launch, conversions by bit operations; int4 needs the "halves" packing.
    None (default): "gemv" for int8 weights with M <= 16 rows of fp16/bf16 x on a GPU (the faster one
    measured, reports/quant/README.md), else "interleave" (int4 keeps the packing `quantize` writes).
    """
    assert bits in (8, 4), "bits must be 8 or 4"
    if variant is None:
        variant = "gemv" if bits == 8 and split_k is None and x.is_cuda and x.dim() == 2 and x.shape[0] <= 16 \
            and x.dtype in (torch.float16, torch.bfloat16) else "interleave"
    assert x.dim() == 2 and x.stride(1) == 1 and q.stride(1) == 1, "x and q need contiguous rows"
    assert x.dtype in (torch.float16, torch.bfloat16, torch.float32), f"activations in {x.dtype}?"
    M, K = x.shape
    N = q.shape[0]
    group = group or K
    assert q.shape[1] * (2 if bits == 4 else 1) == K, f"weight {tuple(q.shape)} does not match K={K}"
    assert scale.shape == (N, K // group), f"scale must be ({N}, {K // group})"
    assert variant in W4_VARIANTS and (bits == 4 or variant in ("interleave", "gemv")), f"variant {variant!r}?"
    if variant == "gemv":
        from .quant_gemv import gemv

        return gemv(x, q, scale, bits, group)
    assert bits == 8 or (group in (32, 64, 128, 256) and K % (256 if variant == "interleave" else group) == 0), \
        "int4 needs group 32..256 and K % 256 == 0 (evenodd, halves: K % group == 0)"
    if split_k is not None or not x.is_cuda:
        return _wo_launch(x, q, scale, bits, group, split_k if (split_k or 1) > 1 else 0, variant)
    key = (M, N, K, bits, group, x.dtype, variant)
    if key not in _WO_CHOICE:   # by GPU time, as the autotuners choose (kernels/tuning.py)
        times = {mode: gpu_time_ms(lambda mode=mode: _wo_launch(x, q, scale, bits, group, mode == "split", variant))
                 for mode in ("direct", "split")}
        _WO_CHOICE[key] = min(times, key=times.get)
    return _wo_launch(x, q, scale, bits, group, _WO_CHOICE[key] == "split", variant)


def weight_only_matmul_ref(x, q, scale, bits, group=None):
    return x.float() @ dequantize_ref(q, scale, "int8" if bits == 8 else "int4", group).T


def w8a8_matmul(x_q, x_scale, w_q, w_scale, out_dtype=torch.bfloat16):
    """y = (x_q @ w_q.T) * x_scale[:, None] * w_scale[None, :]: int8 operands, int32 accumulation."""
    return _mm.matmul(x_q, w_q.T, a_scale=x_scale.reshape(-1), b_scale=w_scale.reshape(-1), out_dtype=out_dtype)


def w8a8_matmul_ref(x_q, x_scale, w_q, w_scale):
    return _mm.matmul_ref(x_q, w_q.T, a_scale=x_scale.reshape(-1), b_scale=w_scale.reshape(-1))
