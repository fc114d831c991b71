"""Rotary position embedding (Su et al. 2021, "RoFormer"), forward and backward, in Triton.

Layout: x (tokens, heads, head_dim), any token and head strides with a unit last stride (q or k
viewed out of a fused QKV projection works as is); the GPT-NeoX / Llama "half rotation": the two
halves x1 = x[..., :D/2] and x2 = x[..., D/2:] of each head are rotated pairwise,
    y1 = x1 cos - x2 sin,   y2 = x2 cos + x1 sin,
which is HF's `x * cos + rotate_half(x) * sin` with its duplicated (D,) tables. Here the tables
are (positions, D/2) (`rotary_tables`: one angle per pair, nothing duplicated) and each token
reads row positions[token]. The backward is the rotation by -angle (sin negated) of dy.

One program per (token, BLOCK_H heads): the token's cos/sin row is read once for those heads;
fp32 arithmetic, one rounding to x's dtype; the output is a new contiguous (tokens, heads, D).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .rowwise import warps_for

TILE_ELEMENTS = 2048   # heads x D/2 values of one half a program holds


@triton.jit
def rotary_kernel(
    # tensors: x, y (T, H, D); positions (T,) int; cos, sin (max_positions, D/2)
    x_ptr, pos_ptr, cos_ptr, sin_ptr, y_ptr,
    # sizes and strides
    H, HALF, stride_xt, stride_xh, stride_yt, stride_yh, stride_cp,
    # meta
    BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
    SIGN: tl.constexpr,   # +1: forward; -1: backward (rotate dy by -angle)
):
    tok = tl.program_id(0).to(tl.int64)
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    d = tl.arange(0, BLOCK_D)
    in_d = d < HALF
    ok = (heads[:, None] < H) & in_d[None, :]
    pos = tl.load(pos_ptr + tok).to(tl.int64)
    c = tl.load(cos_ptr + pos * stride_cp + d, mask=in_d, other=0.0).to(tl.float32)[None, :]
    s = tl.load(sin_ptr + pos * stride_cp + d, mask=in_d, other=0.0).to(tl.float32)[None, :] * SIGN
    x1_ptrs = x_ptr + tok * stride_xt + heads[:, None] * stride_xh + d[None, :]
    x1 = tl.load(x1_ptrs, mask=ok, other=0.0).to(tl.float32)
    x2 = tl.load(x1_ptrs + HALF, mask=ok, other=0.0).to(tl.float32)
    y1_ptrs = y_ptr + tok * stride_yt + heads[:, None] * stride_yh + d[None, :]
    tl.store(y1_ptrs, (x1 * c - x2 * s).to(y_ptr.dtype.element_ty), mask=ok)
    tl.store(y1_ptrs + HALF, (x2 * c + x1 * s).to(y_ptr.dtype.element_ty), mask=ok)


# --- launchers ------------------------------------------------------------------------------------

def rotary_tables(positions: int, head_dim: int, base: float = 10000.0, device="cpu",
                  dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin), each (positions, head_dim / 2): angle[p, i] = p / base^(2i / head_dim)."""
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float64) / head_dim)
    angle = torch.arange(positions, device=device, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return angle.cos().to(dtype), angle.sin().to(dtype)


def _launch(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor, sign: int) -> torch.Tensor:
    if x.dim() != 3 or x.stride(2) != 1:
        raise ValueError(f"x must be (tokens, heads, head_dim) with a unit last stride, got {tuple(x.shape)}")
    t, h, d = x.shape
    if d % 2 or x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"head_dim must be even and x fp16/bf16/fp32, got head_dim {d}, {x.dtype}")
    if cos.shape != sin.shape or cos.dim() != 2 or cos.shape[1] != d // 2 or cos.stride() != sin.stride() \
            or cos.stride(1) != 1:
        raise ValueError(f"cos and sin must both be (positions, {d // 2}) with one layout, got "
                         f"{tuple(cos.shape)} and {tuple(sin.shape)}")
    if positions.shape != (t,) or positions.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"positions must be a ({t},) int32/int64 tensor, got {tuple(positions.shape)} {positions.dtype}")
    y = torch.empty((t, h, d), device=x.device, dtype=x.dtype)
    block_d = triton.next_power_of_2(d // 2)
    block_h = max(1, min(triton.next_power_of_2(h), TILE_ELEMENTS // block_d))
    if t and h:
        rotary_kernel[(t, triton.cdiv(h, block_h))](
            x, positions, cos, sin, y,
            h, d // 2, x.stride(0), x.stride(1), y.stride(0), y.stride(1), cos.stride(0),
            BLOCK_H=block_h, BLOCK_D=block_d, SIGN=sign, num_warps=warps_for(2 * block_h * block_d))
    return y


def rotary_forward(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """x rotated by the angles of positions[token]; positions must index rows of cos/sin (not checked
    on the device: an index past the tables reads out of bounds)."""
    return _launch(x, cos, sin, positions, 1)


def rotary_backward(dy: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """dx: dy rotated back (by -angle), the transpose of the forward's rotation."""
    return _launch(dy, cos, sin, positions, -1)


def rotate_half_apply(x: torch.Tensor, cos_full: torch.Tensor, sin_full: torch.Tensor) -> torch.Tensor:
    """HF's form: x * cos + rotate_half(x) * sin, tables (tokens, 1, D) broadcast over heads."""
    half = x.shape[-1] // 2
    return x * cos_full + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin_full


def full_tables(cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor, dtype: torch.dtype):
    """HF's duplicated (tokens, 1, D) tables gathered at `positions`, in `dtype`."""
    return tuple(torch.cat((t, t), dim=-1)[positions].to(dtype)[:, None, :] for t in (cos, sin))


def rotary_ref(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Plain torch in fp32 (or x's dtype if wider; differentiable), rounded once to x's dtype."""
    work = torch.promote_types(x.dtype, torch.float32)
    return rotate_half_apply(x.to(work), *full_tables(cos, sin, positions, work)).to(x.dtype)
