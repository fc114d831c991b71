"""RMSNorm and LayerNorm, forward and backward, in Triton: one kernel pair for both norms.

Forward (one program per BLOCK_ROWS rows, the whole row in registers, fp32 arithmetic; LayerNorm rows wider
than CHUNKED_WIDTH in column chunks instead, read twice, the second read from L2: sums of the row shifted by its
first element for the statistics, then y):
    RMSNorm    y = x * rstd * w,               rstd = 1 / sqrt(mean(x^2) + eps)
    LayerNorm  y = (x - mean) * rstd * w + b,  rstd = 1 / sqrt(mean((x - mean)^2) + eps)
The per-row statistics (rstd, and mean for LayerNorm) are saved in fp32 for the backward.

Backward, with xhat = (x - mean) * rstd (mean = 0 for RMSNorm) and g = dy * w:
    dx = rstd * (g - xhat * mean(g * xhat) - mean(g))     (the last term for LayerNorm only)
    dw = sum over rows of dy * xhat,  db = sum over rows of dy
A persistent grid of P programs (rowwise.programs_for: about what fits on the card, each summing
at least 16 rows, but at least one a SM) walks the row blocks pid, pid + P, ... of the tile
`backward_tile` picks by width; each program keeps its dw (and db) in
fp32 registers and stores one partial row at the end; `rowwise.sum_partials` adds the P partial
rows in a second launch. Deterministic (no atomics); the partials cost 8 bytes a column per
program (fp32, written and read once), counted apart in calc/roofline/fused_ops.py. LayerNorm rows wider than
CHUNKED_WIDTH: the row kernel computes dx alone, and norm_dwdb_kernel sums dw and db over the rows in column
blocks in a second launch that reads x and dy again (full-width fp32 accumulators do not fit a program's
registers there).

Inputs are 2-D (rows, width) with a unit last stride (any row stride); x, dy and y share a dtype
(fp16, bf16 or fp32), the weight and bias may be another float dtype and their gradients come
back in it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .rowwise import check_width, programs_for, row_tile, sum_partials, warps_for

FLOATS = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def norm_fwd_kernel(
    # tensors: x, y (M, N); w, b (N,); mean, rstd (M,) fp32
    x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr,
    # sizes and row strides
    M, N, stride_xm, stride_ym, eps,
    # meta
    BLOCK_ROWS: tl.constexpr, BLOCK_N: tl.constexpr,
    LAYER: tl.constexpr,      # LayerNorm (subtract the mean) rather than RMSNorm
    HAS_BIAS: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_N)
    in_rows = rows < M
    in_cols = cols < N
    ok = in_rows[:, None] & in_cols[None, :]
    rows64 = rows.to(tl.int64)
    x = tl.load(x_ptr + rows64[:, None] * stride_xm + cols[None, :], mask=ok, other=0.0).to(tl.float32)
    if LAYER:
        mean = tl.sum(x, axis=1) / N
        x = tl.where(ok, x - mean[:, None], 0.0)
        tl.store(mean_ptr + rows, mean, mask=in_rows)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)
    tl.store(rstd_ptr + rows, rstd, mask=in_rows)
    w = tl.load(w_ptr + cols, mask=in_cols, other=0.0).to(tl.float32)
    y = x * rstd[:, None] * w[None, :]
    if HAS_BIAS:
        y += tl.load(b_ptr + cols, mask=in_cols, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + rows64[:, None] * stride_ym + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=ok)


@triton.jit
def norm_fwd_chunked_kernel(
    # tensors: x, y (M, N); w, b (N,); mean, rstd (M,) fp32
    x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr,
    # sizes and row strides
    M, N, stride_xm, stride_ym, eps,
    # meta
    BLOCK_ROWS: tl.constexpr, BLOCK_C: tl.constexpr, LAYER: tl.constexpr, HAS_BIAS: tl.constexpr,
):
    """The forward of wide rows in column chunks of BLOCK_C, the row read twice: once for the sums of d = x - x[:, 0]
    and of d^2 (the mean and variance of d are x's, shifted), once for y. The shift bounds the cancellation of
    E[d^2] - E[d]^2: an element is at most sqrt(N - 1) deviations from its row's mean, so E[d]^2 / var <= N and the
    variance keeps about 2^-24 x N of relative error in fp32 (1e-3 at N = 16384, below a bf16 output's rounding).
    Rows that fit registers (norm_fwd_kernel) keep the mean, then the centred variance: one reduction of both sums
    there was 1-3% slower from 16384 tokens, up to 13% faster at 256-1024 (docs/bench.md)."""
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    in_rows = rows < M
    rows64 = rows.to(tl.int64)
    c0 = tl.arange(0, BLOCK_C)
    mean = tl.zeros([BLOCK_ROWS], dtype=tl.float32)
    shift = tl.load(x_ptr + rows64 * stride_xm, mask=in_rows, other=0.0).to(tl.float32) if LAYER else mean
    acc1 = tl.zeros([BLOCK_ROWS, BLOCK_C], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK_ROWS, BLOCK_C], dtype=tl.float32)
    for c in range(0, N, BLOCK_C):
        cols = c + c0
        ok = in_rows[:, None] & (cols < N)[None, :]
        x = tl.load(x_ptr + rows64[:, None] * stride_xm + cols[None, :], mask=ok, other=0.0).to(tl.float32)
        d = tl.where(ok, x - shift[:, None], 0.0)
        acc1 += d
        acc2 += d * d
    if LAYER:
        mean_d = tl.sum(acc1, axis=1) / N
        var = tl.maximum(tl.sum(acc2, axis=1) / N - mean_d * mean_d, 0.0)
        mean = shift + mean_d
        tl.store(mean_ptr + rows, mean, mask=in_rows)
    else:
        var = tl.sum(acc2, axis=1) / N
    rstd = tl.rsqrt(var + eps)
    tl.store(rstd_ptr + rows, rstd, mask=in_rows)
    for c in range(0, N, BLOCK_C):
        cols = c + c0
        in_cols = cols < N
        ok = in_rows[:, None] & in_cols[None, :]
        x = tl.load(x_ptr + rows64[:, None] * stride_xm + cols[None, :], mask=ok, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=in_cols, other=0.0).to(tl.float32)
        y = (x - mean[:, None]) * rstd[:, None] * w[None, :]
        if HAS_BIAS:
            y += tl.load(b_ptr + cols, mask=in_cols, other=0.0).to(tl.float32)[None, :]
        tl.store(y_ptr + rows64[:, None] * stride_ym + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _dy_xhat(dy_ptr, x_ptr, mean_ptr, rstd_ptr, rows, cols, in_rows, ok, stride_dym, stride_xm, LAYER: tl.constexpr):
    """(dy, xhat, rstd) in fp32 of a (rows, cols) tile, xhat = (x - mean) * rstd rebuilt from the forward's
    statistics (mean = 0 for RMSNorm); dy is zero where the tile is masked, LayerNorm's xhat is not."""
    rows64 = rows.to(tl.int64)
    x = tl.load(x_ptr + rows64[:, None] * stride_xm + cols[None, :], mask=ok, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + rows64[:, None] * stride_dym + cols[None, :], mask=ok, other=0.0).to(tl.float32)
    rstd = tl.load(rstd_ptr + rows, mask=in_rows, other=0.0)
    if LAYER:
        mean = tl.load(mean_ptr + rows, mask=in_rows, other=0.0)
        xhat = (x - mean[:, None]) * rstd[:, None]
    else:
        xhat = x * rstd[:, None]
    return dy, xhat, rstd


@triton.jit
def norm_bwd_kernel(
    # tensors: dy, x, dx (M, N); w (N,); mean, rstd (M,) fp32; partials (P, N or 2N) fp32
    dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, part_ptr,
    # sizes and row strides
    M, N, P, stride_dym, stride_xm, stride_dxm, stride_pp,
    # meta
    BLOCK_ROWS: tl.constexpr, BLOCK_N: tl.constexpr, LAYER: tl.constexpr, HAS_BIAS: tl.constexpr,
    NUM_STAGES: tl.constexpr = 1,   # row blocks in flight in the persistent loop (tl.range's software pipelining)
    HAS_DW: tl.constexpr = True,    # False: dx only (the weight gradient summed elsewhere)
):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    in_cols = cols < N
    dw = tl.zeros([BLOCK_N], dtype=tl.float32)
    db = tl.zeros([BLOCK_N], dtype=tl.float32)
    n_blocks = (M + BLOCK_ROWS - 1) // BLOCK_ROWS
    for block in tl.range(pid, n_blocks, P, num_stages=NUM_STAGES):
        rows = block * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
        in_rows = rows < M
        ok = in_rows[:, None] & in_cols[None, :]
        dy, xhat, rstd = _dy_xhat(dy_ptr, x_ptr, mean_ptr, rstd_ptr, rows, cols, in_rows, ok, stride_dym, stride_xm,
                                  LAYER)
        if LAYER:
            xhat = tl.where(ok, xhat, 0.0)
        w = tl.load(w_ptr + cols, mask=in_cols, other=0.0).to(tl.float32)   # in the loop: fewer live registers
        g = dy * w[None, :]
        dx = g - xhat * (tl.sum(g * xhat, axis=1) / N)[:, None]
        if LAYER:
            dx -= (tl.sum(g, axis=1) / N)[:, None]
        dx *= rstd[:, None]
        tl.store(dx_ptr + rows.to(tl.int64)[:, None] * stride_dxm + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=ok)
        if HAS_DW:
            dw += tl.sum(dy * xhat, axis=0)
        if HAS_BIAS:
            db += tl.sum(dy, axis=0)
    if HAS_DW:
        tl.store(part_ptr + pid * stride_pp + cols, dw, mask=in_cols)
    if HAS_BIAS:
        tl.store(part_ptr + pid * stride_pp + N + cols, db, mask=in_cols)


@triton.jit
def norm_dwdb_kernel(
    # tensors: dy, x (M, N); mean, rstd (M,) fp32; dw, db (N,)
    dy_ptr, x_ptr, mean_ptr, rstd_ptr, dw_ptr, db_ptr,
    # sizes and row strides
    M, N, stride_dym, stride_xm,
    # meta
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, LAYER: tl.constexpr, HAS_BIAS: tl.constexpr,
    NUM_STAGES: tl.constexpr,
):
    """dw = sum over rows of dy * xhat (and db = sum of dy) for BLOCK_N columns a program, xhat rebuilt from x
    and the forward's statistics: the weight gradients of wide LayerNorm rows, whose row kernel computes dx
    alone (HAS_DW False), at the cost of reading x and dy a second time."""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    in_cols = cols < N
    aw = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    ab = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for m0 in tl.range(0, M, BLOCK_M, num_stages=NUM_STAGES):
        rows = m0 + tl.arange(0, BLOCK_M)
        in_rows = rows < M
        ok = in_rows[:, None] & in_cols[None, :]
        dy, xhat, _ = _dy_xhat(dy_ptr, x_ptr, mean_ptr, rstd_ptr, rows, cols, in_rows, ok, stride_dym, stride_xm,
                               LAYER)
        aw += dy * xhat
        if HAS_BIAS:
            ab += dy
    tl.store(dw_ptr + cols, tl.sum(aw, axis=0).to(dw_ptr.dtype.element_ty), mask=in_cols)
    if HAS_BIAS:
        tl.store(db_ptr + cols, tl.sum(ab, axis=0).to(db_ptr.dtype.element_ty), mask=in_cols)


# --- launchers ------------------------------------------------------------------------------------

def _check(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> tuple[int, int]:
    if x.dim() != 2 or x.stride(1) != 1:
        raise ValueError(f"x must be 2-D (rows, width) with a unit last stride, got shape {tuple(x.shape)}, "
                         f"strides {x.stride()}")
    m, n = x.shape
    check_width(n, "norm")
    if x.dtype not in FLOATS:
        raise ValueError(f"x must be fp16, bf16 or fp32, got {x.dtype}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.shape != (n,) or not t.is_contiguous() or t.dtype not in FLOATS):
            raise ValueError(f"{name} must be a contiguous float ({n},) vector, got {tuple(t.shape)} {t.dtype}")
    return m, n


def _forward(x, weight, bias, eps: float, layer: bool):
    m, n = _check(x, weight, bias)
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    rstd = torch.empty(m, device=x.device, dtype=torch.float32)
    mean = torch.empty(m, device=x.device, dtype=torch.float32) if layer else rstd
    if layer and n > CHUNKED_WIDTH:
        block_rows, block_c, warps = CHUNKED_FWD_TILE
        norm_fwd_chunked_kernel[(triton.cdiv(m, block_rows),)](
            x, weight, bias if bias is not None else weight, y, mean, rstd, m, n, x.stride(0), y.stride(0), eps,
            BLOCK_ROWS=block_rows, BLOCK_C=block_c, LAYER=layer, HAS_BIAS=bias is not None, num_warps=warps)
        return y, mean, rstd
    block_rows, block_n = row_tile(n)
    norm_fwd_kernel[(triton.cdiv(m, block_rows),)](
        x, weight, bias if bias is not None else weight, y, mean, rstd,
        m, n, x.stride(0), y.stride(0), eps,
        BLOCK_ROWS=block_rows, BLOCK_N=block_n, LAYER=layer, HAS_BIAS=bias is not None,
        num_warps=forward_warps(block_rows, block_n, layer))
    return y, mean, rstd


def forward_warps(block_rows: int, block_n: int, layer: bool) -> int:
    """num_warps of the whole-row forward: warps_for's, halved (at least 4) for LayerNorm rows padded to 4096 or
    more. On an H200 (experiments/probe_norm_chunked.py --fwd-configs, data/probe_norm_fwd_configs.jsonl, 4096 and
    32768 tokens) LayerNorm's forward ran 1.03-1.17x faster so at widths 2304, 3072, 5376 and 8192 and within 1% at
    4096; RMSNorm's gained nothing and keeps warps_for's. On the train sweep the halved warps cost LayerNorm's forward
    about 0.5 us at 1-256 tokens (0.90-0.95x) and gain up to 9% from 1024 (data/ab_norm_warps.jsonl)."""
    warps = warps_for(block_rows * block_n)
    return max(4, warps // 2) if layer and block_n >= 4096 else warps


# The backward's tile by width: (widest row, values a program holds a step, num_warps, row blocks in flight), the
# first entry whose width is not exceeded; wider rows take the forward's tile (row_tile, warps_for) with
# WIDE_STAGES. Tiles read off an H200 at 4096-65536 tokens (experiments/probe_fused_bwd.py,
# experiments/data/probe_fused_bwd.jsonl: time of the backward and its partial sums against the forward's tile,
# geomean over the three token counts): RMSNorm 1.12x / 1.13x / 1.13x / 1.24x at widths 1024 / 2048 / 4096 / 8192,
# LayerNorm 1.19x at 1024 and none better than the forward's tile above it. Row blocks in flight (tl.range's
# software pipelining of the persistent loop) from experiments/probe_norm_chunked.py
# (experiments/data/probe_norm_chunked.jsonl, CUDA-graph replays): 3 is within 5% of the fastest on every swept
# shape (256-65536 tokens) except RMSNorm's 2 x 8192 tile of 32 warps, which 3 slows by 6-30%, and RMSNorm at
# 12288 x 256 tokens (7%). RMSNorm's rows of 2049-8192 then took 8 warps and one row a step with 3 in flight
# (`--bwd-configs`, data/probe_norm_bwd_configs.jsonl, 4096 and 32768 tokens, each backward plus a copy of its
# outputs): 1.03-1.07x at 2304, 1.08-1.11x at 5376, 1.03-1.04x at 8192 against 16 warps / the 2 x 8192 tile of
# 32 warps, within 1% at 4096; LayerNorm's tiles gained at most 2% and stay. With the partial-sum tile of rowwise.py the backwards run up to 2.9x
# faster than before them from 256 tokens up, 0.5-3.6 us slower at 1-16 (reports/fused/rows.jsonl, de628d9
# against bd4fa77 / 6c3e10a; docs/bench.md).
BWD_TILES = {False: ((1024, 2048, 4, 3), (2048, 2048, 8, 3), (4096, 4096, 8, 3), (8192, 8192, 8, 3)),
             True: ((1024, 2048, 4, 3),)}
WIDE_STAGES = 3
# LayerNorm rows wider than this: the forward in column chunks (CHUNKED_FWD_TILE = rows a program, columns a
# chunk, num_warps), the backward as dx alone in the row kernel and dw, db by norm_dwdb_kernel (DWDB_TILE = rows a
# step, columns a program, steps in flight, num_warps). From experiments/probe_norm_chunked.py: at 16384 the
# chunked forward takes 0.93x / 0.71x / 0.66x the whole-row kernel's time at 256 / 4096 / 16384 tokens
# (reports/fused/rows.jsonl); the split backward takes 0.51-0.67x the time of the row kernel with dw in
# registers and db as dy's column sums at 12288 and 16384 (`--split-bwd`, data/probe_norm_split_bwd.jsonl), but
# 1.5-1.7x it at 8192 at 4096-16384 tokens, and the chunked forward is 9-11% slower there: 8192 keeps the
# whole-row kernels. RMSNorm keeps its row kernel at every width (the split was 0.9-1.2x of it at 12288-16384).
# calc/roofline/fused_ops.py prices the second read (LAYERNORM_CHUNKED_WIDTH, the same number).
CHUNKED_WIDTH = 8192
CHUNKED_FWD_TILE = (1, 4096, 16)
DWDB_TILE = (64, 64, 3, 8)


def backward_tile(width: int, layer: bool) -> tuple[int, int, int]:
    """(BLOCK_ROWS, BLOCK_N, num_warps) of the backward for rows of `width` (LayerNorm when `layer`)."""
    for widest, elements, warps, _ in BWD_TILES[layer]:
        if width <= widest:
            block_rows, block_n = row_tile(width, elements)
            return block_rows, block_n, warps
    block_rows, block_n = row_tile(width)
    return block_rows, block_n, warps_for(block_rows * block_n)


def backward_stages(width: int, layer: bool) -> int:
    """Row blocks the backward's persistent loop keeps in flight for rows of `width`."""
    for widest, _, _, stages in BWD_TILES[layer]:
        if width <= widest:
            return stages
    return WIDE_STAGES


def backward_programs(rows: int, width: int, device: torch.device, programs: int | None = None,
                      layer: bool = False) -> int:
    """P, the backward's persistent programs (and fp32 partial rows of each weight gradient) for this shape."""
    block_rows, _, warps = backward_tile(width, layer)
    return programs_for(triton.cdiv(rows, block_rows), block_rows, device, warps, programs)


def _backward(dy, x, weight, mean, rstd, layer: bool, has_bias: bool, programs: int | None):
    m, n = _check(x, weight)
    if dy.shape != x.shape or dy.dtype != x.dtype or dy.stride(1) != 1:
        raise ValueError(f"dy must match x: {tuple(dy.shape)} {dy.dtype} vs {tuple(x.shape)} {x.dtype}")
    for name, t in (("rstd", rstd), ("mean", mean)):
        if t.shape != (m,) or t.dtype != torch.float32 or not t.is_contiguous():
            raise ValueError(f"{name} must be the forward's contiguous float32 ({m},) statistics")
    dx = torch.empty_like(x, memory_format=torch.contiguous_format)
    block_rows, block_n, warps = backward_tile(n, layer)
    p = backward_programs(m, n, x.device, programs, layer)
    split = layer and n > CHUNKED_WIDTH   # dx alone here, dw and db by norm_dwdb_kernel
    # the row kernel stores no partials when split (dx stands in for the pointer it never writes through)
    partial = dx if split else torch.empty((p, 2 * n if has_bias else n), device=x.device, dtype=torch.float32)
    norm_bwd_kernel[(p,)](
        dy, x, weight, mean, rstd, dx, partial,
        m, n, p, dy.stride(0), x.stride(0), dx.stride(0), partial.stride(0),
        BLOCK_ROWS=block_rows, BLOCK_N=block_n, LAYER=layer, HAS_BIAS=has_bias and not split,
        NUM_STAGES=backward_stages(n, layer), HAS_DW=not split, num_warps=warps)
    if split:
        dw = torch.empty(n, device=x.device, dtype=weight.dtype)
        db = torch.empty(n, device=x.device, dtype=weight.dtype) if has_bias else dw
        block_m, block_c, stages, warps = DWDB_TILE
        norm_dwdb_kernel[(triton.cdiv(n, block_c),)](dy, x, mean, rstd, dw, db, m, n, dy.stride(0), x.stride(0),
                                                     BLOCK_M=block_m, BLOCK_N=block_c, LAYER=layer,
                                                     HAS_BIAS=has_bias, NUM_STAGES=stages, num_warps=warps)
        return dx, dw, (db if has_bias else None)
    sums = sum_partials(partial, weight.dtype)
    return dx, sums[:n], (sums[n:] if has_bias else None)


def rms_norm_forward(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6):
    """(y, rstd): y in x's dtype, rstd (rows,) float32."""
    y, _, rstd = _forward(x, weight, None, eps, layer=False)
    return y, rstd


def rms_norm_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor,
                      programs: int | None = None):
    """(dx, dw) from the forward's rstd; `programs` forces the persistent grid's size (tests)."""
    dx, dw, _ = _backward(dy, x, weight, rstd, rstd, False, False, programs)
    return dx, dw


def layer_norm_forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float = 1e-5):
    """(y, mean, rstd): y in x's dtype, mean and rstd (rows,) float32."""
    return _forward(x, weight, bias, eps, layer=True)


def layer_norm_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, mean: torch.Tensor,
                        rstd: torch.Tensor, has_bias: bool = True, programs: int | None = None):
    """(dx, dw, db) from the forward's mean and rstd; db is None without a bias."""
    return _backward(dy, x, weight, mean, rstd, True, has_bias, programs)


# --- references -----------------------------------------------------------------------------------

def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Plain torch in fp32 (differentiable), rounded once to x's dtype."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def layer_norm_ref(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float = 1e-5) -> torch.Tensor:
    xf = x.float()
    mean = xf.mean(-1, keepdim=True)
    y = (xf - mean) * torch.rsqrt((xf - mean).pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    return (y if bias is None else y + bias.float()).to(x.dtype)
