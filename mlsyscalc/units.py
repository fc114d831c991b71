"""Parsing numbers people type (5.76e23, 70B, 1.4T, 1GiB, 256MB) and formatting them for tables.

One suffix rule for every size and count option: SUFFIX_RULE below.

JSON output never goes through the formatters: it carries raw numbers in base units.
"""

from __future__ import annotations

import math
import re

from .errors import MlsysError
from .validate import MAX_FLOAT, MAX_INT

# The one suffix rule of every size and count option (case-insensitive):
#   k, M, G, T, P, E     decimal: 10^3, 10^6, 10^9, 10^12, 10^15, 10^18 (B alone = billion in counts)
#   Ki, Mi, Gi, Ti, Pi   binary: 2^10, 2^20, 2^30, 2^40, 2^50
# Sizes may end in B for bytes: 256MB = 256e6 bytes, 1GiB = 2^30 bytes, 1G = 1GB = 1e9 bytes.
_DECIMAL = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15, "e": 1e18}
_BINARY = {"ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40, "pi": 2**50}
SUFFIX_RULE = "k/M/G/T decimal (10^3 ...), Ki/Mi/Gi/Ti binary (2^10 ...)"
_NUMBER = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z]*)\s*$")


def _split(text: str, what: str) -> tuple[float, str]:
    match = _NUMBER.match(str(text).replace("_", "").replace(",", ""))
    if not match:
        raise MlsysError(f"{what}: {text!r} is not a number (suffixes: {SUFFIX_RULE})")
    return float(match.group(1)), match.group(2).lower()


def _scale(suffix: str) -> float | None:
    return _DECIMAL.get(suffix, _BINARY.get(suffix))


def _checked(value: float, text: object, what: str, positive: bool, noun: str = "") -> float:
    if not math.isfinite(value) or abs(value) > MAX_FLOAT:
        raise MlsysError(f"{what}: {text!r} is too large (must be finite, below {MAX_FLOAT:g})")
    if positive and value <= 0:
        raise MlsysError(f"{what}: must be {'a positive ' + noun if noun else 'positive'}, got {text!r}")
    return value


def parse_count(text: str | float | int, what: str = "value", *, positive: bool = True) -> float:
    """'70B' -> 7e10, '1.4T' -> 1.4e12, '5.76e23' -> 5.76e23, '16Mi' -> 16 * 2^20 (see SUFFIX_RULE)."""
    if isinstance(text, bool):
        raise MlsysError(f"{what}: {text!r} is not a number")
    if isinstance(text, (int, float)):
        return _checked(float(text), text, what, positive)
    value, suffix = _split(text, what)
    scale = 1e9 if suffix == "b" else _scale(suffix)
    if scale is None:
        raise MlsysError(f"{what}: unknown suffix {suffix!r} in {text!r} (use {SUFFIX_RULE})")
    return _checked(value * scale, text, what, positive)


def parse_bytes(text: str | int, what: str = "size") -> int:
    """'1GiB' -> 1073741824, '256MB' -> 256000000, '1G' -> 10^9, '4096' -> 4096 (see SUFFIX_RULE)."""
    value, suffix = _split(str(text), what)
    scale = _scale(suffix[:-1] if suffix.endswith("b") else suffix)
    if scale is None:
        raise MlsysError(f"{what}: unknown unit {suffix!r} in {text!r} (use B, kB, MB, GB, KiB, MiB, GiB)")
    nbytes = _checked(value * scale, text, what, positive=True, noun="size")
    if nbytes > MAX_INT:
        raise MlsysError(f"{what}: {text!r} is too large (at most 2^53 bytes)")
    if round(nbytes) < 1:
        raise MlsysError(f"{what}: {text!r} is less than one byte")
    return int(round(nbytes))


def significant(value: float, digits: int = 3) -> str:
    """value rounded to `digits` significant digits in plain decimal form, never 'e+': 1234.5 -> '1234',
    2.50 -> '2.5', 0.042 -> '0.042' (an integer part longer than `digits` is kept whole)."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(digits - 1 - math.floor(math.log10(abs(value))), 0)
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _rounded(value: float, digits: int) -> float:
    """|value| as it prints with `digits` significant digits: picks the unit, so 999.7 ms is '1 s', not '1000 ms'."""
    return abs(float(f"{value:.{digits}g}"))


def fmt_count(value: float, digits: int = 3) -> str:
    """6738415616 -> '6.74 B' (decimal: k, M, B, T, P; plain digits beyond: 1.5e18 -> '1500 P')."""
    for scale, name in ((1e15, "P"), (1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if _rounded(value, digits) >= scale:
            return f"{significant(value / scale, digits)} {name}"
    return significant(value, digits)


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
    """0.0066 -> '6.6 ms', 1500 -> '1500 s', 7200 -> '2 h' (s up to an hour, h up to a day, then days;
    three significant digits, plain decimals: never '1.5e+03 s')."""
    v = _rounded(value, 3)
    if v >= 86400:
        return f"{significant(value / 86400)} days"
    if v >= 3600:
        return f"{significant(value / 3600)} h"
    if v >= 1:
        return f"{significant(value)} s"
    if v >= 1e-3:
        return f"{significant(value * 1e3)} ms"
    return f"{significant(value * 1e6)} us"
