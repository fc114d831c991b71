"""Decode attention in Triton: a few query tokens against a long KV cache, split over the KV length.

Flash-decoding (Dao, Haziza, Massa, Sizov, "Flash-Decoding for long-context inference", 2023):
each program streams one slice of one sequence's cache and writes a partial output with its
logsumexp; a second kernel rescales and sums the slices. GQA-aware: one program serves all query
heads (and query tokens) that share a kv head, stacked as the rows of one tensor-core tile, so
each K/V byte is read once. The cache is either contiguous, k (B, H_kv, S_max, D) with any
strides, or paged as in vLLM (Kwon et al., "Efficient Memory Management for Large Language Model
Serving with PagedAttention", SOSP 2023): k (num_blocks, PAGE_SIZE, H_kv, D) read through a
block table (B, max_blocks) of int32 block ids, PAGE_SIZE a power of two (16..256).

Query token t of n_q sits at position seqlen - n_q + t and sees keys j <= that position
(bottom-right causal, so speculative/multi-token decode works); n_q = 1 sees the whole cache.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .attention_fwd import LOG2E, interpreting
from .matmul_launch import launch, remember, run_entry, sm_count
from .tuning import gpu_time_ms


@triton.jit
def attention_decode_split_kernel(
    # tensors
    q_ptr, k_ptr, v_ptr, table_ptr, seqlens_ptr, o_ptr, part_o_ptr, part_lse_ptr,
    # strides: q/o (batch, head, token, dim); k/v (batch | block, head, token | slot, dim)
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_ot, stride_od,
    stride_table,
    # sizes
    H, N_Q, GROUP, TOKENS_PER_SPLIT, NUM_SPLITS, qk_scale, MAX_LEN,
    # meta
    HEAD_DIM: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    PAGED: tl.constexpr, PAGE_SIZE: tl.constexpr, SINGLE: tl.constexpr, HAS_LENS: tl.constexpr,
):
    split = tl.program_id(0)
    off_hkv = tl.program_id(1)
    off_b = tl.program_id(2)
    if HAS_LENS:
        seqlen = tl.load(seqlens_ptr + off_b)
    else:  # every sequence fills the cache
        seqlen = MAX_LEN

    # Rows of the tile: (query head within the group, query token), padded to BLOCK_H >= 16.
    rows = tl.arange(0, BLOCK_H)
    in_rows = rows < GROUP * N_Q
    head = off_hkv * GROUP + rows // N_Q
    tok = rows % N_Q
    q_pos = seqlen - N_Q + tok
    offs_d = tl.arange(0, HEAD_DIM)
    q_row = off_b.to(tl.int64) * stride_qb + head.to(tl.int64) * stride_qh + tok * stride_qt
    q = tl.load(q_ptr + q_row[:, None] + offs_d[None, :] * stride_qd, mask=in_rows[:, None], other=0.0)

    m_i = tl.full([BLOCK_H], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, HEAD_DIM], tl.float32)
    lo = split * TOKENS_PER_SPLIT
    hi = tl.minimum(lo + TOKENS_PER_SPLIT, seqlen)
    offs_n0 = tl.arange(0, BLOCK_N)
    if PAGED:
        k_head = k_ptr + off_hkv.to(tl.int64) * stride_kh
        v_head = v_ptr + off_hkv.to(tl.int64) * stride_vh
        table_row = table_ptr + off_b.to(tl.int64) * stride_table
    else:
        k_head = k_ptr + off_b.to(tl.int64) * stride_kb + off_hkv.to(tl.int64) * stride_kh
        v_head = v_ptr + off_b.to(tl.int64) * stride_vb + off_hkv.to(tl.int64) * stride_vh
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        in_kv = offs_n < hi
        if PAGED:
            block = tl.load(table_row + offs_n // PAGE_SIZE, mask=in_kv, other=0).to(tl.int64)
            slot = offs_n % PAGE_SIZE
            k_off = block * stride_kb + slot * stride_kn
            v_off = block * stride_vb + slot * stride_vn
        else:
            k_off = offs_n.to(tl.int64) * stride_kn
            v_off = offs_n.to(tl.int64) * stride_vn
        k = tl.load(k_head + k_off[:, None] + offs_d[None, :] * stride_kd, mask=in_kv[:, None], other=0.0)
        qk = tl.dot(q, tl.trans(k))  # (BLOCK_H, BLOCK_N)
        keep = in_kv[None, :] & (offs_n[None, :] <= q_pos[:, None])
        qk = tl.where(keep, qk * qk_scale, -float("inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        m_safe = tl.where(m_ij == -float("inf"), 0.0, m_ij)  # a row with nothing visible yet
        p = tl.math.exp2(qk - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_head + v_off[:, None] + offs_d[None, :] * stride_vd, mask=in_kv[:, None], other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_ij

    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    if SINGLE:
        o_row = off_b.to(tl.int64) * stride_ob + head.to(tl.int64) * stride_oh + tok * stride_ot
        out = (acc / l_safe[:, None]).to(o_ptr.dtype.element_ty)
        tl.store(o_ptr + o_row[:, None] + offs_d[None, :] * stride_od, out, mask=in_rows[:, None])
    else:
        # Partial results, (B, H, N_Q, NUM_SPLITS[, D]) contiguous; lse in base 2.
        part = ((off_b * H + head).to(tl.int64) * N_Q + tok) * NUM_SPLITS + split
        lse = tl.where(l_i == 0.0, -float("inf"), m_i + tl.math.log2(l_safe))
        tl.store(part_lse_ptr + part, lse, mask=in_rows)
        tl.store(part_o_ptr + part[:, None] * HEAD_DIM + offs_d[None, :], acc / l_safe[:, None],
                 mask=in_rows[:, None])


@triton.jit
def attention_decode_reduce_kernel(
    part_o_ptr, part_lse_ptr, o_ptr,
    stride_ob, stride_oh, stride_ot, stride_od,
    H, N_Q, NUM_SPLITS,
    HEAD_DIM: tl.constexpr, BLOCK_S: tl.constexpr,
):
    """o[row] = sum_s exp2(lse_s - lse) * o_s over the splits of one (batch, head, token) row."""
    row = tl.program_id(0)
    off_b = row // (H * N_Q)
    head = (row // N_Q) % H
    tok = row % N_Q
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, HEAD_DIM)
    in_s = offs_s < NUM_SPLITS
    base = row.to(tl.int64) * NUM_SPLITS
    lse = tl.load(part_lse_ptr + base + offs_s, mask=in_s, other=-float("inf"))
    w = tl.math.exp2(lse - tl.max(lse, 0))
    parts = tl.load(part_o_ptr + (base + offs_s)[:, None] * HEAD_DIM + offs_d[None, :], mask=in_s[:, None], other=0.0)
    out = tl.sum(parts * w[:, None], 0) / tl.sum(w, 0)
    o_off = off_b.to(tl.int64) * stride_ob + head * stride_oh + tok * stride_ot
    tl.store(o_ptr + o_off + offs_d * stride_od, out.to(o_ptr.dtype.element_ty))


def _decode_configs() -> list[triton.Config]:
    # (64, 4, 2) and (32, 2, 4) were the fastest at B64 x KV8 x 1k-4k tokens on one H200
    # (experiments/probe_configs.py decode): shallower pipelines fit more programs on an SM
    shapes = [(64, 4, 3), (64, 4, 4), (128, 8, 3), (32, 4, 4), (64, 4, 2), (32, 2, 4), (128, 4, 3)]
    return [triton.Config({"BLOCK_N": bn}, num_warps=w, num_stages=s) for bn, w, s in shapes]


attention_decode_tuned = triton.autotune(
    configs=_decode_configs(),
    key=["N_Q", "GROUP", "HEAD_DIM", "PAGED", "PAGE_SIZE", "TOKENS_PER_SPLIT", "NUM_SPLITS", "HAS_LENS"],
    do_bench=gpu_time_ms,   # GPU time on a cold L2: the host's launch cost no longer decides between configs
)(attention_decode_split_kernel)

SPLIT_ALIGN = 256  # tokens per split are a multiple of every BLOCK_N the autotuner tries


def choose_splits(batch: int, kv_heads: int, max_len: int, sm_count: int) -> tuple[int, int]:
    """(num_splits, tokens_per_split): about 4 programs per SM (splits rounded to the nearest count),
    >= 512 tokens each. So one split once batch x kv_heads programs come near that: a second split
    then costs more (partials, the reducing launch) than it evens out (B64 x KV8 = 512 programs on
    132 SMs: 2 splits 6-8% slower than 1 on one H200, experiments/probe_configs.py decode)."""
    want = max(1, round(4 * sm_count / (batch * kv_heads)))
    most = max(1, math.ceil(max_len / 512))
    splits = min(want, most)
    per_split = math.ceil(math.ceil(max_len / splits) / SPLIT_ALIGN) * SPLIT_ALIGN
    return math.ceil(max_len / per_split), per_split


def _check_decode(q, k_cache, v_cache, block_table):
    if q.dim() != 4:
        raise ValueError("q must be (batch, heads, n_q, head_dim)")
    if k_cache.shape != v_cache.shape or k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        raise ValueError("k_cache and v_cache must match each other and q's dtype")
    b, h, n_q, d = q.shape
    if block_table is None:
        h_kv, max_len = k_cache.shape[1], k_cache.shape[2]
        if k_cache.shape[0] != b:
            raise ValueError("contiguous cache must be (batch, kv_heads, max_len, head_dim)")
    else:
        page, h_kv = k_cache.shape[1], k_cache.shape[2]
        if page & (page - 1) or not 1 <= page <= 1024 or block_table.shape[0] != b:
            raise ValueError("paged cache must be (blocks, page_size (power of two), kv_heads, head_dim)")
        max_len = block_table.shape[1] * page
    if k_cache.shape[-1] != d or h % h_kv:
        raise ValueError(f"head_dim or head counts do not match: q {tuple(q.shape)}, cache {tuple(k_cache.shape)}")
    return b, h, h_kv, n_q, d, max_len


def decode_attention(q, k_cache, v_cache, cache_seqlens=None, block_table=None, sm_scale: float | None = None,
                     num_splits: int | None = None, config: dict | None = None):
    """Attention of q (B, H, n_q, D) over a contiguous or paged KV cache; returns (B, H, n_q, D).

    cache_seqlens: (B,) int32 valid lengths (the n_q new tokens included); default: full cache.
    block_table: (B, max_blocks) int32 for a paged cache (k_cache (blocks, page, H_kv, D)).
    Launches go through matmul_launch's cache: a repeated call costs one allocation and one or two
    direct kernel launches on the host.
    """
    fast = config is None and q.is_cuda
    if fast:   # a repeated call: one key, two allocations, one or two launches (see _FAST)
        key = (q.shape, q.stride(), q.dtype, k_cache.shape, k_cache.stride(), v_cache.stride(), q.device,
               None if block_table is None else (block_table.shape, block_table.stride(), block_table.dtype,
                                                 block_table.data_ptr() % 16 == 0),
               None if cache_seqlens is None else (cache_seqlens.dtype, cache_seqlens.data_ptr() % 16 == 0),
               sm_scale, num_splits, q.data_ptr() % 16 == 0, k_cache.data_ptr() % 16 == 0, v_cache.data_ptr() % 16 == 0)
        hit = _FAST.get(key)
        if hit is not None:
            return _run_fast(hit, q, k_cache, v_cache, cache_seqlens, block_table)
    b, h, h_kv, n_q, d, max_len = _check_decode(q, k_cache, v_cache, block_table)
    sm_scale = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    group = h // h_kv
    paged = block_table is not None
    if paged:
        table, page = block_table if block_table.dtype == torch.int32 else block_table.to(torch.int32), k_cache.shape[1]
        kst = (k_cache.stride(0), k_cache.stride(2), k_cache.stride(1), k_cache.stride(3))
        vst = (v_cache.stride(0), v_cache.stride(2), v_cache.stride(1), v_cache.stride(3))
    else:
        table, page = q, 1  # table unused
        kst, vst = k_cache.stride(), v_cache.stride()
    has_lens = cache_seqlens is not None
    if has_lens and cache_seqlens.dtype != torch.int32:
        cache_seqlens = cache_seqlens.to(torch.int32)
    sms = 132 if interpreting() else sm_count(q.device)
    if config is None and interpreting():
        config = {"BLOCK_N": 32, "num_warps": 4, "num_stages": 1}
    if num_splits is None:
        num_splits, per_split = choose_splits(b, h_kv, max_len, sms)
    else:  # splits are whole tiles: any BLOCK_N the autotuner may pick divides them
        align = config["BLOCK_N"] if config else SPLIT_ALIGN
        per_split = math.ceil(math.ceil(max_len / num_splits) / align) * align
        num_splits = math.ceil(max_len / per_split)
    o = torch.empty_like(q)
    single = num_splits == 1
    rows = b * h * n_q
    part_o, part_lse = _partials(q, rows * num_splits * d, rows * num_splits, single)
    args = (q, k_cache, v_cache, table, cache_seqlens if has_lens else q, o, part_o, part_lse,
            *q.stride(), *kst, *vst, *o.stride(), table.stride(0),
            h, n_q, group, per_split, num_splits, sm_scale * LOG2E, max_len)
    meta = dict(HEAD_DIM=d, BLOCK_H=max(16, triton.next_power_of_2(group * n_q)),
                PAGED=paged, PAGE_SIZE=page, SINGLE=single, HAS_LENS=has_lens)
    grid = (num_splits, h_kv, b)
    entry = reduce_entry = None
    if config is None:
        entry = launch(attention_decode_tuned, grid, args, meta)
    else:
        attention_decode_split_kernel[grid](*args, **meta, **config)
    if not single:
        reduce_args = (part_o, part_lse, o, *o.stride(), h, n_q, num_splits)
        reduce_meta = dict(HEAD_DIM=d, BLOCK_S=max(2, triton.next_power_of_2(num_splits)))
        if interpreting():
            attention_decode_reduce_kernel[(rows,)](*reduce_args, **reduce_meta)
        else:
            reduce_entry = launch(attention_decode_reduce_kernel, (rows,), reduce_args, reduce_meta)
    if fast and entry is not None and (single or reduce_entry is not None) and not interpreting() and \
            (block_table is None or block_table.dtype == torch.int32) and \
            (cache_seqlens is None or cache_seqlens.dtype == torch.int32):   # tensors used as given
        remember(_FAST, key, (entry, reduce_entry, rows * num_splits * d, rows * num_splits, args[8:],
                              (h, n_q, num_splits)))
    return o


# (shapes, strides, dtypes, alignment, scale, splits) of a decode call -> (split-kernel entry, reduce entry or
# None, partial-output and partial-lse sizes, the integer arguments of the split kernel, and of the reduce kernel)
_FAST: dict = {}


def _partials(q, n_o: int, n_lse: int, single: bool):
    """fp32 partial outputs (rows, splits, D) and their logsumexps (rows, splits), flat; one element each
    when a single split writes o itself (the kernel then never touches them)."""
    if single:
        n_o = n_lse = 1
    return (torch.empty(n_o, device=q.device, dtype=torch.float32),
            torch.empty(n_lse, device=q.device, dtype=torch.float32))


def _run_fast(hit, q, k_cache, v_cache, cache_seqlens, block_table):
    entry, reduce_entry, n_o, n_lse, ints, reduce_ints = hit
    o = torch.empty_like(q)
    part_o, part_lse = _partials(q, n_o, n_lse, reduce_entry is None)
    dev = q.device.index
    run_entry(entry, (q, k_cache, v_cache, q if block_table is None else block_table,
                      q if cache_seqlens is None else cache_seqlens, o, part_o, part_lse, *ints), dev)
    if reduce_entry is not None:
        run_entry(reduce_entry, (part_o, part_lse, o, *o.stride(), *reduce_ints), dev)
    return o


def gather_paged(cache: torch.Tensor, block_table: torch.Tensor, length: int) -> torch.Tensor:
    """Logical (B, H_kv, length, D) view of a paged cache (blocks, page, H_kv, D), as a copy."""
    page = cache.shape[1]
    blocks = block_table[:, : math.ceil(length / page)].long()  # (B, nb)
    x = cache[blocks]  # (B, nb, page, H_kv, D)
    return x.flatten(1, 2)[:, :length].transpose(1, 2)


def decode_ref(q, k_cache, v_cache, cache_seqlens=None, block_table=None, sm_scale: float | None = None):
    """Plain-torch decode attention in float32, one sequence at a time (ragged lengths)."""
    b, h, h_kv, n_q, d, max_len = _check_decode(q, k_cache, v_cache, block_table)
    sm_scale = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    lens = [max_len] * b if cache_seqlens is None else [int(x) for x in cache_seqlens]
    out = torch.empty_like(q)
    for i, n in enumerate(lens):
        if block_table is None:
            k, v = k_cache[i : i + 1, :, :n], v_cache[i : i + 1, :, :n]
        else:
            k, v = gather_paged(k_cache, block_table[i : i + 1], n), gather_paged(v_cache, block_table[i : i + 1], n)
        kf = k.float().repeat_interleave(h // h_kv, dim=1)
        vf = v.float().repeat_interleave(h // h_kv, dim=1)
        s = (q[i : i + 1].float() @ kf.transpose(-1, -2)) * sm_scale  # (1, H, n_q, n)
        pos = torch.arange(n_q, device=q.device)[:, None] + n - n_q
        s = s.masked_fill(torch.arange(n, device=q.device)[None, :] > pos, float("-inf"))
        out[i] = (torch.softmax(s, dim=-1) @ vf)[0].to(q.dtype)
    return out


@triton.jit
def stream_read_kernel(x_ptr, out_ptr, N, BLOCK: tl.constexpr, ITERS: tl.constexpr):
    """Sum a large buffer (each program reads ITERS * BLOCK elements): an HBM read-bandwidth probe."""
    base = tl.program_id(0).to(tl.int64) * BLOCK * ITERS
    acc = tl.zeros([BLOCK], tl.float32)
    for i in range(ITERS):
        offs = base + i * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < N, other=0.0).to(tl.float32)
    tl.store(out_ptr + tl.program_id(0), tl.sum(acc, 0))


def stream_read(x: torch.Tensor, block: int = 4096, iters: int = 16) -> torch.Tensor:
    """One pass over x (flattened) through stream_read_kernel; returns per-program partial sums."""
    flat = x.reshape(-1)
    grid = triton.cdiv(flat.numel(), block * iters)
    out = torch.empty(grid, device=x.device, dtype=torch.float32)
    stream_read_kernel[(grid,)](flat, out, flat.numel(), BLOCK=block, ITERS=iters, num_warps=8)
    return out
