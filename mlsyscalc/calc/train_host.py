"""The host side of a training step: the CPU time to issue a stage's kernels, and when it paces the step.

A GPU runs a kernel only after the host has issued it. Megatron-LM's host (fused kernels, no per-op
Python dispatch beyond the module code) keeps ahead of the GPU at the sizes it trains, so its step is
the GPU's (`--framework megatron`, the default: no host term). PyTorch's own parallelism
(`--framework torch`: eager modules, DTensor tensor parallelism, FSDP2, torch.distributed.pipelining)
spends tens to hundreds of microseconds of CPU per op; when the host needs longer to issue a step than
the GPU needs to run it, the GPU waits (measured: reports/train/measured.md, "Where the GPU time goes").

The host seconds of one step on one GPU (stage s, m micro-batches):

    host_fb  = m x ( ops_s x op_s  +  matmuls_s x dtensor_matmul_s [tp > 1]  +  layers_s x fsdp_layer_s [ZeRO-3] )
    host_opt = tensors_s x dtensor_param_s   [parameters are DTensors: tp > 1 or ZeRO-3]

ops_s and matmuls_s are the kernels the roofline prices for one micro-batch on the stage (forward,
backward, a recomputed forward: `calc.train_parts.StageParts`' counts), layers_s its decoder layers
and tensors_s its parameter tensors (`calc.roofline_torch.param_tensors`). The host issues in order
and does not wait for the GPU except at the step's end, so each of the forward+backward and the
optimizer takes the longer of its two paths; the part of the host path beyond the GPU's is
`host_s` in the breakdown:

    host_s = max(0, host_fb - gpu_fb) + max(0, host_opt - optimizer_s)

gpu_fb being every other part of the step before the optimizer (compute, contention, bubble,
exposed comm). Pipelines keep the same sum: the host issues a p2p receive without waiting for it,
so the bubble is GPU time, not host time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import require

DEFAULT_FRAMEWORK = "megatron"


@dataclass(frozen=True)
class HostCosts:
    """Host seconds of one framework (module docstring); the sources are in FRAMEWORK_SOURCES."""

    op_s: float  # per priced kernel: eager dispatch and module code
    dtensor_matmul_s: float  # extra per matmul kernel whose weight is a DTensor (tp > 1)
    fsdp_layer_s: float  # FSDP2 hooks of one decoder layer, one micro-batch (gathers, copies, reduce-scatter)
    dtensor_param_s: float  # optimizer step per parameter tensor when the parameters are DTensors


FRAMEWORKS: Mapping[str, HostCosts] = {
    "megatron": HostCosts(0.0, 0.0, 0.0, 0.0),
    "torch": HostCosts(op_s=40e-6, dtensor_matmul_s=520e-6, fsdp_layer_s=4.8e-3, dtensor_param_s=52e-6),
}
FRAMEWORK_SOURCES = {
    "megatron": "no host term: the host keeps ahead of the GPU (the published Megatron-LM runs, published.md)",
    "torch": "torch 2.11, 4 x H200 host (reports/train/measured.md): op_s from the profiled host time per op, "
             "the rest fitted to the 4-GPU DTensor TP and FSDP2 steps",
}


@dataclass(frozen=True)
class StageWork:
    """What the host issues for one pipeline stage: kernels per micro-batch, decoder layers, parameter tensors."""

    ops: float  # priced kernels of one micro-batch (forward + backward + recomputed forward)
    matmuls: float  # of which matmuls
    layers: int
    tensors: int


def host_paths(work: StageWork, costs: HostCosts, *, micro_batches: int, tp: int, zero: int) -> tuple[float, float]:
    """(host_fb, host_opt) seconds of one step (module docstring)."""
    dtensor = tp > 1 or zero == 3
    per_micro = (work.ops * costs.op_s + (work.matmuls * costs.dtensor_matmul_s if tp > 1 else 0.0)
                 + (work.layers * costs.fsdp_layer_s if zero == 3 else 0.0))
    return micro_batches * per_micro, (work.tensors * costs.dtensor_param_s if dtensor else 0.0)


def exposed_host_s(host: tuple[Any, Any], gpu_fb: Any, optimizer: Any) -> Any:
    """max(0, host_fb - gpu_fb) + max(0, host_opt - optimizer): elementwise over numpy arrays too."""
    import numpy as np

    return np.maximum(0.0, host[0] - gpu_fb) + np.maximum(0.0, host[1] - optimizer)


def framework_costs(name: str) -> HostCosts:
    require(name in FRAMEWORKS, f"--framework must be one of {', '.join(FRAMEWORKS)}, got {name!r}")
    return FRAMEWORKS[name]


def stage_work(spec: Any, parts: Any, stages: tuple[Any, ...], recompute: str) -> StageWork:
    """The host work of the stage that issues the most kernels (calc.train_parts stages and counts)."""
    from .roofline_torch import param_tensors
    from .train_parts import stage_ops

    head = param_tensors(spec, None)[0]
    first = 1 + (1 if spec.learned_positions else 0)  # embedding (and learned positions); the last stage has the rest

    def work(st) -> StageWork:
        ops, matmuls = stage_ops(parts, st, recompute)
        tensors = sum(param_tensors(spec, i)[0] for i in st.layers)
        tensors += (first if st.first else 0) + (head - first if st.last else 0)
        return StageWork(ops, matmuls, len(st.layers), tensors)
    return max((work(st) for st in stages), key=lambda w: (w.ops, w.tensors))
