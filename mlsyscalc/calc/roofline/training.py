"""The backward pass and optimizer step of a training step, as roofline rows.

Backward of a linear y = x W^T is two matmuls: dgrad dx = dy W (tokens x in x out) and wgrad
dW = x^T dy (in x out x tokens), the weight gradient accumulated in fp32 (Megatron's main_grad):
2x the forward FLOPs (Kaplan et al. 2020, section 2.1). Attention backward is FlashAttention-2's
(5 matmuls vs 2 forward). A memory-bound kernel's backward reads what its forward read plus the
incoming gradient and writes the input gradients: bytes (read + write, read). The optimizer is
AdamW with fp32 master weights and moments: per parameter it reads master, gradient, m and v
(16 bytes) and writes master, m, v (12 bytes) and the weight in the model dtype, ~12 FLOPs on
CUDA cores. Activation recomputation (Korthikanti et al. 2022, "Reducing Activation Recomputation
in Large Transformer Models"): "full" runs every layer's forward kernels once more before its
backward (the head is not recomputed); "selective" recomputes only the attention core (their
section 5: the softmax/dropout/QK^T/AV part whose activations grow with S^2). With ZeRO stage
1 or more (Rajbhandari et al. 2020) each data-parallel rank updates 1/dp of the parameters.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from ...dtypes import bytes_per_element
from .head import embedding_backward_ops, loss_backward_ops
from .ops import OpRow, attention_kind, predict_grouped_matmul, predict_matmul, predict_memory_op

EXPLICIT_BACKWARD = ("embedding", "loss.")  # fused-list head rows whose backward kernels are listed, not derived

ADAMW_READ_BYTES = 16  # fp32 master weight, fp32 gradient, fp32 m, fp32 v
ADAMW_WRITE_BYTES = 12  # fp32 master weight, m, v (plus the weight copy in the model dtype)
ADAMW_FLOPS = 12


def matmul_backward(p: Any, row: OpRow) -> list[OpRow]:
    """The dgrad and wgrad rows of one forward matmul row (a routed expert's: grouped, as its forward)."""
    name = row.pred.name
    tokens, groups, n, k = row.pred.dims
    tokens, n, k = int(tokens), int(n), int(k)
    dgrad = predict_grouped_matmul(tokens, groups, k, n, p.act, p.ceil, out_dtype=p.store, name=name + ".dgrad")
    wgrad = predict_matmul(k, n, math.ceil(tokens / groups), p.act, p.ceil, batch=math.ceil(groups),
                           out_dtype="fp32", lead_dims=(k, n), name=name + ".wgrad")  # its K: the tokens
    return [OpRow(op, row.group, row.layers, row.count, "backward") for op in (dgrad, wgrad)]


def backward_rows(p: Any, forward: list[OpRow]) -> list[OpRow]:
    """One or two backward rows per forward row (same layer counts). impl "torch": matmul and
    attention rows only, plus the split-K reductions of the backward GEMMs (its memory-bound
    backward kernels come from calc.roofline.torch_kernels.backward_memory_rows)."""
    torch_impl = p.opts.impl == "torch"
    rows: list[OpRow] = []
    for row in forward:
        pred = row.pred
        if pred.kind == "matmul":
            rows += matmul_backward(p, row)
            continue
        if pred.kind == "memory" and (torch_impl or (row.layers == "head" and pred.name.startswith(EXPLICIT_BACKWARD))):
            continue
        if pred.kind == "attention":
            op = p.attention(attention_kind(pred.name), backward=True)
        else:
            op = predict_memory_op(pred.name + ".bwd", pred.read_bytes + pred.write_bytes, pred.read_bytes,
                                   pred.flops, p.store, p.ceil, shape=pred.shape, cls=backward_class(row))
        rows.append(OpRow(op, row.group, row.layers, row.count, "backward"))
    if torch_impl:
        from .torch_kernels import split_rows

        rows += split_rows(p, [r for r in rows if r.pred.kind == "matmul"])
    else:  # the fused list's loss and embedding backward (calc.roofline.head)
        rows += [OpRow(op, "head", "head", 1, "backward") for op in loss_backward_ops(p) + embedding_backward_ops(p)]
    return rows


NORMS = ("norm", "final_norm")  # the fused list's normalisation kernels (calc.roofline.model)


def backward_class(row: OpRow) -> str:
    """The efficiency class of a memory-bound kernel's backward: a fused norm's (its weight-gradient reduction)
    memory_fused_norm_bwd, other fused kernels' memory_fused, the rest the forward's class."""
    cls = row.pred.memory_class
    return "memory_fused_norm_bwd" if cls == "memory_fused" and row.pred.name in NORMS else cls


def recompute_rows(forward: list[OpRow], mode: str) -> list[OpRow]:
    """The forward rows run again in backward: every layer row ("full") or attention only ("selective")."""
    if mode == "none":
        return []
    if mode == "full":
        return [replace(r, pass_name="recompute") for r in forward if r.layers != "head"]
    return [replace(r, pass_name="recompute") for r in forward if r.pred.kind == "attention"]


def optimizer_row(p: Any, total_params: int) -> OpRow:
    """AdamW over this GPU's parameters: total / tp, and / dp with ZeRO >= 1 (sharded optimizer
    states); impl "torch": torch's fused AdamW, one row per multi-tensor launch."""
    from .torch_kernels import adamw_launches, step_param_tensors

    o = p.opts
    shards = o.tp * (o.dp if o.zero >= 1 else 1)
    params = math.ceil(total_params / shards)
    launches = adamw_launches(params, math.ceil(step_param_tensors(p.spec) / shards)) if o.impl == "torch" else 1
    op = adamw_op(math.ceil(params / launches), o.dtype, p.ceil, o.master_weights)
    return OpRow(op, "optimizer", "step", launches, "optimizer")


def state_bytes(dtype: str, master_weights: bool = True) -> tuple[float, float]:
    """AdamW (read, write) bytes per parameter: fp32 master weight, gradient and moments (plus the
    weight written in the model dtype), or all of them in the model dtype (torch's AdamW on bf16
    parameters: read weight, gradient, m, v; write weight, m, v)."""
    a = bytes_per_element(dtype)
    return (ADAMW_READ_BYTES, ADAMW_WRITE_BYTES + a) if master_weights else (4.0 * a, 3.0 * a)


def torch_mixed_state_bytes(dtype: str, zero: int) -> tuple[float, float]:
    """AdamW (read, write) bytes per parameter as plain torch runs mixed precision (scripts/train_measure.py's
    MixedAdamW): the `dtype` gradient cast to fp32 (read a, write 4), fused AdamW over the fp32 master weight,
    gradient and moments (read 16, write 12), the master copied back to the weight (read 4, write a): 40 bytes
    at bf16 where Megatron's fused optimizer moves 30. FSDP2 (ZeRO-3) steps its fp32 shards with fp32
    gradients and casts at its next all-gather: 16 and 12, no cast and no copy."""
    if zero == 3:
        return float(ADAMW_READ_BYTES), float(ADAMW_WRITE_BYTES)
    a = bytes_per_element(dtype)
    return ADAMW_READ_BYTES + a + 4.0, ADAMW_WRITE_BYTES + 4.0 + a


def clip_ops(params: int, grad_bytes: float, ceil: Any) -> list[Any]:
    """Gradient clipping by the global norm over `params` gradients of `grad_bytes` each (Megatron-LM's
    clip_grad_norm_fp32, torch.nn.utils.clip_grad_norm_ with foreach): a norm pass that reads them, then a scale that
    reads and writes them (priced always: a step whose norm stays under the threshold skips the scale, an upper
    bound). Measured on an H200: reports/train/runs/h200-step-ops/."""
    size = params * grad_bytes
    return [predict_memory_op("grad_norm", size, 4.0, 2.0 * params, "fp32", ceil, shape=f"{params} params"),
            predict_memory_op("grad_clip_scale", size, size, params, "fp32", ceil, shape=f"{params} params")]


def adamw_op(params: int, dtype: str, ceil: Any, master_weights: bool = True,
             state: tuple[float, float] | None = None) -> Any:
    """The AdamW step over `params` parameters held by one GPU (weights kept in `dtype`; without
    master weights the gradient and both moments are in `dtype` too). `state`: (read, write) bytes
    per parameter instead (torch_mixed_state_bytes)."""
    read, write = state or state_bytes(dtype, master_weights)
    return predict_memory_op("adamw", params * read, params * write, params * ADAMW_FLOPS, "fp32", ceil,
                             shape=f"{params} params")
