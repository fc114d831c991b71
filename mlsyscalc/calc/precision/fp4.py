"""Block-scaled training recipes (NVFP4, MXFP8) as Transformer Engine runs them on Blackwell: the cast kernels
around each GEMM, priced with the format's scale overhead, and the bytes the linears save.

`calc.precision.fp8` prices FP8 with per-tensor scales (TE's DelayedScaling and Float8CurrentScaling); this module
gives it the kernels of the two block-scaled recipes, which it calls for `--dtype mxfp8` and `--dtype nvfp4`
(the recipe is then the dtype). Every decoder-layer projection runs its three GEMMs (forward, input gradient,
weight gradient) in the format; attention, the router and the head stay bf16, as under FP8.

- MXFP8 (TE `MXFP8BlockScaling`; OCP MX v1.0: E4M3 elements, one E8M0 scale per 32 along the GEMM's reduction
  dimension). A scale is local to its block, so no amax pass and no scale kernel. The forward GEMM reads the
  input blocked along its features, the weight-gradient GEMM blocked along the tokens: block-scaled data cannot
  be transposed, so one kernel reads the bf16 tensor and writes both copies (1 + 1/32 bytes an element each).
  The same for each output gradient, and once a step for each weight.
- NVFP4 (TE `NVFP4BlockScaling`; NVIDIA 2025, "Pretraining Large Language Models with NVFP4",
  arXiv:2509.25149, section 4): E2M1 elements with an E4M3 scale per 16 and an fp32 scale per tensor; weights in
  2D 16 x 16 blocks (one scale per 256, so the transposed copy shares them), a random Hadamard transform (16 x 16)
  on the weight-gradient GEMM's two inputs, stochastic rounding of the gradients. The per-tensor scale needs the
  tensor's amax before the cast (an amax pass reading the bf16 tensor, which yields the transformed tensor's amax
  too, and the scale kernel, as FP8's current scaling); then a rowwise cast (forward, or input-gradient GEMM) and
  a columnwise cast with the transform fused in (weight-gradient GEMM), each reading the bf16 tensor and writing
  0.5 + 1/16 bytes an element. Weights: amax, scale and one cast writing both layouts (0.5 + 1/256 bytes each).
  Under sequence parallelism the amax of a sequence-split tensor is reduced over the TP group, as with current
  scaling (`calc.precision.fp8.amax_reductions`).

Assumed, not read off a profile: no cast fused into a norm, and under sequence parallelism the gathered input
cast after the gather (both copies of the whole tensor). Each kernel is the roofline's memory-bound kernel
(`predict_memory_op`), as FP8's are. Memory: each FP8-path linear saves the weight-gradient GEMM's copy of its
input (`saved_bytes`: 1.03125 bytes an element in MXFP8, 0.5625 in NVFP4) and keeps both copies of its weight for
the step (`weight_copy_bytes`: 2.0625 in MXFP8, 1.0078 in NVFP4).
"""

from __future__ import annotations

from ...block_formats import FORMATS
from ...dtypes import dtype_name

BLOCK_RECIPES = ("mxfp8", "nvfp4")  # TE's MXFP8BlockScaling and NVFP4BlockScaling: the recipe is the dtype
LOW_PRECISION = ("fp8", *BLOCK_RECIPES)  # dtypes whose decoder linears run as Transformer Engine modules
AMAX_RECIPES = ("current", "nvfp4")  # recipes that reduce a sequence-split tensor's amax over the TP group
BF16, FP32 = 2.0, 4.0  # bytes an element

Kernel = tuple[str, float, float]  # (name, bytes read, bytes written)


def low_precision(dtype: str) -> bool:
    """True for the dtypes whose decoder linears run as TE's FP8/FP4 modules (the rest of the step in bf16)."""
    return dtype_name(dtype) in LOW_PRECISION


def saved_bytes(recipe: str) -> float:
    """Bytes an element of the copy of a linear's input saved for the weight-gradient GEMM."""
    return FORMATS[recipe].bytes_per_element


def weight_copy_bytes(recipe: str) -> float:
    """Bytes a weight element of the two block-scaled copies TE keeps for the step (rowwise and columnwise)."""
    return 2 * FORMATS[recipe].weight_bytes_per_element


def _nvfp4_cast(name: str, elements: float) -> list[Kernel]:
    """amax (of the tensor and of its transform), scale, rowwise cast, columnwise cast with the transform fused."""
    out = FORMATS["nvfp4"].bytes_per_element * elements
    return [(f"{name} amax", elements * BF16, 2 * FP32), (f"{name} scale", 2 * FP32, 4 * FP32),
            (f"{name} cast rowwise", elements * BF16, out), (f"{name} cast columnwise+rht", elements * BF16, out)]


def tensor_kernels(name: str, elements: float, recipe: str) -> list[Kernel]:
    """The kernels casting a bf16 tensor of `elements` for the GEMM that reads it and the weight-gradient GEMM."""
    if recipe == "mxfp8":
        return [(f"{name} cast rowwise+columnwise", elements * BF16, 2 * FORMATS["mxfp8"].bytes_per_element * elements)]
    return _nvfp4_cast(name, elements)


def gemm_kernels(key: str, x: float, dy: float, recipe: str) -> dict[str, list[Kernel]]:
    """One micro-batch's cast kernels of a GEMM group reading `x` input elements and receiving `dy` output-gradient
    elements (the whole tensors, gathered under sequence parallelism): {"forward": [...], "backward": [...]}."""
    name = f"{key}.{recipe}"
    return {"forward": tensor_kernels(f"{name} input", x, recipe),
            "backward": tensor_kernels(f"{name} grad_output", dy, recipe)}


def weight_kernels(key: str, weights: float, recipe: str) -> list[Kernel]:
    """The kernels making a GEMM group's block-scaled weight copies once a step (bf16 weights)."""
    name, copies = f"{key}.{recipe} weight", weight_copy_bytes(recipe) * weights
    if recipe == "mxfp8":
        return [(f"{name} cast rowwise+columnwise", weights * BF16, copies)]
    return [(f"{name} amax", weights * BF16, FP32), (f"{name} scale", FP32, 2 * FP32),
            (f"{name} cast 2d", weights * BF16, copies)]
