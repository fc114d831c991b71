"""Bias-dropout-residual-add, forward and backward, in Triton (Megatron-LM's fused bias_dropout_add).

    out = residual + dropout(x + bias, p)          x, residual, out (tokens, hidden); bias (hidden,) or None
    dx = dy * keep / (1 - p),  dbias = sum over rows of dx,  dresidual = dy (returned as is, no copy)

Randomness: Philox4x32-10 (Salmon et al., SC'11; triton.language.randint4x) keyed by `seed`, with
counter row * ceil(hidden / 8) + column // 8: one Philox call gives four 32-bit words, split into
eight 16-bit draws for eight neighbouring columns (column % 8 picks word (column % 8) % 4, low half
for lanes 0-3, high for 4-7). An element is kept when its draw is >= round(p * 65536), so p is
resolved to 1/65536 and the kept values are scaled by 65536 / (65536 - round(p * 65536)).

The backward regenerates the mask from the seed rather than reading a saved byte mask: in 16 bits
a byte mask would add 1 byte to the forward's 6 per element (x, residual, out) and 1 to the
backward's 4 (dy, dx), 17% and 25% more traffic, while the eight draws a Philox call yields cost
about 8 integer instructions an element, which the H200's integer rate (132 SMs x 64 a clock)
covers at more than its HBM can feed (about 650 G elements/s here). Use a new seed for every call.

`dropout_keep_ref` recomputes the same draws in plain torch (64-bit integer arithmetic), so the
references below are independent of the kernel's random numbers.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .rowwise import col_tile, num_sms, programs_for, sum_partials, warps_for

LANES = 8             # columns served by one Philox call (four 32-bit words, two 16-bit draws each)
DRAW_LEVELS = 65536   # 16-bit draws
BWD_TILE_ELEMENTS = 16384  # values a backward program holds a step (rows x columns; 32 warps): on an H200 at
                           # 4096-65536 tokens 1.12-1.36x the one-row step by widths 1024-16384
                           # (experiments/probe_fused_bwd.py, experiments/data/probe_fused_bwd.jsonl)


@triton.jit
def _keep(seed, counter, threshold):
    """(GROUPS, 8) keep mask of the 8-column groups at `counter` (GROUPS,) int64."""
    r0, r1, r2, r3 = tl.randint4x(seed, counter)
    lane = tl.arange(0, 8)[None, :]
    word = tl.where(lane % 4 == 0, r0[:, None],
                    tl.where(lane % 4 == 1, r1[:, None], tl.where(lane % 4 == 2, r2[:, None], r3[:, None])))
    draw = ((word >> ((lane // 4) * 16).to(tl.uint32)) & 0xFFFF).to(tl.int32)
    return draw >= threshold


@triton.jit(do_not_specialize=["seed"])   # one build for every seed (the JIT would specialise 1 in 16 seeds)
def dropout_add_fwd_kernel(
    # tensors: x, residual, out (M, N); bias (N,)
    x_ptr, bias_ptr, res_ptr, out_ptr,
    # sizes and row strides; G = ceil(N / 8) groups a row
    N, G, stride_xm, stride_rm, stride_om,
    # dropout
    seed, threshold, scale,
    # meta
    GROUPS: tl.constexpr, HAS_BIAS: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    group = tl.program_id(1) * GROUPS + tl.arange(0, GROUPS)
    cols = group[:, None] * 8 + tl.arange(0, 8)[None, :]      # (GROUPS, 8): one 16-byte vector a row in 16 bits
    ok = cols < N
    keep = _keep(seed, row * G + group, threshold)
    v = tl.load(x_ptr + row * stride_xm + cols, mask=ok, other=0.0).to(tl.float32)
    if HAS_BIAS:
        v += tl.load(bias_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    out = tl.load(res_ptr + row * stride_rm + cols, mask=ok, other=0.0).to(tl.float32) + tl.where(keep, v * scale, 0.0)
    tl.store(out_ptr + row * stride_om + cols, out.to(out_ptr.dtype.element_ty), mask=ok)


@triton.jit(do_not_specialize=["seed"])
def dropout_add_bwd_kernel(
    # tensors: dy, dx (M, N); partials (P, N) fp32 (the bias gradient's, HAS_BIAS only)
    dy_ptr, dx_ptr, part_ptr,
    # sizes and row strides
    M, N, G, P, stride_dym, stride_dxm, stride_pp,
    # dropout
    seed, threshold, scale,
    # meta
    BLOCK_ROWS: tl.constexpr, GROUPS: tl.constexpr, HAS_BIAS: tl.constexpr,
):
    pid = tl.program_id(0)
    group = tl.program_id(1) * GROUPS + tl.arange(0, GROUPS)
    # the tile: BLOCK_ROWS rows x GROUPS 8-column groups, flattened to (BLOCK_ROWS * GROUPS, 8) so that one
    # Philox call still serves one group of one row
    flat_group = tl.reshape(tl.broadcast_to(group[None, :], [BLOCK_ROWS, GROUPS]), [BLOCK_ROWS * GROUPS])
    flat_row = tl.reshape(tl.broadcast_to(tl.arange(0, BLOCK_ROWS)[:, None], [BLOCK_ROWS, GROUPS]),
                          [BLOCK_ROWS * GROUPS])
    cols = flat_group[:, None] * 8 + tl.arange(0, 8)[None, :]
    in_cols = cols < N
    acc = tl.zeros([BLOCK_ROWS * GROUPS, 8], dtype=tl.float32)
    n_blocks = (M + BLOCK_ROWS - 1) // BLOCK_ROWS
    for block in range(pid, n_blocks, P):   # one row block a program without a bias (P = the row blocks)
        row64 = tl.cast(block, tl.int64) * BLOCK_ROWS + flat_row
        ok = in_cols & (row64 < M)[:, None]
        keep = _keep(seed, row64 * G + flat_group, threshold)
        dy = tl.load(dy_ptr + row64[:, None] * stride_dym + cols, mask=ok, other=0.0).to(tl.float32)
        dx = tl.where(keep, dy * scale, 0.0)
        tl.store(dx_ptr + row64[:, None] * stride_dxm + cols, dx.to(dx_ptr.dtype.element_ty), mask=ok)
        if HAS_BIAS:
            acc += tl.where(ok, dx, 0.0)
    if HAS_BIAS:
        dbias = tl.sum(tl.reshape(acc, [BLOCK_ROWS, GROUPS, 8]), axis=0)
        part_cols = group[:, None] * 8 + tl.arange(0, 8)[None, :]
        tl.store(part_ptr + pid * stride_pp + part_cols, dbias, mask=part_cols < N)


# --- launchers ------------------------------------------------------------------------------------

def dropout_threshold(p: float) -> tuple[int, float]:
    """(threshold, scale): keep a 16-bit draw >= threshold, scale kept values so the mean is unchanged."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")
    threshold = round(p * DRAW_LEVELS)
    return threshold, DRAW_LEVELS / (DRAW_LEVELS - threshold)


def _check_seed(seed: int) -> None:
    if not 0 <= seed < 2**63:
        raise ValueError(f"seed must be in [0, 2^63), got {seed}")


def _check_rows(*tensors: torch.Tensor) -> tuple[int, int]:
    first = tensors[0]
    for t in tensors:
        if t.dim() != 2 or t.stride(1) != 1 or t.shape != first.shape or t.dtype != first.dtype:
            raise ValueError(f"x, residual and dy must be 2-D (tokens, hidden) of one shape and dtype with a unit "
                             f"last stride, got {tuple(t.shape)} {t.dtype} vs {tuple(first.shape)} {first.dtype}")
    if first.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"x must be fp16, bf16 or fp32, got {first.dtype}")
    return first.shape[0], first.shape[1]


def _blocks(n: int) -> tuple[int, int, int]:
    """(groups a row, groups a program, warps) of the forward's one-row programs."""
    groups_per_program = max(1, col_tile(n) // LANES)
    return triton.cdiv(n, LANES), groups_per_program, warps_for(groups_per_program * LANES)


def backward_tile(n: int, rows: int | None = None, sms: int | None = None) -> tuple[int, int, int]:
    """(rows a step, groups a program, warps) of the backward: the forward's column tile, with rows stacked
    up to BWD_TILE_ELEMENTS values a step, so that a persistent program has that many loads in flight; with
    the tensor's `rows` and the card's `sms`, no more rows a step than leave 4 row blocks a SM (a power of
    two; at 512-2048 tokens a step of 16 rows left most programs one step and ran 1.5-2.5x slower:
    experiments/data/probe_fused_bwd_graph.jsonl)."""
    _, groups, _ = _blocks(n)
    block_rows = max(1, BWD_TILE_ELEMENTS // (groups * LANES))
    if rows is not None:
        spread = max(1, rows // (4 * sms)) if sms else max(1, rows)
        block_rows = min(block_rows, 1 << (spread.bit_length() - 1))
    return block_rows, groups, warps_for(block_rows * groups * LANES)


def bias_grad_programs(rows: int, width: int, device: torch.device, programs: int | None = None) -> int:
    """Programs of the backward with a bias (each sums its row blocks' dx into one fp32 partial row of dbias)."""
    block_rows, _, warps = backward_tile(width, rows, num_sms(device))
    return programs_for(triton.cdiv(rows, block_rows), block_rows, device, warps, programs)


def bias_dropout_add_forward(x: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor, p: float,
                             seed: int) -> torch.Tensor:
    """residual + dropout(x + bias, p), a new (tokens, hidden) tensor in x's dtype."""
    m, n = _check_rows(x, residual)
    if bias is not None and (bias.shape != (n,) or not bias.is_contiguous() or bias.dtype != x.dtype):
        raise ValueError(f"bias must be a contiguous ({n},) vector in x's dtype, got {tuple(bias.shape)} {bias.dtype}")
    _check_seed(seed)
    threshold, scale = dropout_threshold(p)
    out = torch.empty((m, n), device=x.device, dtype=x.dtype)
    g, groups, warps = _blocks(n)
    if m and n:
        dropout_add_fwd_kernel[(m, triton.cdiv(g, groups))](
            x, bias if bias is not None else x, residual, out,
            n, g, x.stride(0), residual.stride(0), out.stride(0),
            seed, threshold, scale, GROUPS=groups, HAS_BIAS=bias is not None, num_warps=warps)
    return out


def bias_dropout_add_backward(dy: torch.Tensor, p: float, seed: int, has_bias: bool = True,
                              bias_dtype: torch.dtype | None = None, programs: int | None = None):
    """(dx, dbias, dresidual) for the forward with the same p and seed; dbias is None without a bias,
    dresidual is dy itself. `programs` forces the bias-gradient grid's row programs (tests)."""
    m, n = _check_rows(dy)
    _check_seed(seed)
    threshold, scale = dropout_threshold(p)
    dx = torch.empty((m, n), device=dy.device, dtype=dy.dtype)
    g = triton.cdiv(n, LANES)
    block_rows, groups, warps = backward_tile(n, m, num_sms(dy.device))
    p_rows = bias_grad_programs(m, n, dy.device, programs) if has_bias else triton.cdiv(m, block_rows)
    partial = torch.empty((p_rows, n) if has_bias else (1, 1), device=dy.device, dtype=torch.float32)
    if m and n:
        dropout_add_bwd_kernel[(p_rows, triton.cdiv(g, groups))](
            dy, dx, partial, m, n, g, p_rows, dy.stride(0), dx.stride(0), partial.stride(0),
            seed, threshold, scale, BLOCK_ROWS=block_rows, GROUPS=groups, HAS_BIAS=has_bias, num_warps=warps)
    dbias = sum_partials(partial, bias_dtype or dy.dtype) if has_bias and m else None
    return dx, dbias, dy


# --- references -----------------------------------------------------------------------------------

_M32 = 0xFFFFFFFF


def _mul_hi_lo(a: torch.Tensor, b: int) -> tuple[torch.Tensor, torch.Tensor]:
    """High and low 32 bits of a * b (a: int64 tensor of uint32 values, b: a 32-bit constant), without
    overflowing int64: b is split into 16-bit halves."""
    t = a * (b & 0xFFFF)                      # < 2^48
    u = a * (b >> 16)                         # < 2^48
    low_sum = t + ((u & 0xFFFF) << 16)        # < 2^49
    return (u >> 16) + (low_sum >> 32), low_sum & _M32


def philox4x32_ref(counter: torch.Tensor, seed: int, rounds: int = 10) -> tuple[torch.Tensor, ...]:
    """Philox4x32 of (counter low 32 bits, counter high 32 bits, 0, 0) under key (seed low, seed high),
    as triton.language.randint4x computes it; four int64 tensors holding uint32 values."""
    c0, c1 = counter & _M32, (counter >> 32) & _M32
    c2, c3 = torch.zeros_like(c0), torch.zeros_like(c0)
    k0, k1 = seed & _M32, (seed >> 32) & _M32
    for _ in range(rounds):
        hi_b, lo_b = _mul_hi_lo(c2, 0xCD9E8D57)
        hi_a, lo_a = _mul_hi_lo(c0, 0xD2511F53)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0, k1 = (k0 + 0x9E3779B9) & _M32, (k1 + 0xBB67AE85) & _M32
    return c0, c1, c2, c3


def dropout_keep_ref(seed: int, rows: int, cols: int, p: float, device="cpu") -> torch.Tensor:
    """The (rows, cols) keep mask the kernels draw, recomputed in plain torch."""
    threshold, _ = dropout_threshold(p)
    groups = triton.cdiv(cols, LANES)
    counter = (torch.arange(rows, device=device, dtype=torch.int64)[:, None] * groups
               + torch.arange(groups, device=device, dtype=torch.int64)[None, :])
    words = torch.stack(philox4x32_ref(counter, seed), dim=-1)            # (rows, groups, 4)
    draws = torch.cat((words & 0xFFFF, words >> 16), dim=-1)              # lanes 0-3 low halves, 4-7 high
    return (draws >= threshold).reshape(rows, groups * LANES)[:, :cols]


def bias_dropout_add_ref(x: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor, p: float,
                         seed: int) -> torch.Tensor:
    """Plain torch in fp32 (or wider; differentiable) with the kernels' mask, rounded once to x's dtype."""
    work = torch.promote_types(x.dtype, torch.float32)
    _, scale = dropout_threshold(p)
    keep = dropout_keep_ref(seed, x.shape[0], x.shape[1], p, x.device)
    v = x.to(work) if bias is None else x.to(work) + bias.to(work)
    return (residual.to(work) + torch.where(keep, v * scale, torch.zeros((), dtype=work, device=x.device))).to(x.dtype)
