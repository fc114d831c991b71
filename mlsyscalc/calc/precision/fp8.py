"""FP8 training as Transformer Engine (TE) runs it: the scaling kernels around each FP8 GEMM, priced
as memory-bound roofline rows, and the FP8 weight copies it keeps in memory.

Sources (TE 2.x, github.com/NVIDIA/TransformerEngine; Megatron-LM megatron/core/extensions/
transformer_engine.py):

- Which linears: every decoder-layer projection runs as a TE module in FP8 (Megatron-LM fuses q/k/v
  into one linear and gate/up into another, so the linears reading one tensor cast it once); the
  router, embedding and lm_head stay bf16: Megatron-LM runs them outside TE (the output layer is its
  own `tensor_parallel.ColumnParallelLinear`, megatron/core/models/gpt/gpt_model.py), and TE's
  `fp8_autocast` changes only TE modules. So the head's rows are the bf16 roofline's (`pass_rows`).
- Current scaling (`Float8CurrentScaling`; csrc/quantizer.cpp `Float8CurrentScalingQuantizer::
  quantize_impl`): three kernels per tensor cast: an amax pass (read the bf16 tensor), the scale from
  the amax, the cast (read bf16, write FP8). A norm feeding an FP8 linear computes the amax itself
  (csrc/extensions/normalization.cpp, FUSED_NORM_AMAX_FP8): no amax pass there.
- Delayed scaling (`DelayedScaling`): the scale comes from the amax history, so one cast kernel per
  tensor (it records the amax as it goes); a norm feeding an FP8 linear writes FP8 itself
  (FULLY_FUSED), no cast.
- Columnwise copies (Hopper's FP8 GEMM takes only the TN layout): the weight-gradient GEMM reads the
  transposes of the input and of the output gradient, the input gradient GEMM the weight's transpose.
  A cast that needs both writes both (cast + transpose: read 2, write 1 + 1 bytes an element);
  module/linear.py and layernorm_linear.py. Under sequence parallelism an input that is all-gathered
  is cast rowwise only on the local shard ("All-gather is not supported with FP8 column-wise data"),
  and backward gathers it again and transposes the gathered FP8 tensor (read 1, write 1); the same for
  a row-parallel linear's output gradient (module/base.py `grad_output_preprocess`).
- Weights: cast once per step when the module is told the micro-batch (`is_first_microbatch`, which
  Megatron-LM's TE wrappers pass; the FP8 copy, rowwise and transpose, is cached for the step's other
  micro-batches: module/linear.py `quantize_weight(..., update_workspace=...)`). With FP8 parameters
  (Megatron-LM --fp8-param-gather) the optimizer writes the FP8 weight from the fp32 master shard
  (read 4 bytes, write 1; plus an amax pass of the shard with current scaling) and the transposes are
  made after the parameter all-gather (read 1, write 1).

Every kernel is `predict_memory_op`: its bytes at efficiency.memory plus the fixed cost of a kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping

from ...specs.model import ModelSpec
from ..counts.activations import LINEAR_INPUT
from ..roofline.calibration import Ceilings
from ..counts.layers import Linear, layer_linears
from ..parallel.shards import linear_weight_per_rank
from ..roofline.ops import OpRow, predict_memory_op
from ..parallel.tensor_parallel import kv_divisor, tp_kind
from . import fp4 as train_fp4
from .fp4 import AMAX_RECIPES, BLOCK_RECIPES, low_precision

RECIPES = ("delayed", "current")  # TE's DelayedScaling and Float8CurrentScaling
DEFAULT_RECIPE = "delayed"  # TE's default recipe, and Megatron-LM's --fp8-recipe default
BF16, FP8, FP32 = 2.0, 1.0, 4.0  # bytes an element
_NORM_FED = ("attn_in", "mlp_in", "q_latent", "kv_latent")  # a TE LayerNormLinear: the norm is fused in
# the tensor each FP8 linear reads (the router is not one; down_proj reads the MLP's activation)
_INPUT = {**{k: v for k, v in LINEAR_INPUT.items() if k != "router"}, "down_proj": "mlp_act"}


def fp8_bytes(fp8_params: bool, dtype: str = "fp8") -> dict[str, float]:
    """`memory_train.default_bytes` keys of FP8 training: an FP8 activation element, and the FP8 copies TE
    keeps of each FP8 linear's weight element (rowwise + transpose; the transpose only when the weight
    itself is FP8); a block-scaled dtype's (mxfp8, nvfp4: calc.precision.fp4) with its scales."""
    if dtype in BLOCK_RECIPES:
        return {"fp8": train_fp4.saved_bytes(dtype), "fp8_weight_copy": train_fp4.weight_copy_bytes(dtype)}
    return {"fp8": FP8, "fp8_weight_copy": FP8 if fp8_params else 2 * FP8}


def fp8_weight_states(spec: ModelSpec, layers: Iterable[int], tp: int, ep: int, nbytes: Mapping[str, float],
                      fp8_params: bool, etp: int | None = None) -> tuple[float, float]:
    """(FP8 weight copies, bytes the weights shrink by) of one rank holding `layers`: per FP8-linear weight
    element fp8_weight_copy bytes; with FP8 parameters the weight itself is `fp8` bytes, not `weight`."""
    elements = sum(fp8_linear_weights(spec, layer, tp, ep, etp) for layer in layers)
    saving = elements * (nbytes["weight"] - nbytes["fp8"]) if fp8_params else 0.0
    return elements * nbytes["fp8_weight_copy"], saving


def fp8_linear_weights(spec: ModelSpec, layer: int, tp: int, ep: int = 1, etp: int | None = None) -> int:
    """Weight elements of one layer's FP8 linears on one rank (the router is not one; routed experts split
    over etp, None: tp)."""
    kv = kv_divisor(spec, tp)
    return sum(linear_weight_per_rank(lin, tp, ep, kv, etp) for lin in layer_linears(spec, layer)
               if lin.name != "router")


@dataclass(frozen=True)
class Gemm:
    """The FP8 linears of one layer that read one input tensor (one TE module in Megatron-LM)."""

    key: str  # e.g. "attn_in", "experts.mlp_in"
    tokens: float  # rows of the input (micro-batch tokens; routed slots for experts)
    width: int  # input features per rank
    out: int  # output features per rank, summed over the linears
    weights: int  # weight elements per rank
    kind: str  # tp_kind: column, row or replicated
    norm_fed: bool


def layer_gemms(forward: Iterable[OpRow]) -> dict[str, list[Gemm]]:
    """Per layer kind ("layers", "moe layers"), the FP8 GEMM groups of one layer, from the roofline's forward
    matmul rows (dims: tokens, groups, n, k per rank)."""
    out: dict[str, dict[str, Gemm]] = {}
    for row in forward:
        pred = row.pred
        base = pred.name.rsplit(".", 1)[-1]
        if pred.kind != "matmul" or row.layers == "head" or base not in _INPUT:
            continue
        prefix = pred.name[: len(pred.name) - len(base)]
        key = prefix + _INPUT[base]
        tokens, groups, n, k = pred.dims
        weights = int(n) * int(k) * max(1, round(groups))
        kind = tp_kind(Linear(base, 1, 1, False, "mlp"))  # tp_kind reads the name only
        kinds = out.setdefault(row.layers, {})
        g = kinds.get(key)
        kinds[key] = Gemm(key, tokens, int(k), int(n), weights, kind, _INPUT[base] in _NORM_FED and not prefix) \
            if g is None else replace(g, out=g.out + int(n), weights=g.weights + weights)
    return {layers: list(gemms.values()) for layers, gemms in out.items()}


def _cast(name: str, elements: float, write: float, recipe: str, amax: bool) -> list[tuple[str, float, float]]:
    """(name, read, write bytes) of the kernels casting `elements` bf16 elements to FP8, writing `write`
    bytes an element (1 rowwise, 2 with the transpose): current scaling adds the amax pass (unless `amax`
    is False: the norm computed it) and the scale kernel."""
    kernels = []
    if recipe == "current":
        if amax:
            kernels.append((f"{name} amax", elements * BF16, 4.0))
        kernels.append((f"{name} scale", 4.0, 8.0))
    return kernels + [(f"{name} cast", elements * BF16, elements * write)]


def gemm_kernels(g: Gemm, tp: int, sp: bool, recipe: str) -> dict[str, list[tuple[str, float, float]]]:
    """The scaling kernels of one GEMM group for one micro-batch: {"forward": [...], "backward": [...]}."""
    gather_in = sp and tp > 1 and g.kind == "column" and g.norm_fed  # the norm output is sequence-split
    gather_dy = sp and tp > 1 and g.kind == "row"  # the output gradient arrives sequence-split
    x, dy = g.tokens * g.width, g.tokens * g.out
    if recipe in BLOCK_RECIPES:  # MXFP8 / NVFP4: both copies of each tensor cast from bf16 (calc.precision.fp4)
        return train_fp4.gemm_kernels(g.key, x, dy, recipe)
    fwd: list[tuple[str, float, float]] = []
    bwd: list[tuple[str, float, float]] = []
    name = f"{g.key}.fp8"  # "experts.*": scaled by the capacity factor as the expert GEMMs are (train_parts)
    if gather_in:  # local rowwise cast (fused into the norm with delayed scaling); transpose after the re-gather
        if recipe == "current":
            fwd += _cast(f"{name} input", x / tp, FP8, recipe, amax=False)
        bwd.append((f"{name} input transpose", x * FP8, x * FP8))
    elif g.norm_fed and recipe == "delayed":  # the norm wrote FP8: only the transpose for the wgrad GEMM
        fwd.append((f"{name} input transpose", x * FP8, x * FP8))
    else:
        fwd += _cast(f"{name} input", x, 2 * FP8, recipe, amax=not g.norm_fed)
    if gather_dy:
        bwd += _cast(f"{name} grad_output", dy / tp, FP8, recipe, amax=True)
        bwd.append((f"{name} grad_output transpose", dy * FP8, dy * FP8))
    else:
        bwd += _cast(f"{name} grad_output", dy, 2 * FP8, recipe, amax=True)
    return {"forward": fwd, "backward": bwd}


def weight_kernels(g: Gemm, recipe: str, fp8_params: bool, shard: int,
                   expert_shard: int | None = None) -> list[tuple[str, float, float]]:
    """The kernels making a GEMM group's FP8 weights once per step: cast + transpose of the bf16 weight, or
    with FP8 parameters the optimizer's cast of the fp32 master shard (1 / shard of it) and the transpose.
    The routed experts' (the rank's E / ep of them, the roofline's groups) shard over expert_shard ranks."""
    w, name = float(g.weights), f"{g.key}.fp8 weight"
    if g.key.startswith("experts.") and expert_shard is not None:  # ZeRO over the expert data-parallel group
        shard = expert_shard
    if recipe in BLOCK_RECIPES:
        return train_fp4.weight_kernels(g.key, w, recipe)
    if not fp8_params:
        return _cast(name, w, 2 * FP8, recipe, amax=True)
    kernels = [(f"{name} amax", w / shard * FP32, 4.0), (f"{name} scale", 4.0, 8.0)] if recipe == "current" else []
    return kernels + [(f"{name} cast", w / shard * FP32, w / shard * FP8), (f"{name} transpose", w * FP8, w * FP8)]


def _rows(kernels: list[tuple[str, float, float]], layers: str, count: int, pass_name: str, ceil: Ceilings) -> list[OpRow]:
    return [OpRow(predict_memory_op(name, read, write, 0.0, "bf16", ceil), "fp8", layers, count, pass_name)
            for name, read, write in kernels]


def pass_rows(spec: ModelSpec, result: Any, *, sp: bool, recipe: str) -> list[OpRow]:
    """The rows of one micro-batch's passes: the roofline's, and in fp8 its scaling rows (`fp8_rows`) with the
    head (embedding, final norm, lm_head) priced in bf16 as Megatron-LM runs it."""
    scaling = fp8_rows(result, sp=sp, recipe=recipe)
    if not scaling:
        return list(result.rows)
    from ..roofline.model import predict_model

    bf16 = predict_model(spec, result.ceilings, replace(result.options, dtype="bf16"))
    return ([r for r in result.rows if r.layers != "head"] + [r for r in bf16.rows if r.layers == "head"]
            + scaling)


def fp8_rows(result: Any, *, sp: bool, recipe: str) -> list[OpRow]:
    """Forward and backward scaling rows of one micro-batch (layer counts as the roofline's rows), from a
    `calc.roofline.model.ModelRoofline` of phase train in fp8; [] for another dtype."""
    o = result.options
    if not low_precision(o.compute_dtype):
        return []
    recipe = o.compute_dtype if o.compute_dtype in BLOCK_RECIPES else recipe  # a block-scaled dtype is its recipe
    forward = [r for r in result.rows if r.pass_name == "forward"]
    counts = {r.layers: r.count for r in forward if r.pred.kind == "matmul" and r.layers != "head"}
    rows: list[OpRow] = []
    for layers, gemms in layer_gemms(forward).items():
        for g in gemms:
            for pass_name, kernels in gemm_kernels(g, o.tp, sp, recipe).items():
                rows += _rows(kernels, layers, counts[layers], pass_name, result.ceilings)
    return rows


def weight_cast_s(gemms: Mapping[str, Iterable[Gemm]], ceil: Ceilings, *, recipe: str, fp8_params: bool,
                  shard: int, expert_shard: int | None = None) -> dict[str, float]:
    """Seconds of one layer's once-a-step weight casts, per layer kind ("dense", "moe") of `StageParts.fp8_gemms`."""
    return {kind: sum(r.total_s for g in groups
                      for r in _rows(weight_kernels(g, recipe, fp8_params, shard, expert_shard), kind, 1, "step",
                                     ceil))
            for kind, groups in gemms.items()}


def amax_reductions(gemms: Iterable[Gemm], tp: int, sp: bool, recipe: str) -> tuple[int, int]:
    """(forward, backward) amax all-reduces over the TP group in one layer and micro-batch: with current scaling
    under sequence parallelism each rank casts its sequence shard, so the amax of a column-parallel input
    (forward) and of a row-parallel output gradient (backward) is reduced first (linear.py and
    layernorm_linear.py `set_quantizer_amax_reduction_group`; csrc/quantizer.cpp `with_amax_reduction`)."""
    if recipe not in AMAX_RECIPES or not sp or tp == 1:
        return 0, 0
    gemms = list(gemms)
    return sum(g.kind == "column" and g.norm_fed for g in gemms), sum(g.kind == "row" for g in gemms)


def stage_fp8_s(parts: Any, dense: int, moe: int, recompute: str, *, weights: Mapping[str, float], recipe: str,
                tp: int = 1, sp: bool = False, amax_reduce_s: float = 0.0) -> tuple[float, float, float]:
    """Of a stage with `dense` and `moe` layers, from its `StageParts` ((0, 0, 0) unless fp8): the scaling
    kernels of one micro-batch (part of the stage's forward and backward), the amax all-reduces of one
    micro-batch (`amax_reductions` x `amax_reduce_s` each; a full recomputation repeats the forward ones) and
    the weight casts of the step (`weights`: one layer's, per kind, from `weight_cast_s`)."""
    if not parts.fp8_s:
        return 0.0, 0.0, 0.0
    passes = ("forward", "backward") + ((f"recompute_{recompute}",) if recompute != "none" else ())
    counts = {"dense": dense, "moe": moe}
    per_mb = sum(n * parts.fp8_s[kind][p] for kind, n in counts.items() if n for p in passes)
    reduces = 0
    for kind, n in counts.items():
        fwd, bwd = amax_reductions(parts.fp8_gemms.get(kind, ()), tp, sp, recipe)
        reduces += n * (fwd * (2 if recompute == "full" else 1) + bwd)
    return per_mb, reduces * amax_reduce_s, sum(n * weights.get(kind, 0.0) for kind, n in counts.items())
