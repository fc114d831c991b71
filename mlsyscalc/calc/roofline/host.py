"""The host's path through an eager PyTorch training step on one GPU (`--impl torch`, train, tp = dp = 1).

An eager step is issued kernel by kernel from Python: each kernel costs the host its module code,
autograd bookkeeping and the launch itself, and the GPU cannot start a kernel the host has not yet
issued. The host does not wait for the GPU until the step's end, so the step takes the longer of
the two paths (the idea of calc.train.host for torch's parallel frameworks, with one GPU):

    host_path_s = kernels x EAGER_HOST_S          (kernels: the roofline's priced kernels of the step)
    host_s      = max(0, host_path_s - gpu_s)     (the part of the host path beyond the GPU's)
    step_s      = gpu_s + host_s = max(gpu_s, host_path_s)

EAGER_HOST_S is the host time per priced kernel of the host-bound training rows of the calibration's
fit-set models on one H100 80GB HBM3 host (torch 2.11.0+cu130, reports/models/h100.jsonl and
h100_holdout.jsonl): measured step / priced kernels of TinyLlama-1.1B B2 S1024 (51.8 ms, 1709
kernels: 30.3 us), pythia-1.4b B2 S1024 (56.0 ms, 2220: 25.2 us) and gpt2 B4 S1024 (23.6 ms, 817:
28.9 us), the rows whose step exceeds their profiled kernel time by more than 10%; their median.
It is per priced kernel, so it also carries the unpriced launches (cuDNN's memsets, the embedding
backward's sort) and the host's Python; it depends on the host CPU (docs/roofline.md, "Host path").

Prefill and decode are priced as CUDA-graph replays (no host path) unless `launch` is "eager". Then
the host path is per decoder layer, not per kernel: without autograd a layer's Python (module calls,
views, cache indexing and the launches) costs about the same whatever its kernel count. On one H100
host (torch 2.11.0+cu130, reports/models/h100_torch_impl_host.jsonl) gpt2's eager decode took 0.60 ms per
layer at B1 (12 layers, 200 kernels: 36 us each) and phi-2's 0.61 ms at B4 (32 layers, 772 kernels:
25 us each): the same per layer, 1.4x apart per kernel. EAGER_LAYER_HOST_S is the median over the
fit-set model's eager inference rows (gpt2 B1-B64, h100_torch_impl_host.jsonl and h100_memory_remeasured.jsonl:
0.54-0.96 ms per layer, two hosts); phi-2 is held out. Untested on eager prefill rows. The
multi-GPU frameworks' host terms live in calc.train.host.

    host_path_s = layers x EAGER_LAYER_HOST_S     (prefill/decode, launch "eager", impl torch, tp = 1)

Both constants move with the host CPU (1.2-1.6x between hosts of one kind). `HostCosts` carries the
two costs a prediction uses: these defaults, or a measurement of the user's own host (`mlsys bench
host`, a calibration file's `host` object, `mlsys roofline --host-us-per-kernel/--host-ms-per-layer`).
`probe_costs` turns a probe's timings into costs: an eager training step and an eager decode step of
a tiny model (widths small enough that the GPU idles and the host sets the time), divided by the
kernels the roofline prices for that tiny training step and by the tiny model's decoder layers. Its
assumption: the host's cost per priced kernel (per decoder layer) of the tiny model is that of the
large one; the kernel lists and layer code are the same, only the widths differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from ...errors import require
from ...validate import positive

if TYPE_CHECKING:
    from .options import RooflineOptions

EAGER_HOST_S = 29e-6  # host seconds per priced kernel of an eager one-GPU training step (module docstring)
EAGER_LAYER_HOST_S = 0.699e-3  # host seconds per decoder layer of an eager prefill/decode step (module docstring)


@dataclass(frozen=True)
class HostCosts:
    """The host's cost of an eager step on one GPU: per priced kernel (training) and per decoder layer
    (prefill/decode with launch "eager"); `source` says where they come from."""

    s_per_kernel: float = EAGER_HOST_S
    s_per_layer: float = EAGER_LAYER_HOST_S
    source: str = "default"

    def __post_init__(self) -> None:
        positive(self.s_per_kernel, "host seconds per kernel")
        positive(self.s_per_layer, "host seconds per decoder layer")

    def as_dict(self) -> dict[str, Any]:
        return {"s_per_kernel": self.s_per_kernel, "s_per_layer": self.s_per_layer, "source": self.source}


def probe_costs(train_s: float, train_kernels: int, decode_s: float, layers: int, source: str = "probe") -> HostCosts:
    """Host costs from a probe (module docstring): a tiny model's eager training step of `train_kernels`
    priced kernels took `train_s`, its eager decode step over `layers` decoder layers `decode_s`."""
    require(train_kernels > 0 and layers > 0, f"host probe: kernels ({train_kernels}) and layers ({layers}) "
            "must be positive")
    return HostCosts(train_s / train_kernels, decode_s / layers, source)


HOST_KEYS = ("s_per_kernel", "s_per_layer")  # a calibration record's host object; HOST_INFO rides along
HOST_INFO = ("source", "launch_s", "model", "device")  # what `mlsys bench host` writes beside them


def host_from_record(section: Mapping[str, Any] | None, where: str = "calibration") -> HostCosts | None:
    """The `host` object of a calibration record ({"s_per_kernel": ..., "s_per_layer": ...}, either
    optional; what it omits keeps the default), or None without one."""
    if section is None:
        return None
    require(isinstance(section, Mapping), f"{where}: host must be an object")
    unknown = set(section) - set(HOST_KEYS) - set(HOST_INFO)
    require(not unknown, f"{where}: host keys are s_per_kernel, s_per_layer; unknown: {', '.join(sorted(unknown))}")
    values = {}
    for key in HOST_KEYS:
        value = section.get(key)
        if value is None:
            continue
        require(isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1,
                f"{where}: host.{key} must be a number of seconds in (0, 1), got {value!r}")
        values[key] = float(value)
    return HostCosts(**values, source=str(section.get("source") or where))


def probe_host_costs(fields: Mapping[str, Any]) -> HostCosts | None:
    """The host costs a `mlsys bench model` row's probe fields carry (host_s_per_kernel, host_s_per_layer,
    host_probe_model), or None without a probe."""
    per_kernel, per_layer = fields.get("host_s_per_kernel"), fields.get("host_s_per_layer")
    if not per_kernel or not per_layer:
        return None
    return HostCosts(float(per_kernel), float(per_layer), f"host probe ({fields.get('host_probe_model')})")


def host_path_unit(opts: RooflineOptions) -> str | None:
    """What the host's path is priced per: "kernel" for an eagerly launched one-GPU `--impl torch` training
    step, "layer" for an eagerly launched one-GPU prefill or decode, None where there is no host path
    (a CUDA-graph replay, fused kernels, or a multi-GPU step: calc.train.host prices that host)."""
    if opts.impl != "torch" or opts.tp != 1 or opts.dp != 1 or opts.launch_mode != "eager":
        return None
    return "kernel" if opts.phase == "train" else "layer"


def eager_host_path_s(opts: RooflineOptions, kernels: int, layers: int = 0, host: HostCosts | None = None) -> float:
    """The host's path of the step (host_path_unit): kernels x s_per_kernel, layers x s_per_layer, or 0."""
    unit, costs = host_path_unit(opts), host or HostCosts()
    return kernels * costs.s_per_kernel if unit == "kernel" else layers * costs.s_per_layer if unit == "layer" else 0.0
