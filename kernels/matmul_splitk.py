"""Split-K matmul for problems with fewer output tiles than SMs (small squares, decode-like M).

The persistent kernel in matmul.py gives each SM whole output tiles; at 1024^3 with 128x128
tiles that is 64 tiles for 132 SMs, so half the card idles. Here each program computes one
output tile over one slice of K (grid = tiles x SPLIT_K, smaller tiles in the autotune space),
and the K-slices are summed by a second kernel in a fixed order, so the result is deterministic
(no atomics), and the epilogue (scales, bias, activation) runs once, after the sum.

- `_splitk_partial_kernel`: one (tile, K-slice) per program. A and B come through tensor
  descriptors (USE_TMA, laid out as in matmul.py) or masked pointer loads. SPLIT_K == 1 skips
  the workspace: the program applies the epilogue and writes C (a non-persistent small-tile path).
- `_splitk_reduce_kernel`: sums the SPLIT_K fp32 (int32 for int8) partials, epilogue, writes C.
- `choose_split_k()`: the "auto" rule; `launch_splitk()`: workspace, both launches.

K-slices are whole BLOCK_K tiles: slice s covers k-tiles [s * per, min(k_tiles, (s+1) * per))
with per = cdiv(k_tiles, SPLIT_K); trailing slices may be empty and then write zeros.
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import matmul_launch
from .matmul_tiles import _SMALL_TILE, _block_shapes, _epilogue, _interpreting, _load_ab, _tile_coords
from .tuning import gpu_time_ms

SPLITK_TILE = 128           # the tile edge the "auto" rule counts tiles with (the persistent kernel's smallest)
MIN_K_PER_SPLIT = 256       # below this a slice's loads no longer pay for its fp32 workspace write


@triton.jit
def _splitk_partial_kernel(
    a_in, b_in,                              # A, B: tensor descriptors (USE_TMA) or pointers
    out_ptr,                                 # SPLIT_K == 1: C (M,N); else workspace (SPLIT_K, M, N)
    a_scale_ptr, b_scale_ptr, bias_ptr,      # epilogue inputs, read only when SPLIT_K == 1
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn,   # pointer loads only
    stride_os, stride_om, stride_on,              # out: split, row, column
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr, USE_TMA: tl.constexpr, A_T: tl.constexpr, B_NK: tl.constexpr,
    SCALE: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr, INT8: tl.constexpr,
):
    ACC_DTYPE: tl.constexpr = tl.int32 if INT8 else tl.float32
    pid_m, pid_n = _tile_coords(tl.program_id(axis=0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    pid_k = tl.program_id(axis=1)
    k_tiles = tl.cdiv(K, BLOCK_K)
    per = tl.cdiv(k_tiles, SPLIT_K)
    k_lo = pid_k * per
    k_hi = tl.minimum(k_tiles, k_lo + per)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_DTYPE)
    for ki in range(k_lo, k_hi):
        off_k = ki * BLOCK_K
        if USE_TMA:  # out-of-range rows/columns/k arrive as zeros
            if A_T:
                a = a_in.load([off_k, pid_m * BLOCK_M]).T
            else:
                a = a_in.load([pid_m * BLOCK_M, off_k])
            if B_NK:
                b = b_in.load([pid_n * BLOCK_N, off_k]).T
            else:
                b = b_in.load([off_k, pid_n * BLOCK_N])
        else:
            a, b = _load_ab(a_in, b_in, offs_m, offs_n, off_k + offs_k, M, N, K,
                            stride_am, stride_ak, stride_bk, stride_bn)
        acc = tl.dot(a, b, acc, out_dtype=ACC_DTYPE)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if SPLIT_K == 1:
        acc = _epilogue(acc.to(tl.float32), offs_m, offs_n, M, N, a_scale_ptr, b_scale_ptr, bias_ptr,
                        SCALE, HAS_BIAS, ACT)
        out = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on
        tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=mask)
    else:  # int64 offsets: SPLIT_K * M * N may pass 2^31
        out = out_ptr + pid_k.to(tl.int64) * stride_os + offs_m.to(tl.int64)[:, None] * stride_om \
            + offs_n[None, :] * stride_on
        tl.store(out, acc, mask=mask)


@triton.jit
def _splitk_reduce_kernel(
    ws_ptr, c_ptr,                           # workspace (SPLIT_K, M, N) contiguous; C (M,N) any strides
    a_scale_ptr, b_scale_ptr, bias_ptr,
    M, N, stride_ws, stride_cm, stride_cn,   # stride_ws = M * N
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr,
    SCALE: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr, INT8: tl.constexpr,
):
    offs_m = tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    ws = ws_ptr + offs_m.to(tl.int64)[:, None] * N + offs_n[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32 if INT8 else tl.float32)
    for _ in tl.static_range(SPLIT_K):  # fixed order: the same sum on every run
        acc += tl.load(ws, mask=mask, other=0)
        ws += stride_ws                     # pointer steps stay 64-bit even where s * M * N would not
    acc = _epilogue(acc.to(tl.float32), offs_m, offs_n, M, N, a_scale_ptr, b_scale_ptr, bias_ptr,
                    SCALE, HAS_BIAS, ACT)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn,
             acc.to(c_ptr.dtype.element_ty), mask=mask)


def _set_block_shapes(nargs):
    if nargs["USE_TMA"]:
        nargs["a_in"].block_shape, nargs["b_in"].block_shape, _ = _block_shapes(nargs)


def _tuned(tiles):
    configs = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}, num_stages=s,
                             num_warps=w, pre_hook=_set_block_shapes) for bm, bn, bk, s, w in tiles]
    key = ["M", "N", "K", "A_T", "B_NK", "SPLIT_K", "USE_TMA", "SCALE", "INT8"]
    return triton.autotune(configs, key=key, do_bench=gpu_time_ms)(_splitk_partial_kernel)


# Smaller tiles than the persistent kernel's: more programs for the few-tile shapes this path is for.
_PARTIAL = {
    1: _tuned([(128, 128, 128, 4, 8), (128, 128, 128, 4, 4), (64, 128, 128, 4, 4), (128, 64, 128, 4, 4),
               (64, 64, 128, 4, 4)]),
    2: _tuned([(128, 128, 64, 4, 8), (128, 128, 64, 4, 4), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4),
               (64, 64, 64, 4, 4)]),
    4: _tuned([(64, 64, 32, 4, 4), (128, 64, 32, 3, 4), (64, 128, 32, 3, 4)]),
}


def choose_split_k(M: int, N: int, K: int, num_sms: int) -> int | None:
    """The "auto" rule. None: 128x128 tiles already fill the SMs, keep the persistent kernel.
    Else the largest power of two with tiles * split <= num_sms and K / split >= MIN_K_PER_SPLIT
    (1 when K is too short to split: small tiles, one program per tile)."""
    tiles = triton.cdiv(M, SPLITK_TILE) * triton.cdiv(N, SPLITK_TILE)
    if tiles >= num_sms:
        return None
    split = 1
    while tiles * split * 2 <= num_sms and K // (split * 2) >= MIN_K_PER_SPLIT:
        split *= 2
    return split


def launch_splitk(a, b, c, a_in, b_in, scales, split_k: int, use_tma: bool, flags: dict, *,
                  a_t: bool = False, b_nk: bool = False, cache: bool = True) -> None:
    """C = epilogue(sum over K-slices of A @ B). a_in/b_in: descriptors (use_tma) or a, b themselves."""
    import torch

    M, K = a.shape
    N = b.shape[1]
    ws = c if split_k == 1 else torch.empty((split_k, M, N), device=a.device,
                                            dtype=torch.int32 if flags["INT8"] else torch.float32)
    out_strides = (0, *c.stride()) if split_k == 1 else ws.stride()
    args = (a_in, b_in, ws, *scales, M, N, K, *a.stride(), *b.stride(), *out_strides)
    consts = dict(SPLIT_K=split_k, USE_TMA=use_tma, A_T=a_t, B_NK=b_nk, **flags)
    if _interpreting():
        if use_tma:
            _set_block_shapes(dict(_SMALL_TILE, a_in=a_in, b_in=b_in, USE_TMA=True, A_T=a_t, B_NK=b_nk))
        grid = (triton.cdiv(M, _SMALL_TILE["BLOCK_M"]) * triton.cdiv(N, _SMALL_TILE["BLOCK_N"]), split_k)
        _splitk_partial_kernel[grid](*args, **_SMALL_TILE, **consts)
    else:
        def grid(meta):
            return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]), split_k)

        matmul_launch.launch(_PARTIAL[a.element_size()], grid, args, consts, cache=cache)
    if split_k == 1:
        return
    bm, bn = (16, 32) if _interpreting() else ((16, 256) if M <= 16 else (32, 128))
    grid = (triton.cdiv(M, bm), triton.cdiv(N, bn))
    matmul_launch.launch(_splitk_reduce_kernel, grid, (ws, c, *scales, M, N, ws.stride(0), *c.stride()),
                         dict(BLOCK_M=bm, BLOCK_N=bn, SPLIT_K=split_k, num_warps=4, **flags), cache=cache)
