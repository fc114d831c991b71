"""Low-precision training: FP8 (per-tensor, blockwise) and block-scaled MXFP8 / NVFP4 recipes."""

from .._face import face

__getattr__, __dir__, __all__ = face(__name__, {
    "fp8": ("fp8_bytes", "fp8_rows", "stage_fp8_s"),
    "fp4": ("low_precision",),
})
