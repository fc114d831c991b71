"""Cross-entropy over a large vocabulary in Triton: the loss and the logits' gradient in one kernel,
the gradient written in place over the logits (the approach of Liger-Kernel's cross_entropy).

For each row (token) with target t != ignore_index, in chunks of BLOCK_V along the vocabulary:
    pass 1  online max m and sum s = sum_j exp(x_j - m) in fp32 (each chunk rescales s by exp(m_old - m))
            -> lse = m + ln s,  loss_row = lse - x_t
    pass 2  logits[j] <- (exp(x_j - lse) - [j == t]) / n_valid      (d mean loss / d logits)
Rows whose target is ignore_index get loss 0 and a zero gradient row. n_valid = the rows not ignored,
counted on the device (no host synchronisation); loss = sum(loss_row) / n_valid, NaN when every row is
ignored, as torch.nn.functional.cross_entropy(reduction="mean") gives. The gradient is that of the
loss itself: a caller that scales the loss scales the gradient.

Memory: the logits (tokens, vocab) are read twice (pass 2 partly from L2) and written once, with no
fp32 copy and no separate gradient tensor; torch's usual path (an fp32 upcast, log_softmax saved,
an fp32 gradient, a cast back) moves and holds several times that. A target outside [0, vocab)
that is not ignore_index is not checked on the device: its row's loss is lse and gets no -1.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .rowwise import warps_for

LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)   # exp(x) = exp2(x * log2(e))
BLOCK_ELEMENTS = 4096   # vocabulary chunk a program holds


@triton.jit
def cross_entropy_kernel(
    # tensors: logits (M, V) overwritten by the gradient; target (M,) int; loss_row (M,) fp32; n_valid () int
    logits_ptr, target_ptr, loss_ptr, n_valid_ptr,
    # sizes and strides
    V, stride_lm, ignore_index,
    # meta
    BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    base = logits_ptr + row * stride_lm
    offs = tl.arange(0, BLOCK_V)
    target = tl.load(target_ptr + row).to(tl.int64)
    if target == ignore_index:
        for v0 in range(0, V, BLOCK_V):
            cols = v0 + offs
            tl.store(base + cols, tl.zeros([BLOCK_V], dtype=tl.float32).to(logits_ptr.dtype.element_ty),
                     mask=cols < V)
        tl.store(loss_ptr + row, 0.0)
    else:
        m = -float("inf")
        s = 0.0
        for v0 in range(0, V, BLOCK_V):
            cols = v0 + offs
            x = tl.load(base + cols, mask=cols < V, other=-float("inf")).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, axis=0))
            s = s * tl.exp2((m - m_new) * LOG2E) + tl.sum(tl.exp2((x - m_new) * LOG2E), axis=0)
            m = m_new
        lse = m + tl.log2(s) / LOG2E
        x_t = tl.load(base + target, mask=(target >= 0) & (target < V), other=0.0).to(tl.float32)
        tl.store(loss_ptr + row, lse - x_t)
        inv_n = 1.0 / tl.load(n_valid_ptr).to(tl.float32)
        for v0 in range(0, V, BLOCK_V):
            cols = v0 + offs
            x = tl.load(base + cols, mask=cols < V, other=0.0).to(tl.float32)
            p = tl.exp2((x - lse) * LOG2E)
            grad = tl.where(cols == target, p - 1.0, p) * inv_n
            tl.store(base + cols, grad.to(logits_ptr.dtype.element_ty), mask=cols < V)


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100):
    """(loss, grad): the mean cross-entropy (0-dim float32) and its gradient, which *is* `logits`, overwritten
    in place (the forward's logits are gone afterwards). logits (tokens, vocab) fp16/bf16/fp32 with a unit
    last stride; target (tokens,) int32/int64."""
    if logits.dim() != 2 or logits.stride(1) != 1:
        raise ValueError(f"logits must be 2-D (tokens, vocab) with a unit last stride, got {tuple(logits.shape)}")
    if logits.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"logits must be fp16, bf16 or fp32, got {logits.dtype}")
    m, v = logits.shape
    if target.shape != (m,) or target.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"target must be a ({m},) int32/int64 tensor, got {tuple(target.shape)} {target.dtype}")
    n_valid = (target != ignore_index).sum()
    loss_row = torch.empty(m, device=logits.device, dtype=torch.float32)
    block_v = min(triton.next_power_of_2(v), BLOCK_ELEMENTS)   # a loop over chunks: padding costs one chunk
    if m and v:
        cross_entropy_kernel[(m,)](logits, target, loss_row, n_valid, v, logits.stride(0), ignore_index,
                                   BLOCK_V=block_v, num_warps=warps_for(block_v))
    return loss_row.sum() / n_valid, logits


def cross_entropy_ref(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    """torch's mean cross-entropy in fp32 (or wider; differentiable)."""
    work = torch.promote_types(logits.dtype, torch.float32)
    return torch.nn.functional.cross_entropy(logits.to(work), target, ignore_index=ignore_index)
