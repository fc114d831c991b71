"""The host's path through an eager PyTorch training step on one GPU (`--impl torch`, train, tp = dp = 1).

An eager step is issued kernel by kernel from Python: each kernel costs the host its module code,
autograd bookkeeping and the launch itself, and the GPU cannot start a kernel the host has not yet
issued. The host does not wait for the GPU until the step's end, so the step takes the longer of
the two paths (the idea of calc.train_host for torch's parallel frameworks, with one GPU):

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
host (torch 2.11.0+cu130, reports/models/h100_check2.jsonl) gpt2's eager decode took 0.60 ms per
layer at B1 (12 layers, 200 kernels: 36 us each) and phi-2's 0.61 ms at B4 (32 layers, 772 kernels:
25 us each): the same per layer, 1.4x apart per kernel. EAGER_LAYER_HOST_S is the median over the
fit-set model's eager inference rows (gpt2 B1-B64, h100_check2.jsonl and h100_check4.jsonl:
0.54-0.96 ms per layer, two hosts); phi-2 is held out. Untested on eager prefill rows. The
multi-GPU frameworks' host terms live in calc.train_host.

    host_path_s = layers x EAGER_LAYER_HOST_S     (prefill/decode, launch "eager", impl torch, tp = 1)
"""

from __future__ import annotations

from .roofline_options import RooflineOptions

EAGER_HOST_S = 29e-6  # host seconds per priced kernel of an eager one-GPU training step (module docstring)
EAGER_LAYER_HOST_S = 0.699e-3  # host seconds per decoder layer of an eager prefill/decode step (module docstring)


def host_path_unit(opts: RooflineOptions) -> str | None:
    """What the host's path is priced per: "kernel" for a one-GPU `--impl torch` training step,
    "layer" for an eagerly launched one-GPU prefill or decode, None where there is no host path."""
    if opts.impl != "torch" or opts.tp != 1 or opts.dp != 1:
        return None
    if opts.phase == "train":
        return "kernel"
    return "layer" if opts.launch == "eager" else None


def eager_host_path_s(opts: RooflineOptions, kernels: int, layers: int = 0) -> float:
    """The host's path of the step (host_path_unit): kernels x EAGER_HOST_S, layers x EAGER_LAYER_HOST_S, or 0."""
    unit = host_path_unit(opts)
    return kernels * EAGER_HOST_S if unit == "kernel" else layers * EAGER_LAYER_HOST_S if unit == "layer" else 0.0
