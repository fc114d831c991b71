"""How far to trust a time: each command's error on runs it was not developed on (model_specs/intervals.json,
written by scripts/validate/intervals.py from committed predictions and the rows that scored them)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .lookup import _data_dir, read_json


@dataclass(frozen=True)
class Interval:
    """Where measured times fell relative to the prediction on `runs` unseen runs: 1 / (1 + e) - 1 at the
    10th (`low`), 50th and 90th (`high`) percentiles, e = predicted / measured - 1."""

    runs: int
    low: float
    median: float
    high: float
    coverage: float  # the share of the runs between low and high
    source: str
    note: str

    def around(self, seconds: float) -> dict[str, float | int | str]:
        """The range for one prediction (JSON: base units)."""
        return {"low_s": seconds * (1 + self.low), "median_s": seconds * (1 + self.median),
                "high_s": seconds * (1 + self.high), "low_rel": self.low, "high_rel": self.high,
                "coverage": self.coverage, "runs": self.runs, "source": self.source}

    def text(self, seconds: float, unit: float = 1.0, label: str = "s") -> str:
        """'12.9 s (likely 12.6-17.0 s: 80% of 98 unseen runs took -2% / +32% of the prediction)'."""
        lo, hi = seconds * (1 + self.low) / unit, seconds * (1 + self.high) / unit
        return (f"{seconds / unit:.3g} {label}, likely {lo:.3g}-{hi:.3g} {label}: {100 * self.coverage:.0f}% of "
                f"{self.runs} unseen runs took {100 * self.low:+.0f}% / {100 * self.high:+.0f}% of the prediction "
                f"({self.note}; model_specs/intervals.json)")


@lru_cache(maxsize=1)
def intervals() -> dict[str, Interval]:
    """Every command's interval by key (train, serve_ttft, serve_tpot, roofline_torch_<phase>)."""
    data = read_json(_data_dir("intervals.json"), "intervals")
    return {k: Interval(v["runs"], v["low"], v["median"], v["high"], v["coverage"], v["source"], v["note"])
            for k, v in data["intervals"].items()}


def interval(key: str) -> Interval | None:
    return intervals().get(key)
