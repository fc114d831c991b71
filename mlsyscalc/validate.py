"""The one place that says which numbers mlsyscalc accepts.

Every numeric input, from a CLI option, a config.json or the Python API, passes one of these
checks where it enters (click option types, options dataclasses' __post_init__, the config
reader), so no calculator computes with NaN, infinity, a negative size or a size so large that
the answer would take minutes. A failed check raises MlsysError naming the value's source.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

from .errors import MlsysError

# Bounds on what a sane model or cluster can be (inputs beyond them are rejected, not computed).
MAX_LAYERS = 1024  # deepest published transformers: ~1,000 layers (DeepNet, Wang et al. 2022)
MAX_DIM = 2**31  # any width, vocabulary, head count, expert count or context in a config
MAX_INT = 2**53  # any integer option: exact in a float64, so JSON readers lose nothing
MAX_GPUS = 2**20  # any parallel layout: a million GPUs (per-rank loops stay well under a second)
MAX_FLOAT = 1e300  # any real-valued option: room left for products before float64 overflows


def finite(value: Any, what: str) -> float:
    """value as a float, or an error if it is not a number or is NaN/infinite/absurdly large."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MlsysError(f"{what}: {value!r} is not a number")
    if isinstance(value, int) and abs(value) > MAX_FLOAT:
        raise MlsysError(f"{what}: {value} is too large")
    number = float(value)
    if math.isnan(number):
        raise MlsysError(f"{what}: NaN is not a number it can use")
    if math.isinf(number) or abs(number) > MAX_FLOAT:
        raise MlsysError(f"{what}: {value!r} is too large (must be finite, below {MAX_FLOAT:g})")
    return number


def positive(value: Any, what: str) -> float:
    """A finite number > 0 (bandwidths, latencies per step, prices, peaks)."""
    number = finite(value, what)
    if number <= 0:
        raise MlsysError(f"{what}: must be > 0, got {value!r}")
    return number


def non_negative(value: Any, what: str) -> float:
    """A finite number >= 0 (overheads, extra latencies)."""
    number = finite(value, what)
    if number < 0:
        raise MlsysError(f"{what}: must be >= 0, got {value!r}")
    return number


def fraction(value: Any, what: str) -> float:
    """A share of a peak: efficiencies, MFU, utilisation, in (0, 1]."""
    number = finite(value, what)
    if not 0 < number <= 1:
        raise MlsysError(f"{what}: must be a fraction in (0, 1], got {value!r}")
    return number


def count(value: Any, what: str, *, minimum: int = 1, maximum: int = MAX_INT) -> int:
    """A whole number in [minimum, maximum] (bools are not counts)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise MlsysError(f"{what}: must be a whole number, got {value!r}")
    if value < minimum:
        raise MlsysError(f"{what}: must be >= {minimum}, got {value}")
    if value > maximum:
        shown = f"{value:,}" if value < 10**18 else f"{float(value):.3g}"
        raise MlsysError(f"{what}: {shown} is too large (at most {maximum:,})")
    return value


def counts(values: Mapping[str, Any], *, minimum: int = 1, prefix: str = "") -> None:
    """count() over name -> value pairs, e.g. counts({"--dp": dp, "--tp": tp})."""
    for name, value in values.items():
        count(value, prefix + name, minimum=minimum)


def all_finite(pairs: Iterable[tuple[str, Any]]) -> None:
    """finite() over (name, value) pairs whose value is not None."""
    for name, value in pairs:
        if value is not None:
            finite(value, name)


def check_gpus(total: int, what: str) -> int:
    """A GPU count (a parallel degree or their product) no larger than MAX_GPUS."""
    return count(total, what, maximum=MAX_GPUS)
