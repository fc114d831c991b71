"""FlashAttention-2 backward in Triton: dQ, dK, dV recomputed from the saved logsumexp.

Dao (2023), Algorithm 2. With P = exp(S - LSE) rebuilt tile by tile from the forward's LSE and
delta_i = sum_d dO_id * O_id (Eq. in Sec. 3.1.2 of FlashAttention, Dao et al. 2022):
    dV = P^T dO,  dP = dO V^T,  dS = P * (dP - delta),  dQ = scale * dS K,  dK = scale * dS^T Q.
Two kernels avoid atomics: one program per KV tile accumulates dK/dV over all query tiles (and,
for GQA, over all query heads that share the kv head), one program per query tile accumulates
dQ over the KV tiles. That recomputes Q K^T and dO V^T once more than the 5 matmuls counted in
the FLOPs (7 instead of 5), the price of deterministic, atomic-free gradients.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .attention_fwd import LOG2E, _kv_range, _load_rows, _query_block, attention_forward, check_qkv, interpreting


@triton.jit
def attention_bwd_delta_kernel(o_ptr, do_ptr, delta_ptr,
                               stride_ob, stride_oh, stride_om, stride_od,
                               stride_db, stride_dh, stride_dm, stride_dd,
                               H, S_q, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    """delta[b, h, m] = sum_d O[b, h, m, d] * dO[b, h, m, d] in fp32."""
    off_bh = tl.program_id(1)
    off_b = off_bh // H
    off_h = off_bh % H
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    mask = (offs_m < S_q)[:, None]
    o = tl.load(o_ptr + off_b.to(tl.int64) * stride_ob + off_h * stride_oh
                + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od, mask=mask, other=0.0)
    do = tl.load(do_ptr + off_b.to(tl.int64) * stride_db + off_h * stride_dh
                 + offs_m[:, None] * stride_dm + offs_d[None, :] * stride_dd, mask=mask, other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(delta_ptr + off_bh.to(tl.int64) * S_q + offs_m, delta, mask=offs_m < S_q)


@triton.jit
def _dkdv_inner(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptr, delta_ptr, offs_n, lo, hi, S_q,
                qk_scale, stride_qm, stride_dom,
                BLOCK_M: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr):
    """Accumulate dK, dV of one KV tile over query tiles [lo, hi) of one query head."""
    offs_m0 = tl.arange(0, BLOCK_M)
    for start_m in range(lo, hi, BLOCK_M):
        start_m = tl.multiple_of(start_m, BLOCK_M)
        offs_m = start_m + offs_m0
        in_q = offs_m < S_q
        if MASK:
            q = tl.load(q_ptrs + start_m * stride_qm, mask=in_q[:, None], other=0.0)
            do = tl.load(do_ptrs + start_m * stride_dom, mask=in_q[:, None], other=0.0)
            lse2 = tl.load(lse_ptr + offs_m, mask=in_q, other=0.0) * 1.4426950408889634
            delta = tl.load(delta_ptr + offs_m, mask=in_q, other=0.0)
        else:
            q = tl.load(q_ptrs + start_m * stride_qm)
            do = tl.load(do_ptrs + start_m * stride_dom)
            lse2 = tl.load(lse_ptr + offs_m) * 1.4426950408889634
            delta = tl.load(delta_ptr + offs_m)
        qk_t = tl.dot(k, tl.trans(q))  # (BLOCK_N, BLOCK_M)
        p_t = tl.math.exp2(qk_t * qk_scale - lse2[None, :])
        if MASK:
            keep = in_q[None, :]
            if CAUSAL:
                keep = keep & (offs_m[None, :] >= offs_n[:, None])
            p_t = tl.where(keep, p_t, 0.0)
        dv = tl.dot(p_t.to(do.dtype), do, dv)
        dp_t = tl.dot(v, tl.trans(do))
        ds_t = p_t * (dp_t - delta[None, :])
        dk = tl.dot(ds_t.to(q.dtype), q, dk)
    return dk, dv


@triton.jit
def attention_bwd_dkdv_kernel(
    # tensors
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr,
    # strides (batch, head, seq, dim); dO shares q's strides, dK/dV share k's
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_dom, stride_dod,
    # sizes
    H, H_KV, S_q, S_kv, GROUP, qk_scale, sm_scale,
    # meta
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):
    tl.static_assert(BLOCK_N % BLOCK_M == 0)
    start_n = tl.program_id(0) * BLOCK_N
    off_bh = tl.program_id(1)
    off_b = off_bh // H_KV
    off_hkv = off_bh % H_KV
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    in_kv = (offs_n < S_kv)[:, None]
    kv_off = off_b.to(tl.int64) * stride_kb + off_hkv.to(tl.int64) * stride_kh
    k = tl.load(k_ptr + kv_off + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd, mask=in_kv, other=0.0)
    v = tl.load(v_ptr + off_b.to(tl.int64) * stride_vb + off_hkv.to(tl.int64) * stride_vh
                + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd, mask=in_kv, other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)

    # Query tiles: causal ones start at the diagonal; [lo, diag_hi) straddle it (masked), the
    # full tiles follow, and a last partial tile (S_q not a multiple of BLOCK_M) is masked.
    lo = start_n if CAUSAL else 0
    diag_hi = tl.minimum(start_n + BLOCK_N, S_q) if CAUSAL else 0
    full_hi = (S_q // BLOCK_M) * BLOCK_M
    mid_lo = tl.maximum(lo, diag_hi)
    tail_lo = tl.maximum(mid_lo, full_hi)
    for g in range(GROUP):
        off_h = off_hkv * GROUP + g
        q_off = off_b.to(tl.int64) * stride_qb + off_h.to(tl.int64) * stride_qh
        do_off = off_b.to(tl.int64) * stride_dob + off_h.to(tl.int64) * stride_doh
        q_ptrs = q_ptr + q_off + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd
        do_ptrs = do_ptr + do_off + offs_m[:, None] * stride_dom + offs_d[None, :] * stride_dod
        row = (off_b * H + off_h).to(tl.int64) * S_q
        dk, dv = _dkdv_inner(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptr + row, delta_ptr + row, offs_n,
                             lo, diag_hi, S_q, qk_scale, stride_qm, stride_dom, BLOCK_M, True, CAUSAL)
        dk, dv = _dkdv_inner(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptr + row, delta_ptr + row, offs_n,
                             mid_lo, full_hi, S_q, qk_scale, stride_qm, stride_dom, BLOCK_M, False, CAUSAL)
        dk, dv = _dkdv_inner(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptr + row, delta_ptr + row, offs_n,
                             tail_lo, S_q, S_q, qk_scale, stride_qm, stride_dom, BLOCK_M, True, CAUSAL)
    dk = dk * sm_scale
    # dK, dV are laid out like k, v (the launcher allocates them with k's strides).
    tl.store(dk_ptr + kv_off + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd,
             dk.to(dk_ptr.dtype.element_ty), mask=in_kv)
    tl.store(dv_ptr + kv_off + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd,
             dv.to(dv_ptr.dtype.element_ty), mask=in_kv)


@triton.jit
def _dq_inner(dq, q, do, lse2, delta, k_ptrs, v_ptrs, offs_m, lo, hi, S_kv, qk_scale,
              stride_kn, stride_vn, BLOCK_N: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr):
    """Accumulate dQ of one query tile over KV tiles [lo, hi)."""
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        offs_n = start_n + offs_n0
        in_kv = offs_n < S_kv
        k = _load_rows(k_ptrs, start_n, stride_kn, in_kv, MASK)
        v = _load_rows(v_ptrs, start_n, stride_vn, in_kv, MASK)
        qk = tl.dot(q, tl.trans(k))
        p = tl.math.exp2(qk * qk_scale - lse2[:, None])
        if MASK:
            keep = in_kv[None, :]
            if CAUSAL:
                keep = keep & (offs_n[None, :] <= offs_m[:, None])
            p = tl.where(keep, p, 0.0)
        dp = tl.dot(do, tl.trans(v))
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq)
    return dq


@triton.jit
def attention_bwd_dq_kernel(
    # tensors
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr,
    # strides (batch, head, seq, dim); dQ shares q's strides
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_dom, stride_dod,
    # sizes
    H, S_q, S_kv, GROUP, qk_scale, sm_scale,
    # meta
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):
    tl.static_assert(BLOCK_M % BLOCK_N == 0)
    start_m, off_bh, off_b, off_h, off_hkv, offs_m, in_q = _query_block(H, GROUP, S_q, BLOCK_M, CAUSAL)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q_off = off_b.to(tl.int64) * stride_qb + off_h.to(tl.int64) * stride_qh
    q = tl.load(q_ptr + q_off + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                mask=in_q[:, None], other=0.0)
    do = tl.load(do_ptr + off_b.to(tl.int64) * stride_dob + off_h.to(tl.int64) * stride_doh
                 + offs_m[:, None] * stride_dom + offs_d[None, :] * stride_dod, mask=in_q[:, None], other=0.0)
    row = off_bh.to(tl.int64) * S_q
    lse2 = tl.load(lse_ptr + row + offs_m, mask=in_q, other=0.0) * 1.4426950408889634
    delta = tl.load(delta_ptr + row + offs_m, mask=in_q, other=0.0)
    k_ptrs = (k_ptr + off_b.to(tl.int64) * stride_kb + off_hkv.to(tl.int64) * stride_kh
              + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd)
    v_ptrs = (v_ptr + off_b.to(tl.int64) * stride_vb + off_hkv.to(tl.int64) * stride_vh
              + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    hi, full_hi = _kv_range(start_m, S_kv, BLOCK_M, BLOCK_N, CAUSAL)
    dq = _dq_inner(dq, q, do, lse2, delta, k_ptrs, v_ptrs, offs_m, 0, full_hi, S_kv, qk_scale,
                   stride_kn, stride_vn, BLOCK_N, False, CAUSAL)
    dq = _dq_inner(dq, q, do, lse2, delta, k_ptrs, v_ptrs, offs_m, full_hi, hi, S_kv, qk_scale,
                   stride_kn, stride_vn, BLOCK_N, True, CAUSAL)
    dq = dq * sm_scale
    tl.store(dq_ptr + q_off + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
             dq.to(dq_ptr.dtype.element_ty), mask=in_q[:, None])


def _bwd_prune(configs, named_args, **kwargs):
    d = named_args["HEAD_DIM"] if "HEAD_DIM" in named_args else kwargs["HEAD_DIM"]
    kept = [c for c in configs if (c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"]) * d <= 128 * 128 * 128]
    return kept or configs[-1:]


def _configs(shapes) -> list[triton.Config]:
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s) for bm, bn, w, s in shapes]


attention_bwd_dkdv_tuned = triton.autotune(
    configs=_configs([(64, 128, 8, 3), (64, 128, 8, 2), (32, 64, 4, 2)]),  # H200 smoke winners first
    key=["S_q", "S_kv", "HEAD_DIM", "CAUSAL", "GROUP"],
    prune_configs_by={"early_config_prune": _bwd_prune},
)(attention_bwd_dkdv_kernel)

attention_bwd_dq_tuned = triton.autotune(
    configs=_configs([(64, 64, 4, 3), (128, 64, 8, 3), (64, 32, 4, 2)]),
    key=["S_q", "S_kv", "HEAD_DIM", "CAUSAL", "GROUP"],
    prune_configs_by={"early_config_prune": _bwd_prune},
)(attention_bwd_dq_kernel)


def attention_backward(do, q, k, v, o, lse, causal: bool = False, sm_scale: float | None = None,
                       config: dict | None = None):
    """dQ, dK, dV for O = softmax(Q K^T * sm_scale) V given the forward's O and LSE.

    config: fixed {"BLOCK_M", "BLOCK_N", "num_warps", "num_stages"} for both kernels instead of
    autotuning (BLOCK_M == BLOCK_N satisfies both kernels' divisibility rules).
    """
    b, h, h_kv, s_q, s_kv, d = check_qkv(q, k, v)
    sm_scale = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    do = do.contiguous() if do.stride(-1) != 1 else do
    delta = torch.empty_like(lse)
    attention_bwd_delta_kernel[(triton.cdiv(s_q, 64), b * h)](
        o, do, delta, *o.stride(), *do.stride(), h, s_q, HEAD_DIM=d, BLOCK_M=64)
    # dK/dV are stored with k's strides: keep k, v dense so that dk, dv can share them.
    k, v = k.contiguous(), v.contiguous()
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    if config is None and interpreting():
        config = {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}
    common = (*q.stride(), *k.stride(), *v.stride(), *do.stride())
    scales = (sm_scale * LOG2E, sm_scale)
    dkdv_args = (q, k, v, do, lse, delta, dk, dv, *common, h, h_kv, s_q, s_kv, h // h_kv, *scales)
    dq_args = (q, k, v, do, lse, delta, dq, *common, h, s_q, s_kv, h // h_kv, *scales)
    if config is None:
        attention_bwd_dkdv_tuned[lambda m: (triton.cdiv(s_kv, m["BLOCK_N"]), b * h_kv)](
            *dkdv_args, HEAD_DIM=d, CAUSAL=causal)
        attention_bwd_dq_tuned[lambda m: (triton.cdiv(s_q, m["BLOCK_M"]), b * h)](
            *dq_args, HEAD_DIM=d, CAUSAL=causal)
    else:
        attention_bwd_dkdv_kernel[(triton.cdiv(s_kv, config["BLOCK_N"]), b * h_kv)](
            *dkdv_args, HEAD_DIM=d, CAUSAL=causal, **config)
        attention_bwd_dq_kernel[(triton.cdiv(s_q, config["BLOCK_M"]), b * h)](
            *dq_args, HEAD_DIM=d, CAUSAL=causal, **config)
    return dq, dk, dv


class FlashAttention(torch.autograd.Function):
    """Autograd wrapper: Triton forward saves (O, LSE); Triton backward recomputes P from LSE."""

    @staticmethod
    def forward(ctx, q, k, v, causal: bool, sm_scale: float | None):
        o, lse = attention_forward(q, k, v, causal=causal, sm_scale=sm_scale)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.sm_scale = causal, sm_scale
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = attention_backward(do, q, k, v, o, lse, causal=ctx.causal, sm_scale=ctx.sm_scale)
        return dq, dk, dv, None, None


def attention(q, k, v, causal: bool = False, sm_scale: float | None = None) -> torch.Tensor:
    """Differentiable flash attention: q (B, H, S_q, D), k/v (B, H_kv, S_kv, D) -> (B, H, S_q, D)."""
    return FlashAttention.apply(q, k, v, causal, sm_scale)
