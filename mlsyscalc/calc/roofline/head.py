"""The ends of a training step in the fused (Megatron-LM) kernel list: the loss over the vocabulary and the
embedding's backward, which the layers' kernels leave out.

**The loss** (`RooflineOptions.loss`). "fp32": Megatron-LM's vocab-parallel cross-entropy as it runs by default
(megatron/core/tensor_parallel/cross_entropy.py; `--cross-entropy-loss-fusion` off): each TP rank's logits
(tokens x vocab / tp) cast to fp32, their row max, the max subtracted in place, exp in place, the row sum, the
division into the softmax it saves; backward the softmax times the incoming gradient in place (the target's -1 is
a scatter of one element a row) and the cast back to bf16. Per logit element, with a the bf16 size and 4 bytes
fp32: forward a + 4 + 4 + 4 + 4 + 4 + 4 + 4 + 4 + 4 = 38 bytes in six kernels, backward 4 + 4 + 4 + a = 14 in
two. Plain PyTorch's F.cross_entropy(logits.float()) moves about as much (48 bytes: calc.roofline.torch_kernels.loss_ops;
measured on an H200 at 16k x 128k: 26.8 ms a forward and backward, 0.78 of the datasheet bandwidth at its bytes,
reports/train/runs/h200-step-ops/). "fused": one chunked kernel computing the loss and writing the logits' gradient
in place in bf16 (Liger-Kernel's cross-entropy, Transformer Engine's and Megatron-Bridge's fused loss): the
logits read twice (an online max and sum, then the gradient pass) and the gradient written once, 3a bytes an
element, priced in the forward (its backward only scales the stored gradient, which the next kernel does).

**The embedding's backward.** torch's embedding_dense_backward on each TP rank's vocab / tp rows: the token
indices sorted (a radix sort, about 16 bytes read and written a token), the dense bf16 gradient of the table
zero-filled and the tokens' gradients scattered into it; then, as Megatron-LM's DDP does for a parameter outside
its fused-wgrad GEMMs, the bf16 gradient added into the fp32 main gradient (read a + 4, write 4 bytes an element).
Measured on an H200 (torch 2.11): 16k tokens into a 128k x 4096 table 3.2 ms, 2.0 TB/s at those bytes
(reports/train/runs/h200-step-ops/).
"""

from __future__ import annotations

import math
from typing import Any

from .memory_bound import pass_memory_op as _mem
from .ops import OpPrediction

FP32 = 4
SORT_BYTES = 16  # per token, read and written: the radix sort of the int64 indices


def _vocab(p: Any) -> int:
    return math.ceil(p.spec.vocab_size / p.opts.tp)


def loss_forward_ops(p: Any) -> list[OpPrediction]:
    """The loss's forward kernels over every position of one micro-batch on one TP rank (module docstring)."""
    t, v, a = p.tokens, _vocab(p), p.a
    tv, shape = float(t) * v, f"{t}x{v}"
    if p.opts.loss == "fused":
        return [_mem("loss.fused_cross_entropy", 2 * tv * a, tv * a, p, shape)]
    return [_mem("loss.cast", tv * a, tv * FP32, p, shape), _mem("loss.max", tv * FP32, t * FP32, p, shape),
            _mem("loss.subtract_max", tv * FP32, tv * FP32, p, shape), _mem("loss.exp", tv * FP32, tv * FP32, p, shape),
            _mem("loss.sum", tv * FP32, t * FP32, p, shape), _mem("loss.softmax", tv * FP32, tv * FP32, p, shape)]


def loss_backward_ops(p: Any) -> list[OpPrediction]:
    """The loss's backward kernels (none for the fused kernel: its forward wrote the gradient)."""
    if p.opts.loss == "fused":
        return []
    t, v, a = p.tokens, _vocab(p), p.a
    tv, shape = float(t) * v, f"{t}x{v}"
    return [_mem("loss.bwd_scale", tv * FP32, tv * FP32, p, shape), _mem("loss.bwd_cast", tv * FP32, tv * a, p, shape)]


def embedding_backward_ops(p: Any) -> list[OpPrediction]:
    """The embedding's backward on one TP rank's rows, with the fp32 main-gradient accumulation (module docstring)."""
    t, a, width = p.tokens, p.a, p.spec.embed_dim
    table = float(_vocab(p)) * width
    grads = float(t) * width * a
    return [_mem("embedding.bwd_sort", t * SORT_BYTES, t * SORT_BYTES, p, f"{t} tokens"),
            _mem("embedding.bwd_fill", 0, table * a, p, f"{_vocab(p)}x{width}"),
            _mem("embedding.bwd_scatter", grads + t * 8, grads, p, f"{t}x{width}"),
            _mem("embedding.main_grad_add", table * (a + FP32), table * FP32, p, f"{_vocab(p)}x{width}")]
