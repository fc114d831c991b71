"""Human numbers: engineering suffixes instead of scientific notation, in tables and answer lines.

`eng(70181.3)` is "70.2k", `eng(8.1128e4)` "81.1k", `eng(1.5e-5)` "15u": three significant digits
(four in table cells, `number`) and an SI prefix on a power of 1000, so a printed value is within
0.5% of the number it stands for. The large prefixes k, M, G, T, P, E are the ones every size and count option reads back
(docs/cli.md, "Numbers people type"). JSON and CSV keep raw numbers; only people see these.

`seconds`, `gib` and `percent` add the unit an answer line needs (12.3 ms, 61.2 GiB, 77%).
"""

from __future__ import annotations

import math
import re

from ..units import significant as _significant  # one plain-decimal rounding for units.py and these

# power of 1000 -> SI prefix; "u" for micro keeps the output ASCII
PREFIXES = {-5: "f", -4: "p", -3: "n", -2: "u", -1: "m", 0: "", 1: "k", 2: "M", 3: "G", 4: "T", 5: "P", 6: "E",
            7: "Z", 8: "Y", 9: "R", 10: "Q"}
PLAIN_RANGE = (1e-3, 1e4)  # |x| in this range prints as a plain decimal (4 significant digits), no prefix
_SCIENTIFIC = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?[eE][-+]?\d+(?![\w.])")


def eng(value: float, digits: int = 3) -> str:
    """value with `digits` significant digits and an SI prefix (k, M, G, ... or m, u, n, ...); never 'e+'."""
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    if magnitude < 1000.0 ** min(PREFIXES) / 2:  # under half a femto-unit
        return "0"
    if magnitude >= 1000.0 ** (max(PREFIXES) + 1):  # beyond every prefix: a power of ten, spelled out
        exponent = math.floor(math.log10(magnitude))
        return f"{sign}{_significant(magnitude / 10.0 ** exponent, digits)}x10^{exponent}"
    power = min(max(math.floor(math.log10(magnitude) / 3), min(PREFIXES)), max(PREFIXES))
    mantissa = magnitude / 1000.0 ** power
    text = _significant(mantissa, digits)
    if float(text) >= 1000 and power < max(PREFIXES):  # 999.7 rounds up to the next prefix
        power += 1
        text = _significant(magnitude / 1000.0 ** power, digits)
    return f"{sign}{text}{PREFIXES[power]}"


def eng_unit(value: float, unit: str, digits: int = 3) -> str:
    """value in `unit` with its prefix joined to the unit: 2.93e13 FLOP -> "29.3 TFLOP", 8.1e4 tok/s -> "81.1 ktok/s"."""
    text = eng(value, digits)
    prefix = text[-1] if text[-1] in PREFIXES.values() and text[-1].isalpha() else ""
    return f"{text[:len(text) - len(prefix)]} {prefix}{unit}"


def number(value: float) -> str:
    """A table cell's float, 4 significant digits: plain in PLAIN_RANGE (1234, 0.01234), else engineering
    form (12.35k, 12.35u), so a cell keeps the precision it had whatever its magnitude."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    if PLAIN_RANGE[0] <= abs(value) < PLAIN_RANGE[1]:
        text = f"{value:.4g}"
        if "e" not in text:
            return text
    return eng(value, 4)


def plain_text(text: str) -> str:
    """text with every number in scientific notation rewritten: 1.2e+04 as eng() does, a bare 1e9 as 10^9."""
    return _SCIENTIFIC.sub(_rewrite, text)


def _rewrite(match: re.Match) -> str:
    mantissa, _, exponent = match.group().lower().partition("e")
    if mantissa.lstrip("+") == "1":
        return f"10^{int(exponent)}"
    return eng(float(match.group()))


def seconds(value: float) -> str:
    """A duration with the unit that keeps it readable: 11.8 s, 12.3 ms, 45.6 us, 2.5 h."""
    magnitude = abs(value)
    if magnitude >= 3600 * 48:
        return f"{_significant(value / 86400, 3)} days"
    if magnitude >= 3600:
        return f"{_significant(value / 3600, 3)} h"
    if magnitude >= 1 or value == 0:
        return f"{_significant(value, 3)} s"
    if magnitude >= 1e-3:
        return f"{_significant(value * 1e3, 3)} ms"
    if magnitude >= 1e-6:
        return f"{_significant(value * 1e6, 3)} us"
    return f"{_significant(value * 1e9, 3)} ns"


def gib(value_bytes: float) -> str:
    """Bytes as GiB (or TiB from 1024 GiB, MiB under 1 GiB), three significant digits."""
    for unit, size in (("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20)):
        if abs(value_bytes) >= size or unit == "MiB":
            return f"{_significant(value_bytes / size, 3)} {unit}"
    raise AssertionError("unreachable")


def percent(fraction: float) -> str:
    """A fraction as a whole percentage (77%), or one decimal under 10% (4.5%)."""
    pct = 100 * fraction
    if pct == 0:
        return "0%"
    return f"{pct:.1f}%" if abs(pct) < 10 else f"{pct:.0f}%"
