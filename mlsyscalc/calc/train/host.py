"""What a framework adds to a training step beyond kernels and bytes: the host's time to issue a stage's
kernels (and when it paces the step), and the compute torch's interleaved pipeline loses beside its p2p.

A GPU runs a kernel only after the host has issued it. Megatron-LM's host (fused kernels, no per-op
Python dispatch beyond the module code) keeps ahead of the GPU at the sizes it trains, so its step is
the GPU's (`--framework megatron`, the default: no host term). PyTorch's own parallelism
(`--framework torch`: eager modules, DTensor tensor parallelism, FSDP2, torch.distributed.pipelining)
spends tens to hundreds of microseconds of CPU per op; when the host needs longer to issue a step than
the GPU needs to run it, the GPU waits (measured: reports/train/measured.md, "Where the GPU time goes").

The host seconds of one step on one GPU (stage s, m micro-batches):

    host_fb  = m x ( ops_s x op_s  +  matmuls_s x dtensor_matmul_s [tp > 1]  +  layers_s x fsdp_layer_s [FSDP2] )
    host_opt = tensors_s x dtensor_param_s   [parameters are DTensors: tp > 1 or FSDP2]

(FSDP2: ZeRO-2 or 3, calc.memory.schedule.fsdp_sharded; ZeRO-2's hooks gather no parameters in the backward, and
are priced at ZeRO-3's fitted per-layer cost.)

ops_s and matmuls_s are the kernels the roofline prices for one micro-batch on the stage (forward,
backward, a recomputed forward: `calc.train.parts.StageParts`' counts), layers_s its decoder layers
and tensors_s its parameter tensors (`calc.roofline.torch_kernels.param_tensors`). The host issues in order
and does not wait for the GPU except at the step's end, so each of the forward+backward and the
optimizer takes the longer of its two paths; the part of the host path beyond the GPU's is
`host_s` in the breakdown:

    host_s = max(0, host_fb - gpu_fb) + max(0, host_opt - optimizer_s)

gpu_fb being every other part of the step before the optimizer (compute, contention, bubble,
exposed comm). Pipelines keep the same sum: the host issues a p2p receive without waiting for it,
so the bubble is GPU time, not host time.

torch.distributed.pipelining's interleaved schedule (vp > 1) posts the next model chunk's p2p
send/receive while the current chunk computes; those NCCL kernels sit on SMs beside the stage's
kernels, and the stage's compute runs slower (profiled on 4 x H200, rank 0: compute kernels 165.7 ms
a step against 146.8 in 1F1B, +12.9%; on 2 x H200 170.3 against 154.5, +10.2%). The compute and the
bubble (made of the other stages' compute) of an interleaved step are charged that share, as
contention (the compute lost beside NCCL kernels, calc.comm.exposed):

    interleaved_contention = p2p_slowdown x (compute_s + bubble_s)        [vp > 1]

torch DDP's bucketed gradient all-reduce, overlapped with the backward, slows the backward's kernels
by far more than the SMs NCCL holds (profiled: 4 x H200 compute kernels 186.6 ms against one GPU's
167.4 beside 38 ms of hidden NCCL; 2 x H200 181-183 ms against 168 beside 25-35 ms): the collective
also takes HBM bandwidth, GEMMs tiled for every SM run a tail wave on fewer, and NCCL itself runs
longer than the comm model prices it alone. `overlap_slowdown` is that loss beyond comm_sms /
sm_count, as a share of the model's hidden (overlapped) seconds, added to the contention term
(calc.comm.exposed.contention_s):

    contention = (comm_sms / sm_count + overlap_slowdown) x hidden seconds

Fitted to one row, the 4 x H200 DDP step's forward+backward (measured 158.6 ms, predicted 142.7 with
21.9 ms hidden: (158.6 - 142.7) / 21.9 = 0.726); the 2 x H200 and 4 x H100 DDP rows are held out
(they would need 0.80 and 0.79). `megatron` keeps 0: no such measurement exists for Megatron-LM's
overlapped gradient reduction, and the published runs it is checked against are priced without it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from ...errors import require
from ..memory.schedule import fsdp_sharded

DEFAULT_FRAMEWORK = "megatron"


@dataclass(frozen=True)
class FrameworkCosts:
    """Host seconds and the interleaved p2p slowdown of one framework (module docstring); sources in
    FRAMEWORK_SOURCES."""

    op_s: float  # host, per priced kernel: eager dispatch and module code
    dtensor_matmul_s: float  # host, extra per matmul kernel whose weight is a DTensor (tp > 1)
    fsdp_layer_s: float  # host, FSDP2 hooks of one decoder layer, one micro-batch (gathers, copies, reduce-scatter)
    dtensor_param_s: float  # host, optimizer step per parameter tensor when the parameters are DTensors
    p2p_slowdown: float = 0.0  # share of compute lost beside the interleaved schedule's p2p kernels (vp > 1)
    # share of the overlapped (hidden) comm seconds the compute loses beyond comm_sms / sm_count (calc.comm.exposed)
    overlap_slowdown: float = 0.0


FRAMEWORKS: Mapping[str, FrameworkCosts] = {
    "megatron": FrameworkCosts(0.0, 0.0, 0.0, 0.0, 0.0),
    "torch": FrameworkCosts(op_s=53.7e-6, dtensor_matmul_s=479e-6, fsdp_layer_s=4.30e-3, dtensor_param_s=53.9e-6,
                            p2p_slowdown=0.129, overlap_slowdown=0.726),
}
FRAMEWORK_SOURCES = {
    "megatron": "no host term, no p2p slowdown: the host keeps ahead of the GPU (the published Megatron-LM runs, "
                "reports/train/published.md, are priced so)",
    "torch": "torch 2.11.0+cu130 on an HGX H200 host (reports/train/measured.md, 'Host time'): op_s, "
             "dtensor_matmul_s, fsdp_layer_s and dtensor_param_s fitted to the 4-GPU DTensor TP, FSDP2 and FSDP2 x TP "
             "steps (scripts/train_host_fit.py; op_s is below the profiled bound of 70.7 us); p2p_slowdown measured: "
             "the 4-GPU interleaved profile's rank-0 compute over 1F1B's; overlap_slowdown fitted to the 4-GPU DDP step's "
             "forward+backward (2 x H200 and 4 x H100 DDP held out)",
}


@dataclass(frozen=True)
class StageWork:
    """What the host issues for one pipeline stage: kernels per micro-batch, decoder layers, parameter tensors."""

    ops: float  # priced kernels of one micro-batch (forward + backward + recomputed forward)
    matmuls: float  # of which matmuls
    layers: int
    tensors: int


def host_paths(work: StageWork, costs: FrameworkCosts, *, micro_batches: int, tp: int, zero: int) -> tuple[float, float]:
    """(host_fb, host_opt) seconds of one step (module docstring)."""
    dtensor = tp > 1 or fsdp_sharded(zero)
    per_micro = (work.ops * costs.op_s + (work.matmuls * costs.dtensor_matmul_s if tp > 1 else 0.0)
                 + (work.layers * costs.fsdp_layer_s if fsdp_sharded(zero) else 0.0))
    return micro_batches * per_micro, (work.tensors * costs.dtensor_param_s if dtensor else 0.0)


def exposed_host_s(host: tuple[Any, Any], gpu_fb: Any, optimizer: Any) -> Any:
    """max(0, host_fb - gpu_fb) + max(0, host_opt - optimizer): elementwise over numpy arrays too."""
    import numpy as np

    return np.maximum(0.0, host[0] - gpu_fb) + np.maximum(0.0, host[1] - optimizer)


def interleaved_contention_s(p2p_slowdown: float, vp: Any, compute_s: Any, bubble_s: Any) -> Any:
    """p2p_slowdown x (compute + bubble) where vp > 1, else 0 (module docstring); elementwise over arrays."""
    import numpy as np

    return np.where(np.asarray(vp) > 1, p2p_slowdown * (compute_s + bubble_s), 0.0)


def framework_costs(name: str, overrides: tuple[tuple[str, float], ...] = ()) -> FrameworkCosts:
    """The costs of a framework, with `overrides` (a calibration file's `torch_host` fields) replacing torch's."""
    require(name in FRAMEWORKS, f"--framework must be one of {', '.join(FRAMEWORKS)}, got {name!r}")
    if name != "torch" or not overrides:
        return FRAMEWORKS[name]
    return replace(FRAMEWORKS[name], **dict(overrides))


HOST_FIELDS = tuple(FrameworkCosts.__dataclass_fields__)


def host_overrides(record: Mapping[str, Any] | None) -> tuple[tuple[str, float], ...]:
    """The `torch_host` object of a calibration record (`mlsys train --calibration`): measured costs of the
    user's own host, each a FrameworkCosts field in seconds (shares for the two slowdowns); () without one."""
    section = (record or {}).get("torch_host")
    return () if section is None else host_cost_fields(section, "calibration: torch_host", ".")


def host_cost_fields(section: Any, label: str, sep: str = ": ") -> tuple[tuple[str, float], ...]:
    """A mapping of FrameworkCosts fields (any subset) as overrides; each a number in [0, 1) (seconds, or a
    share for the two slowdowns): an unknown key, a string, NaN, a negative or 1 and beyond is an MlsysError
    naming `label` (`--host-costs`, a calibration's torch_host)."""
    require(isinstance(section, Mapping), f"{label} must be an object")
    unknown = set(section) - set(HOST_FIELDS)
    require(not unknown, f"{label} keys are {', '.join(HOST_FIELDS)}; unknown: {', '.join(sorted(map(str, unknown)))}")
    for key, value in section.items():
        require(isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1,
                f"{label}{sep}{key} must be a number in [0, 1) (seconds or a share), got {value!r}")
    return tuple((k, float(section[k])) for k in HOST_FIELDS if k in section)


def tensor_counts(spec: Any) -> tuple[tuple[int, ...], int, int]:
    """(parameter tensors of each decoder layer, of the first stage's ends, of the last stage's ends):
    `calc.roofline.torch_kernels.param_tensors`, computed once per model (plan reuses it for every layout)."""
    from ..roofline.torch_kernels import param_tensors

    head = param_tensors(spec, None)[0]
    first = 1 + (1 if spec.learned_positions else 0)  # embedding (and learned positions); the last stage has the rest
    return tuple(param_tensors(spec, i)[0] for i in range(spec.num_layers)), first, head - first


def stage_work(spec: Any, parts: Any, stages: tuple[Any, ...], recompute: str,
               counts: tuple[tuple[int, ...], int, int] | None = None) -> StageWork:
    """The host work of the stage that issues the most kernels (calc.train.parts stages and counts);
    `counts` is `tensor_counts(spec)` when the caller already holds it."""
    from .parts import stage_ops

    layers, first, last = counts or tensor_counts(spec)

    def work(st: Any) -> StageWork:
        ops, matmuls = stage_ops(parts, st, recompute)
        tensors = sum(layers[i] for i in st.layers) + (first if st.first else 0) + (last if st.last else 0)
        return StageWork(ops, matmuls, len(st.layers), tensors)
    return max((work(st) for st in stages), key=lambda w: (w.ops, w.tensors))
