"""W4A16 decode GEMV with the nibbles left in packed order: variants "evenodd" and "halves".

The default W4A16 kernel of kernels/quant.py ("interleave") unpacks each weight tile back into k
order (`tl.interleave`, a register shuffle) and multiplies every element by its group's scale (a
per-element scale gather). The kernel here never reorders the weight: it pairs each nibble with
the x it multiplies instead, and x is M rows, not N. For a group of GROUP k starting at kg, with
lo/hi the raw low/high nibbles of byte j (0..15, q + 8, exact in fp16/bf16) and x_lo/x_hi the x
entries they pair with:

    part[m, n] = sum_j x_lo[m, j] * lo[n, j] + x_hi[m, j] * hi[n, j] - 8 * sum_k x[m, kg + k]
    acc[m, n] += part[m, n] * scale[n, group]

two tensor-core dots (or one FMA reduction for M <= 4) per group, the +8 offset folded into one
row sum of x, and one scale per (group, column) applied to the fp32 partial sum.

- variant "evenodd": the packing of `quantize(..., "int4")` (byte j: k = 2j low, 2j + 1 high), so
  x_lo / x_hi are x at the even / odd k of the group: two stride-2 loads of a tile in L1/L2.
- variant "halves": weights repacked once by `pack_halves(q, group)` (byte j of a group: k = j low,
  k = GROUP/2 + j high), so x_lo / x_hi are the first / second half of the group: contiguous loads.

BLOCK_K spans BLOCK_K // GROUP whole groups, unrolled with `tl.static_range`; a group past the end
of K (or of a split-K slice) is masked as a whole, so K only needs to be a multiple of GROUP. Same
launch parameters, autotuner configs and split-K scheme as the default kernel (quant._wo_launch
launches all three). Measured on an H200 (reports/quant/README.md: 0.61x and 0.65x bf16 cuBLAS);
kernels/quant_gemv.py replaced them as the fast W4A16 path (the same "halves" packing).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from mlsyscalc.kernels import quant as _q   # as of 7b06185 (experiments/README.md)
from mlsyscalc.kernels.tuning import gpu_time_ms


@triton.jit(do_not_specialize=["M"])
def _w4_packed_order_kernel(
    x_ptr, w_ptr, s_ptr, y_ptr,          # x (M,K) fp16/bf16/fp32; w (N,K/2) packed int4; s (N, K/GROUP)
    M, N, K,                             # y (M,N): x's dtype, or fp32 summed atomically when SPLIT_K > 1
    stride_xm, stride_wn, stride_sn, stride_ym,
    BITS: tl.constexpr, GROUP: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    USE_DOT: tl.constexpr, SPLIT_K: tl.constexpr,
    X_HALVES: tl.constexpr,              # False: byte j = k 2j, 2j+1 ("evenodd"); True: k j, GROUP/2+j ("halves")
):
    tl.static_assert(BITS == 4, "int4 only")
    tl.static_assert(BLOCK_K % GROUP == 0, "BLOCK_K must hold whole groups")
    dt = x_ptr.dtype.element_ty
    offs_m, offs_n, m_ok, n_ok, k_start, k_end = _q._wo_tile(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K)
    j = tl.arange(0, GROUP // 2)         # byte j of a group
    if X_HALVES:
        k_lo, k_hi = j, GROUP // 2 + j   # the k (within the group) of byte j's low and high nibble
    else:
        k_lo, k_hi = 2 * j, 2 * j + 1
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_start, k_end, BLOCK_K):
        for g in tl.static_range(BLOCK_K // GROUP):
            kg = k0 + g * GROUP                       # first k of this group; K % GROUP == 0
            g_ok = kg < k_end
            x_row = x_ptr + offs_m[:, None] * stride_xm + kg
            x_mask = m_ok[:, None] & g_ok
            x_lo = tl.load(x_row + k_lo[None, :], mask=x_mask, other=0.0)   # (BLOCK_M, GROUP/2)
            x_hi = tl.load(x_row + k_hi[None, :], mask=x_mask, other=0.0)
            byte = tl.load(w_ptr + offs_n[:, None] * stride_wn + kg // 2 + j[None, :],
                           mask=n_ok[:, None] & g_ok, other=0)    # (BLOCK_N, GROUP/2) uint8
            lo = byte & 15
            hi = byte >> 4
            x_sum = tl.sum(x_lo.to(tl.float32) + x_hi.to(tl.float32), axis=1)   # times the +8 of every nibble
            if USE_DOT:   # tensor cores, BLOCK_M >= 16
                part = tl.dot(x_lo, lo.to(dt).T)
                part = tl.dot(x_hi, hi.to(dt).T, part)
            else:         # CUDA cores, M = 1..4: one broadcast multiply-and-sum over both nibbles
                part = tl.sum(x_lo.to(tl.float32)[:, None, :] * lo.to(tl.float32)[None, :, :]
                              + x_hi.to(tl.float32)[:, None, :] * hi.to(tl.float32)[None, :, :], axis=2)
            s = tl.load(s_ptr + offs_n * stride_sn + kg // GROUP, mask=n_ok & g_ok, other=0.0).to(tl.float32)
            acc += (part - 8.0 * x_sum[:, None]) * s[None, :]
    _q._wo_store(y_ptr, acc, offs_m, offs_n, m_ok, n_ok, stride_ym, SPLIT_K)


def pack_halves(q: torch.Tensor, group: int) -> torch.Tensor:
    """Repack int4 weights from `quantize`'s layout (even k low, odd k high) to the "halves" layout.

    q (N, K/2) uint8 -> (N, K/2) uint8 where byte j of each group holds k = j in its low nibble and
    k = group/2 + j in its high nibble. A one-time weight transform, in torch ops (any device).
    """
    N, half_k = q.shape
    assert q.dtype == torch.uint8 and group % 2 == 0 and (2 * half_k) % group == 0, "q (N, K/2) uint8, K % group == 0"
    nib = torch.stack((q & 15, q >> 4), dim=2).reshape(N, -1, group)   # (N, K/group, group) in k order
    lo, hi = nib[..., : group // 2], nib[..., group // 2:]
    return (lo | (hi << 4)).reshape(N, half_k).contiguous()


_KEY = _q._WO_KEY + ["X_HALVES"]
_DIRECT = triton.autotune(_q._wo_configs(False), key=_KEY, do_bench=gpu_time_ms,
                          prune_configs_by={"early_config_prune": _q._wo_prune})(_w4_packed_order_kernel)
_SPLIT = triton.autotune(_q._wo_configs(True), key=_KEY, reset_to_zero=["y_ptr"], do_bench=gpu_time_ms,
                         prune_configs_by={"early_config_prune": _q._wo_prune})(_w4_packed_order_kernel)

# what quant._wo_launch runs (its configs have BLOCK_K 256..1024: whole groups of 32..256)
KERNELS = (_w4_packed_order_kernel, _DIRECT, _SPLIT)
