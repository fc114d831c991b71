"""Service-level objectives of `mlsys serve --slo`: percentile targets and per-request thresholds.

`--slo` is a comma-separated list of terms, each in seconds:

- `METRIC_pQ=S` (METRIC ttft, tpot or e2e; Q 50, 90 or 99): a percentile target, met when the run's
  Q-th percentile of METRIC (calc.serve.metrics, linear interpolation) is at most S. It also sets the
  per-request threshold of METRIC to S (the loosest S when one metric has several targets), so
  goodput counts the requests within S.
- `METRIC=S`: a per-request threshold only (goodput and attainment; DistServe, Zhong et al. OSDI
  2024, section 2), the form `--slo ttft=0.5,tpot=0.05` has always meant. A threshold given this way
  wins over one a percentile target would set.

A run meets the SLO when every percentile target holds; a metric with no value (TPOT of
one-token outputs) holds vacuously, as in goodput.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from ...errors import MlsysError, require
from .metrics import PERCENTILES, Slo

METRICS = ("ttft", "tpot", "e2e")
LABELS = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "e2e"}
FORM = "METRIC_pQ=SECONDS (METRIC ttft, tpot or e2e; Q 50, 90 or 99) or METRIC=SECONDS, e.g. ttft_p99=0.5,tpot_p99=0.05"
MAX_SLO_S = 1e9  # about 32 years: anything longer is a typo, not a target


def _term(key: str, text: str) -> tuple[str, int | None]:
    metric, sep, q = key.lower().partition("_p")
    require(metric in METRICS and (not sep or q in {str(p) for p in PERCENTILES}),
            f"--slo: unknown term {key!r}; expected {FORM}, got {text!r}")
    return metric, int(q) if sep else None


def _seconds(key: str, value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise MlsysError(f"--slo {key}: {value!r} is not a number of seconds") from None
    require(math.isfinite(seconds) and 0 < seconds <= MAX_SLO_S,
            f"--slo {key}: {value!r} must be a positive number of seconds up to {MAX_SLO_S:g}")
    return seconds


def parse_slo(text: str | None) -> Slo:
    """`--slo` text -> Slo; None or "" -> no SLO."""
    if not text:
        return Slo()
    terms: list[tuple[str, int, float]] = []
    bare: dict[str, float] = {}
    seen: set[str] = set()
    for item in text.split(","):
        key, sep, value = (part.strip() for part in item.partition("="))
        require(bool(sep), f"--slo expects {FORM}; got {text!r}")
        metric, q = _term(key, text)
        require(key.lower() not in seen, f"--slo: {key} is given twice in {text!r}")
        seen.add(key.lower())
        seconds = _seconds(key, value)
        if q is None:
            bare[metric] = seconds
        else:
            terms.append((metric, q, seconds))
    thresholds = {m: max(s for mm, _, s in terms if mm == m) for m, _, _ in terms}
    thresholds.update(bare)
    return Slo(ttft_s=thresholds.get("ttft"), tpot_s=thresholds.get("tpot"), e2e_s=thresholds.get("e2e"),
               terms=tuple(terms))


def term_name(metric: str, q: int) -> str:
    return f"{LABELS[metric]} p{q}"


def verdicts(metrics: Mapping[str, Any], slo: Slo) -> list[dict[str, Any]]:
    """Each percentile target with the run's value and whether it holds."""
    out = []
    for metric, q, limit in slo.terms:
        value = metrics[f"{metric}_p{q}_s"]
        out.append({"metric": metric, "percentile": q, "limit_s": limit, "value_s": value,
                    "met": value is None or value <= limit})
    return out


def meets(metrics: Mapping[str, Any], slo: Slo) -> bool:
    return all(v["met"] for v in verdicts(metrics, slo))


def as_dict(slo: Slo, metrics: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The SLO as JSON: thresholds, targets and (given a run's metrics) each target's verdict."""
    out: dict[str, Any] = {"given": slo.given, "ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s, "e2e_s": slo.e2e_s,
                           "terms": [{"metric": m, "percentile": q, "limit_s": s} for m, q, s in slo.terms]}
    if metrics is not None and slo.terms:
        out["terms"] = verdicts(metrics, slo)
        out["met"] = meets(metrics, slo)
    return out
