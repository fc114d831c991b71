"""The models report's host-probe lines: rows that carry the host probe of their own call (`mlsys bench
model` records host_s_per_kernel / host_s_per_layer, bench.cases.host) scored with the host costs it
measured, the other rows as before (the fitted constants of calc.roofline.host). Nothing is fitted:
the probe is a tiny model's eager steps, not the row being predicted."""

from __future__ import annotations

import statistics

from ..calc.roofline.host import probe_host_costs
from ..bench.cases.model import roofline_options
from ..bench.model_calibrate import _timed_torch_model, load_cases
from ..calc.roofline.calibration import load_ceilings
from ..calc.roofline.model import predict_model

LABEL = "host probe of the same call"


def _probed(row) -> bool:
    """A row with a host path (issued eagerly) and the probe of its call (a replayed graph has no host path)."""
    return _timed_torch_model(row) and row.extra.get("mode") == "eager" and probe_host_costs(row.extra) is not None


def probe_predictions(rows, hold_out: set[str], gpu: str) -> dict[str, float]:
    """Uncalibrated prediction (seconds) of every row that carries a host probe, priced with the probe's
    host costs (datasheet ceilings x default efficiencies otherwise, as the other uncalibrated lines)."""
    base = load_ceilings(gpu)
    out = {}
    for c in load_cases(rows, hold_out, keep=_probed):
        costs = probe_host_costs(c.row.extra)
        if costs is None:  # load_cases keeps only probed rows; this narrows the type
            continue
        out[c.row.key] = predict_model(c.spec, base.with_host(costs.s_per_kernel, costs.s_per_layer, costs.source),
                                       roofline_options(c.case)).time_s
    return out


def _error(measured_s: float, predicted_s: float) -> float:
    return (measured_s - predicted_s) / predicted_s


def probe_lines(fit: dict, rows, eager: dict[str, float], probed: dict[str, float], keys: set[str] | None = None
                ) -> list[list]:
    """Train and eager prefill/decode within +-15%, each row with its call's host probe where it has
    one (else today's default host costs); with `keys`, those rows only. Empty without probed rows."""
    if not probed or (keys is not None and not keys & set(probed)):
        return []
    measured = {r.key: r.median_ms * 1e-3 for r in rows if r.median_ms}
    keep = (lambda k: True) if keys is None else keys.__contains__
    train = [_error(measured[r["key"]], probed.get(r["key"], r["uncalibrated_s"]))
             for r in fit["rows"] if r["phase"] == "train" and r.get("mode") != "graph" and keep(r["key"])]
    inference = [_error(measured[k], probed.get(k, s)) for k, s in eager.items() if keep(k) and k in measured]
    lines = []
    for what, errors in (("train", train), ("eager prefill/decode", inference)):
        n = sum(1 for k in probed if keep(k) and (k in eager) == (what != "train"))
        if errors:
            lines.append([f"uncalibrated {what} within +-15% (--impl torch, {LABEL}: {n} rows; the others "
                          "default host)", f"{sum(abs(e) <= 0.15 for e in errors)}/{len(errors)}",
                          f"{100 * statistics.median(abs(e) for e in errors):+.1f}%"])
    return lines


def probe_error(row, probed: dict[str, float]) -> str | None:
    """A row's error with its call's host probe (rows table), or None."""
    if row.key not in probed or not row.median_ms:
        return None
    return f"{100 * _error(row.median_ms * 1e-3, probed[row.key]):+.1f}%"
