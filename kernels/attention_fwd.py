"""FlashAttention-2 forward in Triton: online softmax over KV tiles, logsumexp saved for the backward.

Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning" (2023),
Algorithm 1: one program owns BLOCK_M query rows of one head and streams K/V in BLOCK_N tiles,
keeping the running row max m, the running sum l and the unnormalised output in registers.

Layout: q (B, H, S_q, D), k/v (B, H_kv, S_kv, D), any strides with a unit last stride; H_kv
divides H (GQA/MQA: query head h reads kv head h // (H / H_kv)). Causal masking is top-left
aligned (query i sees keys j <= i), as `torch.nn.functional.scaled_dot_product_attention(...,
is_causal=True)` does; KV tiles entirely above the diagonal are never loaded. Lengths need not be
multiples of the tile: only the last (and, causal, the diagonal) tiles pay for masks.

Three load paths share one kernel: plain pointers (any strides; what the CPU interpreter runs in
CI) and Hopper tensor descriptors (TMA, 4-D so that out-of-range rows read as zeros), built either
by each program on the device or once on the host.
"""

from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl

from .matmul_launch import use_scratch_allocator

LOG2E = 1.4426950408889634  # 1 / ln(2): softmax runs in base 2 (exp2 is one MUFU instruction)


def interpreting() -> bool:
    """True when Triton runs kernels through its numpy interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


@triton.jit
def _query_block(H, GROUP, S_q, BLOCK_M: tl.constexpr, CAUSAL: tl.constexpr):
    """This program's query block of one (batch, head): start_m, off_bh, off_b, off_h, off_hkv, offs_m, in_q.
    Causal grids run the longest rows first, so the short ones fill the tail of the grid."""
    start_m = tl.num_programs(0) - 1 - tl.program_id(0) if CAUSAL else tl.program_id(0)
    off_bh = tl.program_id(1)
    off_b = off_bh // H
    off_h = off_bh % H
    off_hkv = off_h // GROUP
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    return start_m, off_bh, off_b, off_h, off_hkv, offs_m, offs_m < S_q


@triton.jit
def _kv_range(start_m, S_kv, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """KV range [0, hi) a query block reads, and full_hi: tiles below it need neither the causal nor the
    bounds mask. BLOCK_M % BLOCK_N == 0 keeps the causal boundary on a tile boundary."""
    if CAUSAL:
        hi = tl.minimum((start_m + 1) * BLOCK_M, S_kv)
        mask_lo = start_m * BLOCK_M
    else:
        hi = S_kv
        mask_lo = S_kv
    return hi, tl.minimum(mask_lo, (S_kv // BLOCK_N) * BLOCK_N)


@triton.jit
def _load_rows(ptrs, start, stride, in_range, MASK: tl.constexpr):
    """Rows start.. of a (rows, D) tile through pointers; MASK: rows outside `in_range` read as zeros."""
    if MASK:
        tile = tl.load(ptrs + start * stride, mask=in_range[:, None], other=0.0)
    else:
        tile = tl.load(ptrs + start * stride)
    return tile


@triton.jit
def _online_softmax(qk, m_i, l_i, offs_m, offs_n, in_kv, qk_scale, MASK: tl.constexpr, CAUSAL: tl.constexpr):
    """One KV tile's step of the online softmax: (p, alpha, l_i, m_ij) from the raw scores qk. MASK: keys
    outside `in_kv` (and, causal, above the diagonal) score -inf; alpha rescales what was summed before."""
    if MASK:
        keep = in_kv[None, :]
        if CAUSAL:
            keep = keep & (offs_n[None, :] <= offs_m[:, None])
        qk = tl.where(keep, qk * qk_scale, -float("inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        qk = qk - m_ij[:, None]
    else:
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        qk = qk * qk_scale - m_ij[:, None]
    p = tl.math.exp2(qk)
    alpha = tl.math.exp2(m_i - m_ij)
    return p, alpha, l_i * alpha + tl.sum(p, 1), m_ij


@triton.jit
def _fwd_inner(acc, l_i, m_i, q, k_ptrs, v_ptrs, k_desc, v_desc, off_b, off_hkv,
               offs_m, lo, hi, S_kv, qk_scale, stride_kn, stride_vn,
               BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
               MASK: tl.constexpr, CAUSAL: tl.constexpr, USE_DESC: tl.constexpr):
    """Fold KV tiles [lo, hi) into the running (acc, l_i, m_i); MASK tiles check bounds/causality."""
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        offs_n = start_n + offs_n0
        in_kv = offs_n < S_kv
        if USE_DESC:
            k = k_desc.load([off_b, off_hkv, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        else:
            k = _load_rows(k_ptrs, start_n, stride_kn, in_kv, MASK)
        qk = tl.dot(q, tl.trans(k))  # (BLOCK_M, BLOCK_N), fp32
        p, alpha, l_i, m_ij = _online_softmax(qk, m_i, l_i, offs_m, offs_n, in_kv, qk_scale, MASK, CAUSAL)
        acc = acc * alpha[:, None]
        if USE_DESC:
            v = v_desc.load([off_b, off_hkv, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        else:
            v = _load_rows(v_ptrs, start_n, stride_vn, in_kv, MASK)
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def attention_fwd_kernel(
    # tensors
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr,
    # strides (batch, head, seq, dim)
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    # sizes
    B, H, H_KV, S_q, S_kv, GROUP, qk_scale,
    # meta
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, USE_DESC: tl.constexpr,
    ELEM_BYTES: tl.constexpr,   # bytes per q/k/v element: in the tuning key, where descriptors hide the dtype
):
    tl.static_assert(BLOCK_M % BLOCK_N == 0)
    start_m, off_bh, off_b, off_h, off_hkv, offs_m, in_q = _query_block(H, GROUP, S_q, BLOCK_M, CAUSAL)
    k_ptrs = None
    v_ptrs = None
    k_desc = None
    v_desc = None
    if USE_DESC == 2:   # descriptors built on the host: q_ptr.. o_ptr are tensor descriptors
        q_desc = q_ptr
        k_desc = k_ptr
        v_desc = v_ptr
        o_desc = o_ptr
    elif USE_DESC == 1:   # built here, once per program (a global write and a fence each)
        q_desc = tl.make_tensor_descriptor(q_ptr, shape=[B, H, S_q, HEAD_DIM],
                                           strides=[stride_qb, stride_qh, stride_qm, 1],
                                           block_shape=[1, 1, BLOCK_M, HEAD_DIM])
        k_desc = tl.make_tensor_descriptor(k_ptr, shape=[B, H_KV, S_kv, HEAD_DIM],
                                           strides=[stride_kb, stride_kh, stride_kn, 1],
                                           block_shape=[1, 1, BLOCK_N, HEAD_DIM])
        v_desc = tl.make_tensor_descriptor(v_ptr, shape=[B, H_KV, S_kv, HEAD_DIM],
                                           strides=[stride_vb, stride_vh, stride_vn, 1],
                                           block_shape=[1, 1, BLOCK_N, HEAD_DIM])
        o_desc = tl.make_tensor_descriptor(o_ptr, shape=[B, H, S_q, HEAD_DIM],
                                           strides=[stride_ob, stride_oh, stride_om, 1],
                                           block_shape=[1, 1, BLOCK_M, HEAD_DIM])
    if USE_DESC:
        q = q_desc.load([off_b, off_h, start_m * BLOCK_M, 0]).reshape(BLOCK_M, HEAD_DIM)
    else:
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, HEAD_DIM)
        k_base = k_ptr + off_b.to(tl.int64) * stride_kb + off_hkv.to(tl.int64) * stride_kh
        v_base = v_ptr + off_b.to(tl.int64) * stride_vb + off_hkv.to(tl.int64) * stride_vh
        k_ptrs = k_base + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd
        v_ptrs = v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd
        q_base = q_ptr + off_b.to(tl.int64) * stride_qb + off_h.to(tl.int64) * stride_qh
        q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd, mask=in_q[:, None], other=0.0)

    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)

    hi, full_hi = _kv_range(start_m, S_kv, BLOCK_M, BLOCK_N, CAUSAL)
    acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, k_ptrs, v_ptrs, k_desc, v_desc, off_b, off_hkv,
                               offs_m, 0, full_hi, S_kv, qk_scale, stride_kn, stride_vn,
                               BLOCK_N, HEAD_DIM, False, CAUSAL, USE_DESC)
    acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, k_ptrs, v_ptrs, k_desc, v_desc, off_b, off_hkv,
                               offs_m, full_hi, hi, S_kv, qk_scale, stride_kn, stride_vn,
                               BLOCK_N, HEAD_DIM, True, CAUSAL, USE_DESC)

    # Epilogue: normalise, and save the natural-log logsumexp of the scaled scores per row.
    acc = acc / l_i[:, None]
    lse = (m_i + tl.math.log2(l_i)) / 1.4426950408889634
    tl.store(lse_ptr + off_bh.to(tl.int64) * S_q + offs_m, lse, mask=in_q)
    if USE_DESC:
        o_desc.store([off_b, off_h, start_m * BLOCK_M, 0], acc.to(o_desc.dtype).reshape(1, 1, BLOCK_M, HEAD_DIM))
    else:
        offs_d = tl.arange(0, HEAD_DIM)
        o_base = o_ptr + off_b.to(tl.int64) * stride_ob + off_h.to(tl.int64) * stride_oh
        tl.store(o_base + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od, acc.to(o_ptr.dtype.element_ty),
                 mask=in_q[:, None])


def _fwd_configs() -> list[triton.Config]:
    # H200 smoke run (d=128, S=4096): (128, 64, 8, 3) won every key; the rest are its neighbours
    # and the small tiles that d=256 needs. maxnreg=128 caps an 8-warp program at 128 registers a
    # thread, so two programs share an SM and one's prologue/epilogue overlaps the other's main
    # loop; without spills only on the descriptor paths (sm_90 compile, d=128: 128x64 holds 155
    # registers uncapped), so _fwd_prune keeps it there.
    shapes = [(128, 64, 8, 3, None), (128, 64, 8, 4, None), (64, 64, 4, 3, None), (64, 32, 4, 3, None),
              (128, 64, 8, 2, 128)]
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s, maxnreg=r,
                          pre_hook=_set_block_shapes) for bm, bn, w, s, r in shapes]


def _set_block_shapes(nargs):
    """Host-built descriptors (USE_DESC == 2) take the tile of the config being launched."""
    if nargs["USE_DESC"] == 2:
        bm, bn, d = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["HEAD_DIM"]
        for name, rows in (("q_ptr", bm), ("k_ptr", bn), ("v_ptr", bn), ("o_ptr", bm)):
            nargs[name].block_shape = [1, 1, rows, d]


def _fwd_prune(configs, named_args, **kwargs):
    """Drop tiles whose K/V pipeline cannot fit Hopper's ~227 KB of shared memory, and the register
    cap where pointer loads would spill under it; if nothing fits, keep the smallest pipeline."""
    def arg(name):
        return named_args[name] if name in named_args else kwargs[name]

    d, desc, elem = arg("HEAD_DIM"), arg("USE_DESC"), arg("ELEM_BYTES")

    def smem(c):
        return (c.kwargs["BLOCK_M"] + 2 * c.kwargs["BLOCK_N"] * c.num_stages) * d * elem

    kept = [c for c in configs if smem(c) <= 200_000 and (c.maxnreg is None or (desc and d <= 128 and elem == 2))]
    return kept or [min(configs, key=smem)]


attention_fwd_tuned = triton.autotune(
    configs=_fwd_configs(),
    key=["S_q", "S_kv", "HEAD_DIM", "CAUSAL", "USE_DESC", "GROUP", "ELEM_BYTES"],
    prune_configs_by={"early_config_prune": _fwd_prune},
)(attention_fwd_kernel)


def can_use_descriptors(*tensors: torch.Tensor) -> bool:
    """TMA needs sm_90+, a unit last stride and 16-byte aligned base and strides."""
    if not all(t.is_cuda for t in tensors) or torch.cuda.get_device_capability(tensors[0].device)[0] < 9:
        return False
    if any(t.numel() == 0 for t in tensors):   # a descriptor needs every dimension positive
        return False
    for t in tensors:
        item = t.element_size()
        if t.stride(-1) != 1 or t.data_ptr() % 16 or any((s * item) % 16 for s in t.stride()[:-1]):
            return False
    return True


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[int, int, int, int, int, int]:
    """Validate (B, H, S, D) shapes; return B, H, H_kv, S_q, S_kv, D."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("q, k, v must be 4-D (batch, heads, seq, head_dim)")
    b, h, s_q, d = q.shape
    b_k, h_kv, s_kv, d_k = k.shape
    if v.shape != k.shape or b_k != b or d_k != d:
        raise ValueError(f"shape mismatch: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if h % h_kv:
        raise ValueError(f"query heads {h} are not a multiple of kv heads {h_kv}")
    if d not in (16, 32, 64, 128, 256):
        raise ValueError(f"head_dim {d} not supported (16, 32, 64, 128, 256)")
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"q, k, v must share one of fp16/bf16/fp32, got {q.dtype}, {k.dtype}, {v.dtype}")
    return b, h, h_kv, s_q, s_kv, d


_PATH_CHOICE: dict = {}   # (shapes, strides, dtype, causal, scale) -> use_desc, timed once on the GPU
_DESC_MODE = {False: 0, True: 1, "host": 2}
PATH_NAMES = {False: "pointers", True: "device descriptors", "host": "host descriptors"}   # use_desc -> words


def _path_key(q, k, v, causal, sm_scale):
    return (q.shape, k.shape, q.stride(), k.stride(), v.stride(), q.dtype, causal, sm_scale)


def chosen_path(q, k, v, causal: bool = False, sm_scale: float | None = None) -> str | None:
    """The load path the default (use_desc=None) settled on for these inputs, once it has run:
    "pointers", "device descriptors" or "host descriptors"; None before."""
    use_desc = _PATH_CHOICE.get(_path_key(q, k, v, causal, sm_scale))
    return None if use_desc is None else PATH_NAMES[use_desc]


def attention_forward(q, k, v, causal: bool = False, sm_scale: float | None = None,
                      config: dict | None = None, use_desc: bool | str | None = None):
    """O, LSE for softmax(Q K^T * sm_scale) V. LSE is (B, H, S_q) float32, natural log.

    config: fixed {"BLOCK_M", "BLOCK_N", "num_warps", "num_stages"[, "maxnreg"]} instead of autotuning
    (the interpreter always uses a fixed one). use_desc: False = pointer loads; True = tensor
    descriptors (TMA) built on the device by every program; "host" = tensor descriptors built once
    on the host and passed to the kernel (no per-program set-up: four global writes and fences);
    None (default) = on a GPU where descriptors apply, the three are tuned and timed once per shape
    (GPU time, kernels/tuning.py) and the fastest is kept (reports/attention/README.md); else pointers.
    """
    if use_desc is None:
        use_desc = False
        if config is None and not interpreting() and q.is_cuda and can_use_descriptors(q, k, v):
            key = _path_key(q, k, v, causal, sm_scale)
            if key not in _PATH_CHOICE:
                from .tuning import gpu_time_ms

                times = {d: gpu_time_ms(lambda d=d: attention_forward(q, k, v, causal, sm_scale, None, d))
                         for d in (False, True, "host")}
                _PATH_CHOICE[key] = min(times, key=times.get)
            use_desc = _PATH_CHOICE[key]
    if use_desc not in _DESC_MODE:
        raise ValueError(f"use_desc must be None, False, True or 'host', not {use_desc!r}")
    b, h, h_kv, s_q, s_kv, d = check_qkv(q, k, v)
    sm_scale = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    o = torch.empty_like(q)
    lse = torch.empty((b, h, s_q), device=q.device, dtype=torch.float32)
    if use_desc and not interpreting() and not can_use_descriptors(q, k, v, o):
        raise ValueError("tensor descriptors need sm_90+, unit last stride and 16-byte aligned strides")
    mode = _DESC_MODE[use_desc]
    tensors = (q, k, v, o)
    if mode == 1:
        use_scratch_allocator()   # device-side descriptors need scratch memory from the caller (triton >= 3.4)
    elif mode == 2:   # block shapes are set per config (_set_block_shapes) before each launch
        from triton.tools.tensor_descriptor import TensorDescriptor

        tensors = tuple(TensorDescriptor.from_tensor(t, [1, 1, 16, d]) for t in tensors)
    if config is None and interpreting():
        config = {"BLOCK_M": 32, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}
    args = (*tensors, lse, *q.stride(), *k.stride(), *v.stride(), *o.stride(),
            b, h, h_kv, s_q, s_kv, h // h_kv, sm_scale * LOG2E)
    if config is None:
        grid = lambda meta: (triton.cdiv(s_q, meta["BLOCK_M"]), b * h)  # noqa: E731
        attention_fwd_tuned[grid](*args, HEAD_DIM=d, CAUSAL=causal, USE_DESC=mode, ELEM_BYTES=q.element_size())
    else:
        if mode == 2:
            _set_block_shapes(dict(zip(("q_ptr", "k_ptr", "v_ptr", "o_ptr"), tensors), USE_DESC=2, HEAD_DIM=d,
                                   BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"]))
        grid = (triton.cdiv(s_q, config["BLOCK_M"]), b * h)
        attention_fwd_kernel[grid](*args, HEAD_DIM=d, CAUSAL=causal, USE_DESC=mode, ELEM_BYTES=q.element_size(),
                                   **config)
    return o, lse


def attention_ref(q, k, v, causal: bool = False, sm_scale: float | None = None):
    """Plain-torch attention in float32: (O in q.dtype, LSE float32). Same conventions as above."""
    h, h_kv, d = q.shape[1], k.shape[1], q.shape[-1]
    sm_scale = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    kf = k.float().repeat_interleave(h // h_kv, dim=1)
    vf = v.float().repeat_interleave(h // h_kv, dim=1)
    scores = (q.float() @ kf.transpose(-1, -2)) * sm_scale  # (B, H, S_q, S_kv)
    if causal:
        s_q, s_kv = scores.shape[-2:]
        keep = torch.ones(s_q, s_kv, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    o = torch.softmax(scores, dim=-1) @ vf
    return o.to(q.dtype), lse
