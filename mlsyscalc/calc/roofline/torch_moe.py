"""The memory-bound kernels of a plain-torch MoE layer's routing, dispatch and combine (`--impl torch`):
forward, and the backward autograd runs for them in a training step.

The layer is bench._torch_layers.MoE: router logits cast to fp32, softmax, top-k, the weights
renormalised and cast back; the T k picks argsorted into expert order; the routed copies gathered
(`flat[token]`), run through the grouped GEMMs, multiplied by their weights (`outs * w[order, None]`),
gathered back (`combined[order.argsort()]`) and summed over k. One kernel per tensor op, each read once
and written once (calc.roofline.memory_bound's convention), bytes by dtype.

Backward, per autograd node (torch's derivatives.yaml; CUDA kernels of aten, torch 2.x):

- the sum over k: an expand, no kernel; the `.view(-1, k, h)` of an expanded gradient: a reshape copy
  (T k h, stride 0 over k: unvectorised, memory_broadcast).
- each advanced index (`combined[inv]`, `w[order]`, `flat[token]`): IndexBackward0, an accumulating
  `index_put_` into zeros (aten's index_put_with_sort_kernel): the zero fill; the linear index
  (`remainder`, times the stride, divided by the slice: 3 int64 kernels); `arange` of the indices;
  cub's radix sort of (index, position) pairs over the index's bits (a histogram, an exclusive sum,
  and one onesweep pass per 8 bits); `indexing_backward_kernel` (stride-1 for the weights), which
  reads the sorted indices, the gradient rows and the rows it accumulates into.
- `outs * w`: grad * w (broadcast, memory_broadcast), grad * outs and its sum over h (w's gradient).
- the weights' casts back (bf16 -> fp32) and the router logits' (fp32 -> bf16): one copy each.
- `w / w.sum(-1)`: grad / s, and s's gradient -grad * (w / s) / s summed over k (4 kernels and a
  reduction); the sum's expanded gradient added to w's (the 4th broadcasting fp32 kernel).
- top-k: a zero fill of (T, E) fp32 and the scatter of the k gradients; softmax: one kernel.
- gradient sums autograd adds: the gate and up grouped GEMMs' input gradients (T k h), and the
  layer input's gradient from the index backward on top of the linears' (calc.roofline.torch_kernels's
  fan-out adds count the router and shared expert).

H100 profile of mixtral-8x7b (2 layers) train B1 S2048 (reports/models/h100_moe.jsonl): per layer 2
`indexing_backward_kernel`, 3 `remainder`, 3 radix-sort histograms and 6 onesweep passes (T k = 4096,
12 bits: 2 passes each), 4 unvectorised fp32 binary kernels; OLMoE-shaped (16 layers,
h100_olmoe.jsonl): 1 stride-1 `indexing_backward_kernel_stride_1`, 3 int64 multiplies a layer.
"""

from __future__ import annotations

import math
from typing import Any

from .memory_bound import pass_memory_op as _mem, pass_strided_op as _strided
from .ops import OpPrediction

FP32, I64, I32 = 4, 8, 4
RADIX_BITS = 8  # bits per onesweep pass of cub's radix sort
RADIX_BINS = 256


SMALL_SORT_MAX = 4096  # aten's Sort.cpp (should_use_small_sort): up to this many keys one in-place sort kernel
KEY_BITS = 64  # a longer sort runs cub's radix sort over every bit of the int64 keys (SortStable.cu)


def _sort(p: Any, n: int, what: str) -> list[OpPrediction]:
    """argsort of n int64 keys as torch runs it: a copy of the keys, the index fill, then up to
    SMALL_SORT_MAX keys the in-place (bitonic or radix) sort of keys with indices, longer ones cub's
    radix sort over KEY_BITS bits (8 onesweep passes: OLMoE-shaped train B2 S2048, T k = 32768, 16
    passes a layer for the forward's two argsorts in the H100 profile); bytes in int64 elements."""
    name = f"moe_{what}"
    ops = [_mem(f"{name}.sort.copy_keys", n * I64, n * I64, p), _mem(f"{name}.sort.iota", 0.0, n * I64, p)]
    if n <= SMALL_SORT_MAX:
        return ops + [_mem(f"{name}.sort", 2 * n * I64, 2 * n * I64, p)]
    return ops + _radix_sort(n, 2 ** KEY_BITS, name, p)


def _sizes(p: Any, layer: int) -> tuple[int, int, int, int, float] | None:
    """(tokens, experts per token, experts, hidden size, activation bytes) of a MoE layer; None for a dense one."""
    spec, moe = p.spec, p.spec.moe
    if moe is None or not spec.layer_is_moe(layer):
        return None
    return p.tokens, moe.experts_per_token, moe.num_experts, spec.hidden_size, p.a


def moe_dispatch_kernels(p: Any, layer: int) -> list[tuple[OpPrediction, str]]:
    """The memory-bound kernels of one MoE layer's routing, dispatch and combine forward, as the plain-torch
    MoE runs them (bench._torch_layers.MoE with GroupedExperts; one kernel per tensor op, its bytes by
    dtype): the fp32 cast, softmax and top-k of the router logits, the renormalised weights (sum, divide,
    cast), the argsort of the T k picks, the expert of each copy, the per-expert counts (zero fill, ones,
    scatter-add) and their cumsum, the gather of the routed copies, the grouped GEMMs' argument set-up (one
    small kernel each), the gather of the weights in expert order, their broadcast multiply onto the expert
    outputs (unvectorised: memory_broadcast), the inverse argsort, the gather back to token order and the
    sum over the k copies; the shared expert's add."""
    sizes = _sizes(p, layer)
    if sizes is None:
        return []
    t, k, e, h, a = sizes
    tk = t * k
    ops = [_mem("router_cast", t * e * a, t * e * FP32, p), _mem("router_softmax", t * e * FP32, t * e * FP32, p),
           _mem("router_topk", t * e * FP32, tk * (FP32 + I64), p), _mem("topk_sum", tk * FP32, t * FP32, p),
           _mem("topk_div", (tk + t) * FP32, tk * FP32, p), _mem("topk_cast", tk * FP32, tk * a, p)]
    ops += _sort(p, tk, "order")
    ops += [_mem("moe_token_of_copy", tk * I64, tk * I64, p), _mem("moe_counts_zero", 0.0, e * I32, p),
            _mem("moe_ones", 0.0, tk * I32, p), _mem("moe_counts_scatter", tk * (I64 + I32), e * I32, p),
            _mem("moe_gather_routed", tk * (h * a + I64), tk * h * a, p), _mem("moe_offsets_cumsum", e * I32, e * I32, p)]
    ops += [_mem("grouped_gemm_setup", e * I32, e * 64, p) for _ in range(3)]
    ops += [_mem("moe_gather_weights", tk * (I64 + a), tk * a, p),
            _strided("moe_weight_outputs", tk * (h + 1) * a, tk * h * a, p)]
    ops += _sort(p, tk, "inverse")
    ops += [_mem("moe_gather_back", tk * (h * a + I64), tk * h * a, p), _mem("moe_sum_copies", tk * h * a, t * h * a, p)]
    if p.spec.moe.num_shared_experts:
        ops.append(_mem("moe_shared_add", 2 * t * h * a, t * h * a, p))
    return [(op, "mlp") for op in ops]


def _radix_sort(n: float, rows: int, name: str, p: Any) -> list[OpPrediction]:
    """cub's radix sort of n (int64 key, int64 value) pairs whose keys are below `rows`: a histogram
    (reads the keys), an exclusive sum of the bins, one onesweep pass per RADIX_BITS of the keys
    (reads and writes both arrays)."""
    passes = max(1, math.ceil(max(rows - 1, 1).bit_length() / RADIX_BITS))
    bins = passes * RADIX_BINS * I32
    return ([_mem(f"{name}.sort_histogram", n * I64, bins, p), _mem(f"{name}.sort_scan", bins, bins, p)]
            + [_mem(f"{name}.sort_pass", 2 * n * I64, 2 * n * I64, p)] * passes)


def _index_backward(n: float, rows: int, width: float, name: str, p: Any) -> list[OpPrediction]:
    """IndexBackward0 of x[idx] (n indices into `rows` rows of `width` elements): index_put_ with
    accumulate into zeros (module docstring)."""
    a, row = p.a, width * p.a
    ops = [_mem(f"{name}.fill", 0.0, rows * row, p)]
    ops += [_mem(f"{name}.{what}", n * I64, n * I64, p) for what in ("index_wrap", "index_stride", "index_div")]
    ops += [_mem(f"{name}.arange", 0.0, n * I64, p)] + _radix_sort(n, rows, name, p)
    touched = min(n, rows) * row  # the destination rows read and written (accumulated)
    ops.append(_mem(f"{name}.accumulate", 2 * n * I64 + n * width * a + touched, touched, p))
    return ops


def moe_dispatch_backward(p: Any, layer: int) -> list[tuple[OpPrediction, str]]:
    """The backward's kernels for one MoE layer's routing, dispatch and combine (module docstring),
    in the order autograd runs them; the experts' GEMMs and activation are priced with the MLP."""
    sizes = _sizes(p, layer)
    if sizes is None:
        return []
    t, k, e, h, a = sizes
    tk = t * k
    ops = [_strided("moe_bwd_expand_copy", t * h * a, tk * h * a, p)]
    ops += _index_backward(tk, tk, h, "moe_bwd_gather_back", p)
    ops += [_strided("moe_bwd_mul_weights", tk * (h + 1) * a, tk * h * a, p),
            _mem("moe_bwd_mul_outputs", 2 * tk * h * a, tk * h * a, p),
            _mem("moe_bwd_weights_sum", tk * h * a, tk * a, p)]
    ops += _index_backward(tk, tk, 1, "moe_bwd_gather_weights", p)
    ops += [_mem("moe_bwd_weights_cast", tk * a, tk * FP32, p),
            _strided("moe_bwd_div", (tk + t) * FP32, tk * FP32, p),
            _strided("moe_bwd_div_other", (tk + t) * FP32, tk * FP32, p),
            _strided("moe_bwd_div_other2", (tk + t) * FP32, tk * FP32, p),
            _mem("moe_bwd_neg", tk * FP32, tk * FP32, p), _mem("moe_bwd_mul", 2 * tk * FP32, tk * FP32, p),
            _mem("moe_bwd_sum_k", tk * FP32, t * FP32, p),
            _strided("moe_bwd_sum_add", (tk + t) * FP32, tk * FP32, p),
            _mem("moe_bwd_topk_fill", 0.0, t * e * FP32, p),
            _mem("moe_bwd_topk_scatter", tk * (FP32 + I64), tk * FP32, p),
            _mem("moe_bwd_softmax", 2 * t * e * FP32, t * e * FP32, p),
            _mem("moe_bwd_router_cast", t * e * FP32, t * e * a, p)]
    ops += _index_backward(tk, t, h, "moe_bwd_gather_routed", p)
    ops += [_mem("moe_bwd_routed_grad_add", 2 * tk * h * a, tk * h * a, p),
            _mem("moe_bwd_input_grad_add", 2 * t * h * a, t * h * a, p)]
    return [(op, "mlp") for op in ops]
