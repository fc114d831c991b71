"""Fit the protocol model of one link to measured NCCL collectives (numpy and scipy inside the functions).

Per collective, over every measured size n (the small ones pin the host floor):

    t(n) = max(H, min over protocols p of (base_p + steps * alpha_p + bytes(n) / B_p))

steps and bytes are the ring terms of `calc.comm.collectives.ring_terms`; H is the host time to
issue one call (consecutive calls overlap it with the GPU's work on the previous call, so it
bounds the time per call from below instead of adding to it); base_p, alpha_p and B_p are the
per-call latency, the per-step latency and the bandwidth of protocol p, the numbers NCCL's tuner
keeps per protocol (src/graph/tuning.cc: baseLat, hwLat, bandwidth). On one GPU count the step
count is fixed and alpha_p cannot be told from base_p: alpha_p is then NCCL's NVLink ring figure
(a prior) and base_p takes the rest, which is what lets a fit on 2 GPUs predict 4 or 8 (the ring's
steps grow with p, the bandwidth per GPU does not). Fitted in log-time (relative error) with scipy.optimize.least_squares,
every parameter bounded to its physical range (H, alpha >= 0, B > 0), from a fixed set of
starts so a rerun gives the same numbers. A protocol that is fastest at no fitted size above the
floor cannot be told from the data and is dropped.

`form="sum"` fits the additive alternative t = H + min_p(...) (what NCCL's own tuner does with its
base latency) for comparison only; the calculator implements the max form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..calc.comm.collectives import COLLECTIVES, ring_terms
from ..errors import MlsysError, require
from ..specs.cluster import LinkTerms, Protocol

# Names by ascending bandwidth. NCCL's protocols rank LL < LL128 < Simple in both latency and
# bandwidth, but the fit cannot tell a protocol switch from NCCL using more channels as messages
# grow, so the regimes get neutral names.
PROTOCOL_NAMES = {1: ("bulk",), 2: ("medium", "bulk"), 3: ("small", "medium", "bulk")}


# A prior for the per-step latency where the rows cannot tell it from the per-call base: on one GPU
# count every size has the same step count. NCCL's own figure for one ring step over NVLink with the
# Simple protocol (src/graph/tuning.cc, hwLat NVLink Ring/Simple: 3.4 us), as the datasheet specs use.
STEP_LATENCY_PRIOR_S = 3.4e-6


@dataclass(frozen=True)
class ProtocolFit:
    collective: str
    form: str  # "max" (the model) or "sum" (the additive alternative)
    call_overhead_s: float
    protocols: tuple[Protocol, ...]  # ascending bandwidth; each a per-call base, a per-step alpha, a bandwidth
    sizes: tuple[int, ...]  # the sizes it was fitted to
    gpus: tuple[int, ...] = ()  # the GPU counts it was fitted to (one: alpha is the prior, not fitted)

    def terms(self, bandwidth_Bps: float, latency_s: float) -> LinkTerms:
        """Link figures for the calculator; (bandwidth, latency) is the single alpha-beta pair kept beside."""
        return LinkTerms(bandwidth_Bps, latency_s, self.protocols, self.call_overhead_s)

    def predict_s(self, gpus: int, size_bytes: float) -> float:
        steps, sent = ring_terms(self.collective, gpus, size_bytes)
        device = min(p.base_latency_s + steps * p.latency_s + sent / p.bandwidth_Bps for p in self.protocols)
        return max(self.call_overhead_s, device) if self.form == "max" else self.call_overhead_s + device


@dataclass(frozen=True)
class _Layout:
    """Where each parameter sits in x = [H_us, base_us * k, (alpha_us * k when fitted), B_GBps * k]."""

    count: int
    alpha_free: bool
    alpha_us: float  # the prior when not fitted

    def split(self, x):
        k = self.count
        base = x[1:1 + k, None]
        alpha = x[1 + k:1 + 2 * k, None] if self.alpha_free else self.alpha_us
        return x[0], base, alpha, x[-k:, None]


def _device_us(x, steps, sent, layout: _Layout):
    """(count, rows) times in us of each protocol (bytes / (GB/s) = ns)."""
    _, base, alpha, bandwidth = layout.split(x)
    return base + steps[None, :] * alpha + sent[None, :] / (bandwidth * 1e3)


def _model_us(x, steps, sent, layout: _Layout, form: str):
    import numpy as np

    device = _device_us(x, steps, sent, layout).min(axis=0)
    return np.maximum(x[0], device) if form == "max" else x[0] + device


def _starts(t_us, steps, sent, layout: _Layout, form: str):
    """Deterministic starts: the bulk line from the largest sizes, slower/shorter ones below it, a few draws."""
    import numpy as np

    count, top = layout.count, sent >= np.quantile(sent, 0.6)
    design = np.c_[np.ones(top.sum()), sent[top] / 1e3]
    (lat_bulk, inv_bw), *_ = np.linalg.lstsq(design / t_us[top, None], np.ones(top.sum()), rcond=None)
    lat_bulk, b_bulk = max(lat_bulk, 1.0), 1 / inv_bw if inv_bw > 0 else float(sent.max() / 1e3 / t_us.max())
    floor = t_us.min() if form == "max" else 0.5 * t_us.min()
    alpha = [layout.alpha_us] * count if layout.alpha_free else []
    starts = []
    for f, g in ((0.1, 0.6), (0.3, 0.8), (0.6, 0.9), (0.2, 0.95)):
        ladder = [(lat_bulk * f ** k, b_bulk * g ** k) for k in range(count - 1, -1, -1)]
        starts.append(np.r_[floor, [a for a, _ in ladder], alpha, [b for _, b in ladder]])
    rng = np.random.default_rng(0)
    for _ in range(6):
        starts.append(np.r_[floor, np.sort(rng.uniform(0, 3 * lat_bulk, count)), alpha,
                            np.sort(rng.uniform(0.3, 1.2, count)) * b_bulk])
    return starts


def fit_protocols(rows: list[dict[str, Any]], count: int = 2, form: str = "max",
                  step_latency_s: float = STEP_LATENCY_PRIOR_S) -> ProtocolFit:
    """Fit H and `count` protocols (1..3) to the timed rows of one collective on one node.

    Each protocol is a per-call base latency, a per-step latency and a bandwidth. Rows of one GPU
    count fix the step count, so the per-step latency is `step_latency_s` (a prior) and the base takes
    the rest; rows of several GPU counts fit both.
    """
    import numpy as np

    try:
        from scipy.optimize import least_squares
    except ImportError:
        raise MlsysError("fitting the protocol model needs scipy: pip install 'mlsyscalc[science]'") from None
    require(1 <= count <= 3, f"1 to 3 protocols, not {count}")
    collective = rows[0]["collective"]
    require(len(rows) >= 3 and all(r["collective"] == collective for r in rows),
            f"{collective}: need at least 3 rows of one collective to fit protocols")
    gpus = tuple(sorted({int(r["gpus"]) for r in rows}))
    layout = _Layout(count, len(gpus) > 1, step_latency_s * 1e6)
    terms = [ring_terms(collective, r["gpus"], r["size_bytes"]) for r in rows]
    steps = np.array([t[0] for t in terms], dtype=float)
    sent = np.array([t[1] for t in terms], dtype=float)
    t_us = np.array([r["time_s"] * 1e6 for r in rows])
    lower = np.r_[0.0, np.zeros(count * (2 if layout.alpha_free else 1)), np.full(count, 1e-3)]

    def solve(x0):
        return least_squares(lambda x: np.log(_model_us(x, steps, sent, layout, form)) - np.log(t_us),
                             np.maximum(x0, lower + 1e-9), bounds=(lower, np.inf), x_scale=np.maximum(x0, 1.0))

    first, *others = _starts(t_us, steps, sent, layout, form)
    best = solve(first)
    for x0 in others:
        res = solve(x0)
        if res.cost < best.cost - 1e-12:
            best = res
    return _named_fit(collective, form, [float(v) for v in best.x], steps, sent, layout, rows, gpus)


def _named_fit(collective, form, x, steps, sent, layout: _Layout, rows, gpus) -> ProtocolFit:
    """Drop the protocols that are fastest at no size above the floor; name the rest by bandwidth."""
    import numpy as np

    count = layout.count
    device = _device_us(np.array(x), steps, sent, layout)
    visible = device.min(axis=0) > x[0] if form == "max" else np.ones(len(sent), dtype=bool)
    h_us, base, alpha, bandwidth = layout.split(np.array(x))
    alpha = np.broadcast_to(alpha, (count, 1))
    used = sorted({int(i) for i in device.argmin(axis=0)[visible]} or {int(np.argmax(bandwidth[:, 0]))},
                  key=lambda i: bandwidth[i, 0])
    names = PROTOCOL_NAMES[len(used)]
    protocols = tuple(Protocol(names[k], float(bandwidth[i, 0]) * 1e9, float(alpha[i, 0]) * 1e-6,
                               float(base[i, 0]) * 1e-6) for k, i in enumerate(used))
    return ProtocolFit(collective, form, float(h_us) * 1e-6, protocols,
                       tuple(int(r["size_bytes"]) for r in rows), gpus)


def by_collective(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Correct, timed single-node rows grouped by collective, each list sorted by size."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: r["size_bytes"]):
        if r.get("ok") and r.get("time_s") and r.get("nodes", 1) == 1:  # nodes is optional in a rows file
            out.setdefault(r["collective"], []).append(r)
    return {c: out[c] for c in COLLECTIVES if len(out.get(c, ())) >= 3}


def split_every_other(group: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(fit, held out): sizes at even positions of the sorted sweep (the smallest, 4x it, ...) and the rest."""
    return group[0::2], group[1::2]


def abs_errors(fit: ProtocolFit, rows: list[dict[str, Any]], min_size: int) -> list[float]:
    return [abs(fit.predict_s(r["gpus"], r["size_bytes"]) / r["time_s"] - 1) for r in rows if r["size_bytes"] >= min_size]


VARIANTS = (("max", 1), ("max", 2), ("max", 3), ("sum", 2))  # (form, protocols) compared in the report


def variant_errors(rows: list[dict[str, Any]], min_size: int) -> dict[str, dict[tuple[str, int], tuple[float, float]]]:
    """Per collective and variant: max |error| over sizes >= min_size, in-sample and held out."""
    out: dict[str, dict[tuple[str, int], tuple[float, float]]] = {}
    for c, group in by_collective(rows).items():
        train, test = split_every_other(group)
        out[c] = {}
        for form, count in VARIANTS:
            inside = abs_errors(fit_protocols(group, count, form), group, min_size)
            held = abs_errors(fit_protocols(train, count, form), test, min_size)
            out[c][(form, count)] = (max(inside, default=float("nan")), max(held, default=float("nan")))
    return out
