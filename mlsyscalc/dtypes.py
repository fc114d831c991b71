"""Bytes per element of the storage dtypes the calculators accept."""

from __future__ import annotations

from .block_formats import FORMATS, BlockFormat
from .errors import MlsysError

# Storage size in bytes per element (int4/nf4 pack two values per byte; their group-wise
# scales are accounted for separately by the calculators that use them). The block-scaled formats
# (mlsyscalc.block_formats: nvfp4, mxfp4, mxfp6, mxfp8) count their block scales in: 4 bits + one
# E4M3 byte per 16 elements is 0.5625 bytes an element of NVFP4.
BYTES_PER_ELEMENT = {
    "fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0,
    "fp8": 1.0, "int8": 1.0, "int4": 0.5, "nf4": 0.5,
    **{name: fmt.bytes_per_element for name, fmt in FORMATS.items()},
}
_ALIASES = {
    "float32": "fp32", "float": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16",
    "e4m3": "fp8", "fp8_e4m3": "fp8", "e5m2": "fp8", "fp8_e5m2": "fp8",
    "fp6": "mxfp6", "mxfp6_e2m3": "mxfp6", "mxfp6_e3m2": "mxfp6", "mxfp8_e4m3": "mxfp8", "mxfp8_e5m2": "mxfp8",
}


def dtype_name(dtype: str) -> str:
    key = str(dtype).lower()
    key = _ALIASES.get(key, key)
    if key == "fp4":
        raise MlsysError("fp4 names a tensor rate, not a storage format: use nvfp4 (one E4M3 scale per 16 elements) "
                         "or mxfp4 (one E8M0 scale per 32)")
    if key not in BYTES_PER_ELEMENT:
        raise MlsysError(f"unknown dtype {dtype!r} (use one of: {', '.join(BYTES_PER_ELEMENT)})")
    return key


def bytes_per_element(dtype: str) -> float:
    return BYTES_PER_ELEMENT[dtype_name(dtype)]


def block_format(dtype: str) -> BlockFormat | None:
    """The block-scaled format a dtype names (mlsyscalc.block_formats), else None."""
    return FORMATS.get(dtype_name(dtype))


def value_bytes(dtype: str) -> float:
    """Bytes of one element's value alone (a block-scaled format's scales left out): what tiles and alignment count."""
    fmt = block_format(dtype)
    return fmt.value_bytes if fmt else bytes_per_element(dtype)


# Storage formats that compute at another dtype's tensor rate (a key of GPUSpec.peak_dense_tflops).
COMPUTE_RATE: dict[str, str] = {name: fmt.compute for name, fmt in FORMATS.items()}


def compute_rate(dtype: str) -> str:
    """The tensor rate a storage dtype computes at (the dtype itself unless COMPUTE_RATE says otherwise)."""
    return COMPUTE_RATE.get(dtype, dtype)
