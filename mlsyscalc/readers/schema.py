"""One record's fields, checked: each getter names where the record came from and the key.

`where` is the file (and line) the record came from, e.g. "trace t.csv line 3"; a failed check
raises MlsysError("<where>: key '<key>': <what is wrong>"). Numbers may be given as JSON numbers or,
with `text=True` (CSV), as strings; booleans are never numbers.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from ..errors import MlsysError
from ..validate import MAX_FLOAT, MAX_INT

MISSING = object()


def fail(where: str, key: str, problem: str) -> MlsysError:
    return MlsysError(f"{where}: key {key!r}: {problem}" if where else f"key {key!r}: {problem}")


def _raw(record: Mapping[str, Any], key: str, where: str, required: bool) -> Any:
    value = record.get(key, MISSING)
    if value is MISSING or value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise fail(where, key, "missing" if value is MISSING else "empty")
        return MISSING
    return value


def number(record: Mapping[str, Any], key: str, where: str, *, required: bool = True, default: Any = None,
           minimum: float | None = None, above: float | None = None, maximum: float | None = None,
           text: bool = False) -> Any:
    """A finite number within the bounds (minimum <= x, above < x, x <= maximum); default if absent."""
    value = _raw(record, key, where, required)
    if value is MISSING:
        return default
    if text and isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise fail(where, key, f"{value!r} is not a number") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail(where, key, f"{value!r} is not a number")
    if isinstance(value, int) and abs(value) > MAX_FLOAT or not math.isfinite(value) or abs(value) > MAX_FLOAT:
        raise fail(where, key, f"{value!r} is not a finite number")
    if minimum is not None and value < minimum:
        raise fail(where, key, f"must be >= {minimum:g}, got {value:g}")
    if above is not None and value <= above:
        raise fail(where, key, f"must be > {above:g}, got {value:g}")
    if maximum is not None and value > maximum:
        raise fail(where, key, f"must be <= {maximum:g}, got {value:g}")
    return value


def integer(record: Mapping[str, Any], key: str, where: str, *, required: bool = True, default: Any = None,
            minimum: int = 1, maximum: int = MAX_INT, text: bool = False) -> Any:
    """A whole number in [minimum, maximum] (2.0 counts; 2.5, "2.5", true do not)."""
    value = _raw(record, key, where, required)
    if value is MISSING:
        return default
    if text and isinstance(value, str):
        stripped = value.strip()
        try:
            value = int(stripped) if stripped.lstrip("+-").isdigit() and stripped.isascii() else float(stripped)
        except ValueError:
            raise fail(where, key, f"{value!r} is not a whole number") from None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(where, key, f"{value!r} is not a whole number")
    if value < minimum:
        raise fail(where, key, f"must be >= {minimum}, got {value}")
    if value > maximum:
        shown = f"{value:,}" if value < 10**18 else f"{float(value):.3g}"
        raise fail(where, key, f"{shown} is too large (at most {maximum:,})")
    return value


def string(record: Mapping[str, Any], key: str, where: str, *, required: bool = True, default: Any = None,
           choices: tuple[str, ...] | None = None) -> Any:
    value = _raw(record, key, where, required)
    if value is MISSING:
        return default
    if not isinstance(value, str):
        raise fail(where, key, f"{value!r} is not a string")
    if choices is not None and value not in choices:
        raise fail(where, key, f"{value!r} is not one of {', '.join(choices)}")
    return value


def boolean(record: Mapping[str, Any], key: str, where: str, *, default: bool = False) -> bool:
    value = record.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise fail(where, key, f"{value!r} is not true or false")
    return value


def mapping(record: Mapping[str, Any], key: str, where: str, *, required: bool = False) -> dict[str, Any]:
    """A JSON object (an absent or null key gives {} unless required)."""
    value = record.get(key)
    if value is None:
        if required:
            raise fail(where, key, "missing")
        return {}
    if not isinstance(value, dict):
        raise fail(where, key, f"must be a JSON object, got {type(value).__name__} {_short(value)}")
    return value


def sequence(record: Mapping[str, Any], key: str, where: str) -> list[Any]:
    """A JSON list (absent or null: [])."""
    value = record.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise fail(where, key, f"must be a JSON list, got {type(value).__name__} {_short(value)}")
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
