"""Block-scaled low-precision formats: small elements sharing one scale per block of a tensor.

A block-scaled tensor stores each element in a few bits and, per block of `block` consecutive elements
(along the GEMM's reduction dimension), one scale; NVFP4 also keeps one fp32 scale for the whole tensor.
Its bytes per element in memory, in the KV cache and on the HBM bus are therefore

    bytes per element = value_bits / 8 + scale_bytes / block    (+ tensor_scale_bytes once per tensor)

| format | element | block | block scale | per tensor | bytes / element | source |
| --- | --- | ---: | --- | --- | ---: | --- |
| nvfp4 | FP4 E2M1 | 16 | FP8 E4M3 (1 byte) | fp32 | 0.5625 | NVIDIA, "Introducing NVFP4 for Efficient and Accurate Low-Precision Inference" (2025) |
| mxfp4 | FP4 E2M1 | 32 | E8M0 (1 byte) | - | 0.53125 | OCP Microscaling Formats (MX) Specification v1.0 (2023), Table 1 |
| mxfp6 | FP6 E2M3 / E3M2 | 32 | E8M0 | - | 0.78125 | same, Table 1 |
| mxfp8 | FP8 E4M3 / E5M2 | 32 | E8M0 | - | 1.03125 | same, Table 1 |

Each format computes at its element's tensor rate (`compute`: a key of GPUSpec.peak_dense_tflops): Blackwell
runs NVFP4 and MXFP4 at its FP4 rate and MXFP6 at its FP8 rate, CDNA 4 MXFP6 and MXFP4 at its FP4 rate.
NVFP4 training quantizes weights in 2D 16 x 16 blocks (NVIDIA, "Pretraining Large Language Models with
NVFP4", arXiv:2509.25149, section 4): `weight_block` elements share a scale there.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BlockFormat:
    name: str
    value_bits: int  # bits of one element
    block: int  # elements sharing one block scale
    scale_bytes: float  # bytes of one block scale
    tensor_scale_bytes: float  # bytes of the per-tensor scale (0: none)
    compute: str  # the tensor rate it computes at (GPUSpec.peak_dense_tflops key)
    weight_block: int  # elements sharing a scale in a weight quantized for training (2D blocks: 16 x 16)
    source: str

    @property
    def value_bytes(self) -> float:
        return self.value_bits / 8

    @property
    def bytes_per_element(self) -> float:
        """Elements and their block scales, per element (the per-tensor scale is once a tensor: not counted)."""
        return self.value_bytes + self.scale_bytes / self.block

    @property
    def weight_bytes_per_element(self) -> float:
        """A weight quantized for training (its `weight_block` elements share a scale)."""
        return self.value_bytes + self.scale_bytes / self.weight_block


OCP_MX = "OCP Microscaling Formats (MX) Specification v1.0 (2023), Table 1"
FORMATS = {
    "nvfp4": BlockFormat("nvfp4", 4, 16, 1.0, 4.0, "fp4", 256,
                         "NVIDIA technical blog 'Introducing NVFP4 for Efficient and Accurate Low-Precision Inference' "
                         "(2025): E2M1 values, one FP8 E4M3 scale per 16, one FP32 scale per tensor; 16 x 16 weight "
                         "blocks in training: arXiv:2509.25149 section 4"),
    "mxfp4": BlockFormat("mxfp4", 4, 32, 1.0, 0.0, "fp4", 32, OCP_MX + ": MXFP4, E2M1 elements, E8M0 scale per 32"),
    "mxfp6": BlockFormat("mxfp6", 6, 32, 1.0, 0.0, "fp6", 32, OCP_MX + ": MXFP6, E2M3 or E3M2 elements, E8M0 per 32"),
    "mxfp8": BlockFormat("mxfp8", 8, 32, 1.0, 0.0, "fp8", 32, OCP_MX + ": MXFP8, E4M3 or E5M2 elements, E8M0 per 32"),
}
