"""Parsing numbers people type (5.76e23, 70B, 1.4T, 1GiB, 256MB) and formatting them for tables.

JSON output never goes through the formatters: it carries raw numbers in base units.
"""

from __future__ import annotations

import math
import re

from .errors import MlsysError

# Decimal magnitude suffixes for counts (params, tokens, FLOPs).
_COUNT_SUFFIX = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12, "p": 1e15, "e": 1e18}
# Byte suffixes: SI (kB, MB, GB, TB) are powers of 1000, IEC (KiB, MiB, GiB, TiB) powers of 1024.
_BYTE_SUFFIX = {
    "": 1, "b": 1,
    "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
    "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}
_NUMBER = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z]*)\s*$")


def _split(text: str, what: str) -> tuple[float, str]:
    match = _NUMBER.match(str(text).replace("_", "").replace(",", ""))
    if not match:
        raise MlsysError(f"{what}: {text!r} is not a number")
    return float(match.group(1)), match.group(2).lower()


def parse_count(text: str | float | int, what: str = "value", *, positive: bool = True) -> float:
    """'70B' -> 7e10, '1.4T' -> 1.4e12, '5.76e23' -> 5.76e23 (decimal suffixes k M B/G T P E)."""
    if isinstance(text, (int, float)):
        value, suffix = float(text), ""
    else:
        value, suffix = _split(text, what)
    if suffix not in _COUNT_SUFFIX:
        raise MlsysError(f"{what}: unknown suffix {suffix!r} in {text!r} (use k, M, B, T, P)")
    value *= _COUNT_SUFFIX[suffix]
    if not math.isfinite(value):
        raise MlsysError(f"{what}: {text!r} is not finite")
    if positive and value <= 0:
        raise MlsysError(f"{what}: must be positive, got {text!r}")
    return value


def parse_bytes(text: str | int, what: str = "size") -> int:
    """'1GiB' -> 1073741824, '256MB' -> 256000000, '4096' -> 4096 (bare K/M/G/T are binary)."""
    value, suffix = _split(str(text), what)
    if suffix not in _BYTE_SUFFIX:
        raise MlsysError(f"{what}: unknown unit {suffix!r} in {text!r} (use B, kB, MB, GB, KiB, MiB, GiB)")
    nbytes = value * _BYTE_SUFFIX[suffix]
    if not math.isfinite(nbytes) or nbytes <= 0:
        raise MlsysError(f"{what}: must be a positive size, got {text!r}")
    return int(round(nbytes))


def fmt_count(value: float, digits: int = 3) -> str:
    """6738415616 -> '6.74 B' (decimal: k, M, B, T)."""
    for scale, name in ((1e15, "P"), (1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g} {name}"
    return f"{value:.{digits}g}"


def fmt_flops(value: float) -> str:
    """A FLOP count (not a rate): 2.93e13 -> '29.3 TFLOP'."""
    for scale, name in ((1e18, "EFLOP"), (1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {name}"
    return f"{value:.3g} FLOP"


def fmt_bytes(value: float) -> str:
    """Binary units, labelled as such: 107814649856 -> '100.4 GiB'."""
    for scale, name in ((1024**4, "TiB"), (1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB")):
        if abs(value) >= scale:
            return f"{value / scale:.4g} {name}"
    return f"{value:.0f} B"


def fmt_seconds(value: float) -> str:
    """0.0066 -> '6.6 ms'."""
    if value >= 86400:
        return f"{value / 86400:.3g} days"
    if value >= 3600:
        return f"{value / 3600:.3g} h"
    if value >= 1:
        return f"{value:.3g} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} us"
