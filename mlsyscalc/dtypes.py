"""Bytes per element of the storage dtypes the calculators accept."""

from __future__ import annotations

from .errors import MlsysError

# Storage size in bytes per element (int4/nf4 pack two values per byte; their group-wise
# scales are accounted for separately by the calculators that use them).
BYTES_PER_ELEMENT = {
    "fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0,
    "fp8": 1.0, "int8": 1.0, "int4": 0.5, "nf4": 0.5,
}
_ALIASES = {
    "float32": "fp32", "float": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16",
    "e4m3": "fp8", "fp8_e4m3": "fp8", "e5m2": "fp8", "fp8_e5m2": "fp8",
}


def dtype_name(dtype: str) -> str:
    key = str(dtype).lower()
    key = _ALIASES.get(key, key)
    if key not in BYTES_PER_ELEMENT:
        raise MlsysError(f"unknown dtype {dtype!r} (use one of: {', '.join(BYTES_PER_ELEMENT)})")
    return key


def bytes_per_element(dtype: str) -> float:
    return BYTES_PER_ELEMENT[dtype_name(dtype)]


# Storage formats that compute at another dtype's tensor rate (a key of GPUSpec.peak_dense_tflops).
COMPUTE_RATE: dict[str, str] = {}


def compute_rate(dtype: str) -> str:
    """The tensor rate a storage dtype computes at (the dtype itself unless COMPUTE_RATE says otherwise)."""
    return COMPUTE_RATE.get(dtype, dtype)
