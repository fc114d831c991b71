"""Which part of each parallel dimension's traffic is exposed in a training step.

The traffic (bytes, calls, seconds per call) is `calc.comm.step.step_comm`'s for the layout. With
full recomputation the recomputed forward repeats its collectives: TP's forward all-reduces (half
of TP's calls: x 1.5) and CP's forward K,V all-gather (one of its three per layer: x 4/3).

A dimension named in `overlap` hides its traffic behind a window of kernel time, and only what
exceeds the window is exposed (Calculon, Isaev et al. 2023, models overlap the same way):

- dp: the gradient all-reduce / reduce-scatter of ZeRO 0-1 runs behind the backward of the last
  micro-batch (DDP and Megatron gradient buckets, Li et al. 2020), ZeRO-2's per-micro-batch
  reduce-scatter behind every micro-batch's backward, ZeRO-1/2's parameter all-gather behind the
  first micro-batch's forward (Megatron's overlapped parameter gather; FSDP2's ZeRO-2 gathers behind
  every micro-batch's forward), ZeRO-3's prefetched gathers
  and reduce-scatters behind forward + backward of every micro-batch (FSDP prefetch);
- cp: ring attention exchanges K,V blocks while it computes on the previous ones: behind the
  attention kernels (Liu et al. 2023);
- tp, pp, ep: behind all of the step's kernels (TP comm overlap, p2p overlap of the interleaved
  schedule, MoE dispatch overlap); off by default, as in the Megatron-LM runs of 2021-2022. TP's chunked
  overlap leaves TP_OVERLAP_EXPOSED of its traffic exposed however long the window.

Windows are per micro-batch times of the slowest stage (forward f, backward b incl. recompute,
attention a) and m micro-batches.

Hidden traffic is not free: NCCL's kernels run one CTA per channel, each CTA resident on one SM for
the collective's duration, so the kernels beside it get the other SMs. While overlapped traffic runs
(its hidden seconds, total - exposed, summed over the dimensions in `overlap`), compute advances at
(sm_count - comm_sms) / sm_count of its speed, and the step loses

    contention = comm_sms / sm_count x hidden seconds

of compute. Only the SM share is modelled: HBM bandwidth taken by the collective and the extra wave
a GEMM sized for all SMs needs are not, so this is a lower bound of the slowdown (docs/train.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np

from .step import CommRow

DIMS = ("tp", "cp", "dp", "pp", "ep")
RECOMPUTE_FULL_FACTOR = {"tp": 1.5, "cp": 4 / 3}
# Overlapped TP traffic (Transformer Engine's userbuffers, PyTorch's async TP: each all-gather or reduce-scatter
# split into chunks that run beside the GEMM consuming or producing them) does not all hide: the first and last
# chunk and the per-chunk synchronisation stay on the critical path. FLUX's fused AG+GEMM / GEMM+RS kernels at TP 8
# on GPT-3's MLP shapes leave 19-25% of the collective's time exposed on H800 and 12-14% on A800
# (bytedance/flux docs/performance_report.md at 79807b7; reports/train/heldout_public/tp_overlap_evidence.md); the
# H800's 0.22 is taken for every card. The hidden rest still costs the SMs the collective holds (contention_s).
TP_OVERLAP_EXPOSED = 0.22


@dataclass(frozen=True)
class Windows:
    """Scalars for one layout (train), or numpy arrays with one entry per candidate layout (plan)."""
    forward_s: Any  # one micro-batch, slowest stage
    backward_s: Any  # incl. recomputation
    attention_s: Any  # attention kernels of one micro-batch (forward + backward + recompute)
    micro_batches: Any

    @property
    def compute_s(self) -> Any:
        return self.micro_batches * (self.forward_s + self.backward_s)


def traffic(rows: Iterable[CommRow]) -> dict[tuple[str, str], float]:
    """Seconds per (dimension, kind): dp rows are "param" (parameter all-gathers) or "grad"; others "model"."""
    out: dict[tuple[str, str], float] = {}
    for row in rows:
        kind = ("param" if row.collective == "all-gather" else "grad") if row.dim == "dp" else "model"
        out[(row.dim, kind)] = out.get((row.dim, kind), 0.0) + row.time_s
    return out


def _max0(x: Any) -> Any:  # a float or a numpy array (the batched sweep)
    return np.maximum(0.0, x)


def dim_times(seconds: Mapping[tuple[str, str], Any], *, zero: Any, recompute: Any, overlap: tuple[str, ...],
              windows: Windows, fsdp: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """({dim: total seconds}, {dim: exposed seconds}) for tp, cp, dp, pp, ep from `traffic`.

    Elementwise: `seconds`, `zero`, `recompute` and the windows may be numpy arrays (one entry per
    layout, as `plan` passes them) or plain numbers (`train`)."""
    w, m = windows, windows.micro_batches
    full = np.asarray(recompute) == "full"
    total, exposed = {}, {}
    for dim in DIMS:
        if dim == "dp":
            continue
        t = seconds.get((dim, "model"), 0.0) * np.where(full, RECOMPUTE_FULL_FACTOR.get(dim, 1.0), 1.0)
        window = m * w.attention_s if dim == "cp" else w.compute_s
        floor = TP_OVERLAP_EXPOSED * t if dim == "tp" else 0.0  # the part chunked overlap leaves exposed
        total[dim], exposed[dim] = t, (np.maximum(_max0(t - window), floor) if dim in overlap else t)
    grad, param = seconds.get(("dp", "grad"), 0.0), seconds.get(("dp", "param"), 0.0)
    total["dp"] = grad + param
    if "dp" in overlap:
        zero2 = np.asarray(zero) == 2  # FSDP2's ZeRO-2 (fsdp) gathers behind every micro-batch's forward
        split = _max0(grad - w.backward_s * np.where(zero2, m, 1)) + _max0(param - w.forward_s * np.where(zero2 & fsdp, m, 1))
        exposed["dp"] = np.where(np.asarray(zero) == 3, _max0(grad + param - w.compute_s), split)
    else:
        exposed["dp"] = grad + param
    return {d: total[d] for d in DIMS}, {d: exposed[d] for d in DIMS}


def contention_s(total: Mapping[str, Any], exposed: Mapping[str, Any], overlap: tuple[str, ...],
                 sm_share: float) -> Any:
    """Compute seconds lost to the SMs NCCL holds while overlapped traffic runs (module docstring):
    sm_share = comm_sms / sm_count in [0, 1]; zero with no overlapped dimension or sm_share 0."""
    hidden = sum((_max0(total[d] - exposed[d]) for d in overlap), 0.0)
    return sm_share * hidden
