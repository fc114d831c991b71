"""Gated linear units, forward and backward, in Triton: SwiGLU and GeGLU on the (gate, up) halves.

The MLP's first projection gives (tokens, 2 x I), gate = its first I columns and up = the last I
(Megatron-LM's fused SwiGLU layout; two separate tensors work as well):
    SwiGLU  y = silu(gate) * up,        silu(g) = g * sigmoid(g)
    GeGLU   y = gelu_tanh(gate) * up,   gelu_tanh(g) = g/2 * (1 + tanh(sqrt(2/pi) * (g + 0.044715 g^3)))
Backward: dgate = dy * up * act'(gate), dup = dy * act(gate), written as the two halves of one
(tokens, 2 x I) buffer, the layout of the projection's output gradient, so no concatenation follows.

One program per (row, BLOCK_C columns), fp32 arithmetic, one rounding to the output dtype;
tanh is written as 1 - 2 / (exp(2z) + 1), which saturates cleanly at +-1 in fp32.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .rowwise import col_tile, warps_for

ACTIVATIONS = {"silu": 0, "gelu_tanh": 1}   # name -> ACT constexpr
SQRT_2_OVER_PI: tl.constexpr = tl.constexpr(0.7978845608028654)
GELU_CUBIC: tl.constexpr = tl.constexpr(0.044715)


@triton.jit
def _act_and_grad(g, ACT: tl.constexpr):
    """(act(g), act'(g)) in fp32; the forward's unused derivative is dropped by the compiler."""
    if ACT == 0:
        s = 1.0 / (1.0 + tl.exp(-g))
        a = g * s
        da = s * (1.0 + g * (1.0 - s))
    else:
        t = 1.0 - 2.0 / (tl.exp(2.0 * SQRT_2_OVER_PI * (g + GELU_CUBIC * g * g * g)) + 1.0)
        a = 0.5 * g * (1.0 + t)
        da = 0.5 * (1.0 + t) + 0.5 * g * (1.0 - t * t) * SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_CUBIC * g * g)
    return a, da


@triton.jit
def _row_block(N, BLOCK_C: tl.constexpr):
    """This program's row (int64), its BLOCK_C columns and which of them are inside the width."""
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    return tl.program_id(0).to(tl.int64), cols, cols < N


@triton.jit
def _load(ptr, row, stride, cols, ok):
    return tl.load(ptr + row * stride + cols, mask=ok, other=0.0).to(tl.float32)


@triton.jit
def glu_fwd_kernel(
    # tensors: gate, up, y (M, N)
    gate_ptr, up_ptr, y_ptr,
    # sizes and row strides
    N, stride_gm, stride_um, stride_ym,
    # meta
    BLOCK_C: tl.constexpr, ACT: tl.constexpr,
):
    row, cols, ok = _row_block(N, BLOCK_C)
    a, _ = _act_and_grad(_load(gate_ptr, row, stride_gm, cols, ok), ACT)
    u = _load(up_ptr, row, stride_um, cols, ok)
    tl.store(y_ptr + row * stride_ym + cols, (a * u).to(y_ptr.dtype.element_ty), mask=ok)


@triton.jit
def glu_bwd_kernel(
    # tensors: dy, gate, up, dgate, dup (M, N)
    dy_ptr, gate_ptr, up_ptr, dg_ptr, du_ptr,
    # sizes and row strides
    N, stride_dym, stride_gm, stride_um, stride_dgm, stride_dum,
    # meta
    BLOCK_C: tl.constexpr, ACT: tl.constexpr,
):
    row, cols, ok = _row_block(N, BLOCK_C)
    dy = _load(dy_ptr, row, stride_dym, cols, ok)
    a, da = _act_and_grad(_load(gate_ptr, row, stride_gm, cols, ok), ACT)
    u = _load(up_ptr, row, stride_um, cols, ok)
    tl.store(dg_ptr + row * stride_dgm + cols, (dy * u * da).to(dg_ptr.dtype.element_ty), mask=ok)
    tl.store(du_ptr + row * stride_dum + cols, (dy * a).to(du_ptr.dtype.element_ty), mask=ok)


# --- launchers ------------------------------------------------------------------------------------

def _check(activation: str, *tensors: torch.Tensor) -> tuple[int, int]:
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    first = tensors[0]
    for t in tensors:
        if t.dim() != 2 or t.stride(1) != 1:
            raise ValueError(f"gate, up and dy must be 2-D (tokens, I) with a unit last stride, got {tuple(t.shape)}")
        if t.shape != first.shape or t.dtype != first.dtype:
            raise ValueError(f"gate, up and dy must share shape and dtype: {tuple(t.shape)} {t.dtype} "
                             f"vs {tuple(first.shape)} {first.dtype}")
    if first.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"gate and up must be fp16, bf16 or fp32, got {first.dtype}")
    return first.shape[0], first.shape[1]


def _grid(m: int, n: int, block_c: int) -> tuple[int, int]:
    return (m, triton.cdiv(n, block_c))


def glu_forward(gate: torch.Tensor, up: torch.Tensor, activation: str = "silu") -> torch.Tensor:
    """y = act(gate) * up, (tokens, I) in gate's dtype; gate/up may be halves of one (tokens, 2I) tensor."""
    m, n = _check(activation, gate, up)
    y = torch.empty((m, n), device=gate.device, dtype=gate.dtype)
    block_c = col_tile(n)
    if m and n:
        glu_fwd_kernel[_grid(m, n, block_c)](gate, up, y, n, gate.stride(0), up.stride(0), y.stride(0),
                                             BLOCK_C=block_c, ACT=ACTIVATIONS[activation],
                                             num_warps=warps_for(block_c))
    return y


def glu_backward(dy: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, activation: str = "silu"):
    """(dgate, dup): the two halves of one new (tokens, 2I) gradient buffer."""
    m, n = _check(activation, dy, gate, up)
    grad = torch.empty((m, 2 * n), device=gate.device, dtype=gate.dtype)
    dgate, dup = grad[:, :n], grad[:, n:]
    block_c = col_tile(n)
    if m and n:
        glu_bwd_kernel[_grid(m, n, block_c)](dy, gate, up, dgate, dup,
                                             n, dy.stride(0), gate.stride(0), up.stride(0), grad.stride(0),
                                             grad.stride(0), BLOCK_C=block_c, ACT=ACTIVATIONS[activation],
                                             num_warps=warps_for(block_c))
    return dgate, dup


def swiglu_forward(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return glu_forward(gate, up, "silu")


def swiglu_backward(dy: torch.Tensor, gate: torch.Tensor, up: torch.Tensor):
    return glu_backward(dy, gate, up, "silu")


def geglu_forward(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return glu_forward(gate, up, "gelu_tanh")


def geglu_backward(dy: torch.Tensor, gate: torch.Tensor, up: torch.Tensor):
    return glu_backward(dy, gate, up, "gelu_tanh")


def glu_ref(gate: torch.Tensor, up: torch.Tensor, activation: str = "silu") -> torch.Tensor:
    """Plain torch in fp32 (differentiable), rounded once to gate's dtype."""
    g = gate.float()
    a = torch.nn.functional.silu(g) if activation == "silu" else torch.nn.functional.gelu(g, approximate="tanh")
    return (a * up.float()).to(gate.dtype)
