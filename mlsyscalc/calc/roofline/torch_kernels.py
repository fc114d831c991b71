"""The kernels plain PyTorch runs for a decoder step (`RooflineOptions.impl = "torch"`).

`impl = "fused"` prices one kernel per op (a rotary embedding, a gated activation, a KV-cache
append are one kernel each). Plain PyTorch (eager, or the same kernels replayed from a CUDA
graph) runs more, smaller kernels; this module lists them, each read once and written once as
in calc.roofline.memory_bound, so that more kernels cost their bytes and their fixed cost. The lists
come from torch's own implementation (aten ops on CUDA, torch 2.x) and were checked against the
profiler tables of `mlsys bench model` (docs/roofline.md, "Kernels per op"):

- RMSNorm / LayerNorm: one kernel (torch's fused norm); backward two (input grad, weight grad).
- rotary on q and on k, each: x * cos, roll(x), addcmul(., roll, sin) = 3 kernels; partial
  rotary adds a contiguous copy of the rotated slice and a cat of the two parts. Backward:
  grad * cos, grad * sin, roll, add = 4 kernels per tensor; partial rotary adds the slices'
  backward (a zero fill and a copy each) and their sum. The broadcasting, rolling and strided
  ones run at efficiency.memory_broadcast (TensorIterator does not vectorise them).
- gated MLP: act(gate) and act * up = 2 kernels; backward: grad * up, grad * act, act_backward.
  Plain MLP: act, and act_backward.
- KV-cache append (inference): a copy for K and one for V.
- residual adds: 2 per layer (parallel attention too: x + attn + mlp is two adds).
- cuBLAS split-K: a skinny GEMM that cuBLAS splits is followed by a reduction of the fp32
  partial tiles (`cublas_splits`: the rule the profiles show); flash-decoding attention with KV
  splits (`Tiling.split` > 1) by a combine kernel.
- inference logits are cast to fp32 (`.float()`), one kernel.
- train: cuDNN's attention backward adds rowsum(dO * O), the dQ conversion and, for grouped
  queries, a reduction of dK and of dV over the query heads of each KV head (fmha_reduce_head);
  autograd adds the gradients of a tensor read by several ops (q/k/v share an input,
  gate/up share one, and the two residual branch points of a layer); the loss is a cast to
  fp32, log_softmax and nll_loss forward (backward: zero fill, nll scatter, log_softmax
  backward, cast back); a Linear's bias gradient is one reduction over the tokens; gradients
  kept between steps (zero_grad(set_to_none=False)) cost an accumulating add per parameter
  tensor and torch._foreach_zero_'s multi-tensor launches (depth 1: at most 110 tensors); fused
  AdamW runs one multi-tensor launch per 320 chunks of 65536 elements (torch's
  multi_tensor_apply, depth 4: at most 36 tensors each).
- MoE routing, dispatch and combine, forward and backward: calc.roofline.torch_moe.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from ...specs.model import ModelSpec
from ..counts.layers import QK_NORMS, Linear, head_linears, layer_linears, norm_width, qk_norm_params, sink_params
from .memory_bound import copy_cast_op, elementwise_op, embedding_op, norm_op
from .memory_bound import pass_memory_op as _mem, pass_strided_op as _strided
from .cublas_split import cublas_splits
from .ops import OpPrediction, OpRow
from .torch_moe import moe_dispatch_backward, moe_dispatch_kernels

FP32 = 4
ADAM_CHUNK = 65536  # elements per multi-tensor chunk (ATen's MultiTensorApply.cuh kChunkSize)
ADAM_BLOCKS = 320  # chunks per launch (depth_to_max_blocks)
ADAM_TENSORS = 36  # tensors per launch at depth 4: param, grad, exp_avg, exp_avg_sq (depth_to_max_tensors)
ZERO_TENSORS = 110  # tensors per launch at depth 1 (_foreach_zero_ of zero_grad)


def rotary_kernels(p: Any, rows: int, head_dim: int, rot: int, backward: bool = False) -> list[OpPrediction]:
    """One rotated tensor of `rows` (tokens x heads) vectors: 3 kernels forward, 4 backward (all but
    the backward's add broadcast the (S, 1, rot) table or roll: memory_broadcast). Partial rotary:
    forward + a slice copy and a cat; backward + each slice's zero fill and copy, and their sum."""
    a, x = p.a, rows * rot * p.a
    table = p.opts.new_tokens * rot * a
    shape, full = f"{rows}x{rot}", rows * head_dim * a
    if backward:
        ops = [_strided("rotary.bwd_mul_cos", x + table, x, p, shape),
               _strided("rotary.bwd_mul_sin", x + table, x, p, shape),
               _strided("rotary.bwd_roll", x, x, p, shape), _mem("rotary.bwd_add", 2 * x, x, p, shape)]
        if rot < head_dim:  # slice_backward of x[..., :rot] and x[..., rot:]: zeros, copy in; the two added
            rest = full - x
            ops += [_mem("rotary.bwd_slice_fill", 0, full, p, f"{rows}x{head_dim}")] * 2 + [
                _strided("rotary.bwd_slice_copy", x, x, p, shape),
                _strided("rotary.bwd_pass_copy", rest, rest, p, f"{rows}x{head_dim - rot}"),
                _mem("rotary.bwd_slice_add", 2 * full, full, p, f"{rows}x{head_dim}")]
        return ops
    ops = [_strided("rotary.mul_cos", x + table, x, p, shape), _strided("rotary.roll", x, x, p, shape),
           _strided("rotary.addcmul", 2 * x + table, x, p, shape)]
    if rot < head_dim:  # the rotated slice made contiguous for roll, and the two parts joined
        ops += [_strided("rotary.slice_copy", x, x, p, shape), _strided("rotary.cat", full, full, p, f"{rows}x{head_dim}")]
    return ops


def _rotated(p: Any, layer: int) -> list[tuple[int, int, int]]:
    """(rows, head_dim, rotary_dim) of each tensor the rotary embedding runs on in `layer`: q, then k
    (none on a NoPE layer)."""
    spec, t = p.spec, p.tokens
    if not spec.layer_uses_rope(layer):
        return []
    if spec.mla:
        r = spec.mla.qk_rope_head_dim
        return [(t * p.heads, r, r), (t, r, r)]
    rot = int(spec.head_dim * spec.rotary_fraction)
    return [(t * p.heads, spec.head_dim, rot), (t * p.kv_heads, spec.head_dim, rot)]


def _qk_normed(p: Any, layer: int) -> list[tuple[int, int, bool]]:
    """(rows, width, has weights) of the q and k norms of `layer` on this rank: per head (rows of
    head_dim) or over all heads at once (olmo2: one row per token); none where the layer has none."""
    spec, t = p.spec, p.tokens
    if not spec.layer_has_qk_norm(layer):
        return []
    kind = QK_NORMS[spec.qk_norm_type]
    weights = kind.params_per_element > 0
    if kind.per_head:
        return [(t * p.heads, spec.head_dim, weights), (t * p.kv_heads, spec.head_dim, weights)]
    return [(t, p.heads * spec.head_dim, weights), (t, p.kv_heads * spec.head_dim, weights)]


def _mlp_kernels(p: Any, elements: float, gated: bool, backward: bool) -> list[OpPrediction]:
    act = p.store
    if backward:
        ops = [elementwise_op(elements, 2, 1, 5, act, p.ceil, name="mlp_act.bwd")]
        if gated:
            ops += [elementwise_op(elements, 2, 1, 1, act, p.ceil, name="mlp_mul.bwd_up"),
                    elementwise_op(elements, 2, 1, 1, act, p.ceil, name="mlp_mul.bwd_act")]
        return ops
    ops = [elementwise_op(elements, 1, 1, 4, act, p.ceil, name="mlp_act")]
    if gated:
        ops.append(elementwise_op(elements, 2, 1, 1, act, p.ceil, name="mlp_mul"))
    return ops


def layer_memory_ops(p: Any, layer: int, mlp_elements: float) -> list[tuple[OpPrediction, str]]:
    """The memory-bound kernels of one decoder layer's forward, as plain PyTorch runs them."""
    spec, o, t, act, ceil = p.spec, p.opts, p.tokens, p.store, p.ceil
    h = spec.hidden_size
    # a LayerNorm without affine weights (norm "none") still normalises: one kernel all the same
    ops: list[tuple[OpPrediction, str]] = [(norm_op(t, h, act, ceil), "norm")] * spec.norms_per_layer
    ops += [(norm_op(rows, width, act, ceil, name="qk_norm"), "attention") for rows, width, _ in _qk_normed(p, layer)]
    for rows, dim, rot in _rotated(p, layer):
        ops += [(k, "attention") for k in rotary_kernels(p, rows, dim, rot)]
    if o.phase != "train":
        if spec.mla:
            width = spec.kv_cache_elements_per_token
            ops += [(elementwise_op(t * width, 1, 1, 0, act, ceil, name="kv_cache_cat"), "attention"),
                    (copy_cast_op(t * width, act, o.kv_dtype_name, ceil), "attention")]
        else:
            ops += [(copy_cast_op(t * p.kv_heads * d, act, o.kv_dtype_name, ceil, name=name), "attention")
                    for d, name in ((spec.head_dim, "kv_cache_write.k"), (spec.v_head_dim, "kv_cache_write.v"))]
    gated = spec.gated_mlp or spec.layer_is_moe(layer)
    ops += [(k, "mlp") for k in _mlp_kernels(p, mlp_elements, gated, False)]
    ops += [(elementwise_op(t * h, 2, 1, 1, act, ceil, name="residual_add"), "norm")] * 2
    return ops + moe_dispatch_kernels(p, layer)


def split_rows(p: Any, rows: list[OpRow]) -> list[OpRow]:
    """cuBLAS's split-K reductions and flash-decoding's combine kernels for the rows that split."""
    extra = []
    for row in rows:
        tiling = row.pred.tiling
        if tiling is None or tiling.split <= 1:
            continue
        if row.pred.kind == "matmul":
            if not cublas_splits(row.pred, p.ceil.sm_count):
                continue
            tokens, _, n, _ = row.pred.dims
            out = tokens * n
            op = _mem(row.pred.name + ".splitk_reduce", tiling.split * out * FP32, out * p.a, p,
                      f"{tiling.split}x{int(tokens)}x{int(n)}")
        else:
            out = p.opts.batch * p.heads * p.opts.new_tokens * p.spec.v_head_dim
            op = _mem(row.pred.name + ".combine", tiling.split * out * FP32 * (1 + 2 / p.spec.v_head_dim),
                      out * p.a, p, f"{tiling.split}x{out}")
        extra.append(OpRow(op, row.group, row.layers, row.count, row.pass_name))
    return extra


def head_ops(p: Any) -> list[OpPrediction]:
    """Embedding (and learned positions: index, gather, add) before the layers; the fp32 cast of
    the logits after the lm_head (inference)."""
    spec, t, act, ceil = p.spec, p.tokens, p.store, p.ceil
    ops = [embedding_op(t, spec.embed_dim, act, ceil)]
    if spec.learned_positions:
        h = spec.hidden_size
        ops += [_mem("positions.index", 0, t * 8, p), embedding_op(t, h, act, ceil, name="positions.gather"),
                elementwise_op(t * h, 2, 1, 1, act, ceil, name="positions.add")]
    return ops


def logits_cast(p: Any) -> OpPrediction:
    elements = p.opts.logit_tokens * _vocab(p)
    return _mem("logits.float", elements * p.a, elements * FP32, p, f"{p.opts.logit_tokens}x{_vocab(p)}")


def _vocab(p: Any) -> int:
    return math.ceil(p.spec.vocab_size / p.opts.tp)


SOFTMAX_READS = 3  # cunn_SoftMaxForward reads a row for its max, its sum of exps and the output
SOFTMAX_BWD_READS = 3  # cunn_SoftMaxBackward: the incoming gradient for its sum, then it and the output


def loss_ops(p: Any, backward: bool) -> list[OpPrediction]:
    """Cross-entropy over every position in fp32 (torch F.cross_entropy on logits.float()). Rows
    wider than shared memory holds (a vocabulary) are read once per pass: log_softmax forward
    SOFTMAX_READS times, its backward SOFTMAX_BWD_READS (H100 profiles: llama3-8b B1 S4096,
    4096 x 128256 fp32, 2.80 / 2.88 ms, 0.90 / 0.88 of 3.35 TB/s at four passes each)."""
    t, v, a = p.tokens, _vocab(p), p.a
    tv = t * v
    if p.opts.loss == "bf16":  # F.cross_entropy on the bf16 logits: the same passes, in the logits' dtype, no casts
        if backward:
            return [_mem("loss.bwd_fill", 0, tv * a, p), _mem("loss.bwd_nll", t * 8, t * a, p),
                    _mem("loss.bwd_log_softmax", SOFTMAX_BWD_READS * tv * a, tv * a, p)]
        return [_mem("loss.log_softmax", SOFTMAX_READS * tv * a, tv * a, p), _mem("loss.nll", t * 12, FP32, p)]
    if backward:
        return [_mem("loss.bwd_fill", 0, tv * FP32, p), _mem("loss.bwd_nll", t * 8, t * FP32, p),
                _mem("loss.bwd_log_softmax", SOFTMAX_BWD_READS * tv * FP32, tv * FP32, p),
                _mem("loss.bwd_cast", tv * FP32, tv * a, p)]
    return [_mem("loss.cast", tv * a, tv * FP32, p), _mem("loss.log_softmax", SOFTMAX_READS * tv * FP32, tv * FP32, p),
            _mem("loss.nll", t * 12, FP32, p)]


def _layer_backward(p: Any, layer: int, mlp_elements: float) -> list[tuple[OpPrediction, str]]:
    spec, t, act, ceil = p.spec, p.tokens, p.store, p.ceil
    h = spec.hidden_size
    ops: list[tuple[OpPrediction, str]] = []
    affine = norm_width(spec) > 0  # without affine weights a norm has no weight gradient
    for n, width, weight in [(t, h, affine)] * spec.norms_per_layer + _qk_normed(p, layer):
        x = n * width * p.a
        ops.append((_mem("norm.bwd_input", 2 * x, x, p), "norm"))
        ops += [(_mem("norm.bwd_weight", 2 * x, width * FP32, p), "norm")] if weight else []
    for rows, dim, rot in _rotated(p, layer):
        ops += [(k, "attention") for k in rotary_kernels(p, rows, dim, rot, backward=True)]
    out = t * p.heads * spec.v_head_dim
    ops += [(_mem("attention.bwd_dot_do_o", 2 * out * p.a, t * p.heads * FP32, p), "attention"),
            (_mem("attention.bwd_dq_convert", t * p.heads * spec.head_dim * FP32, t * p.heads * spec.head_dim * p.a, p),
             "attention")]
    if p.heads != p.kv_heads:  # cuDNN's fmha_reduce_head: dK and dV summed over each KV head's query heads
        ops += [(_mem(f"attention.bwd_reduce_head.{x}", t * p.heads * d * p.a, t * p.kv_heads * d * p.a, p), "attention")
                for x, d in (("k", spec.head_dim), ("v", spec.v_head_dim))]
    gated = spec.gated_mlp or spec.layer_is_moe(layer)
    ops += [(k, "mlp") for k in _mlp_kernels(p, mlp_elements, gated, True)]
    ops += [(elementwise_op(t * h, 2, 1, 1, act, ceil, name="grad_accumulate"), "norm")] * _fan_out_adds(spec, layer)
    return ops + bias_grad_ops(p, layer_linears(spec, layer)) + moe_dispatch_backward(p, layer)


def bias_grad_ops(p: Any, linears: list[Linear]) -> list[tuple[OpPrediction, str]]:
    """A Linear's bias gradient: dY summed over the tokens, one reduction kernel per bias (MoE
    experts' biases are not listed)."""
    ops = []
    for lin in linears:
        if lin.bias_params and lin.copies == 1:
            width = lin.bias_params * p.a / p.opts.tp
            op = _mem("bias.bwd_sum", p.tokens * width, width, p, f"{p.tokens}x{lin.bias_params}")
            ops.append((op, lin.group))
    return ops


def _fan_out_adds(spec: ModelSpec, layer: int) -> int:
    """Gradient additions where a tensor feeds several ops: the two residual branch points, the
    linears reading the same normed input (q/k/v; gate/up)."""
    shared: dict[tuple[str, int], int] = {}
    for lin in layer_linears(spec, layer):
        if lin.copies == 1 and lin.name.split(".")[-1] not in ("o_proj", "down_proj"):
            key = (lin.group, lin.in_features)
            shared[key] = shared.get(key, 0) + 1
    return 2 + sum(n - 1 for n in shared.values())


def param_tensors(spec: ModelSpec, layer: int | None) -> tuple[int, int]:
    """(parameter tensors, parameters) of one decoder layer (layer index) or of the head (None)."""
    bias = 1 if spec.norm == "layernorm" and spec.norm_bias else 0
    linears = head_linears(spec) if layer is None else layer_linears(spec, layer)
    # a tied lm_head holds no weight of its own (the embedding's), only its bias if it has one; routed
    # experts keep each projection as one stacked (E, out, in) tensor (bench._torch_layers.GroupedExperts)
    tensors = sum((0 if lin.tied else 1) + (lin.copies if lin.bias_params else 0) for lin in linears)
    params = sum(lin.params for lin in linears)
    if layer is None:
        norms = 1 if spec.final_norm and norm_width(spec) else 0
        tensors += 1 + (1 if spec.learned_positions else 0) + norms * (1 + bias)
        params += spec.vocab_size * spec.embed_dim + spec.learned_positions * spec.hidden_size + norms * spec.hidden_size * (1 + bias)
    else:
        norms = spec.norms_per_layer if norm_width(spec) else 0
        qk = qk_norm_params(spec, layer)
        tensors += norms * (1 + bias) + (0 if not qk else 2 * QK_NORMS[spec.qk_norm_type].params_per_element)
        params += norms * spec.hidden_size * (1 + bias) + qk
        tensors += 1 if spec.attention_sinks else 0
        params += sink_params(spec)
        if spec.mla is not None:  # RMSNorms on the compressed query (q_a_layernorm) and K/V latents (kv_a_layernorm)
            tensors += (1 if spec.mla.q_lora_rank else 0) + 1
            params += (spec.mla.q_lora_rank or 0) + spec.mla.kv_lora_rank
    return tensors, params


def _grad_rows(p: Any, tensors: int, params: int, layers: str, count: int) -> list[OpRow]:
    """Autograd's accumulating add into the kept .grad, one per parameter tensor."""
    size = params * p.a / p.opts.tp
    add = _mem("grad.accumulate", 2 * size / tensors, size / tensors, p, f"{tensors} tensors")
    return [OpRow(add, "optimizer", layers, count * tensors, "backward")]


def zero_grad_row(p: Any, params: int) -> OpRow:
    """optimizer.zero_grad(set_to_none=False) with a fused (foreach) optimizer: torch._foreach_zero_,
    multi-tensor launches of at most ADAM_BLOCKS chunks and ZERO_TENSORS tensors (depth 1)."""
    tensors = step_param_tensors(p.spec)
    local = math.ceil(params / p.opts.tp)
    launches = max(math.ceil(local / (ADAM_BLOCKS * ADAM_CHUNK)), math.ceil(tensors / ZERO_TENSORS), 1)
    op = _mem("grad.zero", 0, local * p.a / launches, p, f"{tensors} tensors")
    return OpRow(op, "optimizer", "step", launches, "optimizer")


def backward_memory_rows(p: Any, layer_kinds: list[tuple[int, int, str]], mlp_elements: Callable[[int], float]
                         ) -> list[OpRow]:
    """The memory-bound backward kernels of a training step (matmul and attention backward rows
    come from calc.roofline.training as for impl "fused")."""
    spec = p.spec
    rows: list[OpRow] = []
    for layer, count, _ in layer_kinds:
        where = "moe layers" if spec.layer_is_moe(layer) else "layers"
        rows += [OpRow(op, group, where, count, "backward") for op, group in _layer_backward(p, layer, mlp_elements(layer))]
        rows += _grad_rows(p, *param_tensors(spec, layer), where, count)
    head = [norm_op(p.tokens, spec.hidden_size, p.store, p.ceil, name="final_norm")] if spec.final_norm else []
    ops = loss_ops(p, True) + [_mem("final_norm.bwd", 3 * op.write_bytes, op.write_bytes, p) for op in head]
    e = p.tokens * spec.embed_dim * p.a
    ops += [_mem("embedding.bwd_sort", p.tokens * 16, p.tokens * 16, p),
            _mem("embedding.bwd_fill", 0, spec.vocab_size * spec.embed_dim * p.a, p),
            _mem("embedding.bwd_scatter", e + p.tokens * 8, e, p)]
    rows += [OpRow(op, "head", "head", 1, "backward") for op in ops]
    rows += [OpRow(op, "head", "head", 1, "backward") for op, _ in bias_grad_ops(p, head_linears(spec))]
    return rows + _grad_rows(p, *param_tensors(spec, None), "head", 1)


def adamw_launches(params: int, tensors: int) -> int:
    """Kernel launches of torch's fused AdamW (multi_tensor_apply): each takes at most
    ADAM_BLOCKS chunks of ADAM_CHUNK elements and ADAM_TENSORS tensors."""
    return max(math.ceil(params / (ADAM_BLOCKS * ADAM_CHUNK)), math.ceil(tensors / ADAM_TENSORS), 1)


def step_param_tensors(spec: ModelSpec) -> int:
    return param_tensors(spec, None)[0] + sum(param_tensors(spec, i)[0] for i in range(spec.num_layers))
