"""Serving capacity under an SLO: the highest request rate one engine sustains (`mlsys serve --max-rate`).

Every probe simulates the same workload recipe (lengths, seed, burstiness, request count) at another
Poisson (or gamma) rate. One seed draws the same gaps and lengths at every rate, scaled by 1/rate
(calc.serve.workload), so the probes differ only in load, and latency percentiles rise with it:

1. Saturation: every request at time 0 (rate inf); requests / makespan is the most the engine
   completes per second, the scale of the answer (an open loop past it queues without bound).
2. Bracket: from that rate, halve while the SLO misses and double while it holds, until a rate that
   holds sits below one that misses. Past ZERO_CHECK_HALVINGS halvings, a zero-load probe (requests
   a million seconds apart on average, so each runs alone) is simulated once: if even that misses a
   target, no rate meets it, and the search exits 2 naming the target.
3. Bisect that bracket until it is within REL_TOL of the rate that holds.
4. Confirm: the rate CONFIRM_STEP below the answer must hold too; if it does not, the percentiles are
   not monotone there and steps 3-4 rerun below it (CONFIRM_ROUNDS times at most), so the answer is a
   rate below which every probe held.

Near the knee the engine batches, so those probes are the cheap ones (a probe at a tenth of the answer
runs up to ten times the iterations). The answer is a simulated rate (never interpolated); the next
probe above it missed. The search stops with exit 2 after MAX_SIMULATIONS simulations, or when they
would decode more than serve_limits.MAX_OUTPUT_TOKENS, or past MAX_RATE requests/s.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from ...errors import MlsysError, require
from ...specs.model import ModelSpec
from ..roofline.calibration import Ceilings
from .simulator import ServeOptions, ServeResult, WorkloadSpec, iteration_cost, simulate
from .limits import MAX_OUTPUT_TOKENS
from .metrics import Slo
from .slo import LABELS, meets, verdicts

REL_TOL = 0.01  # the bracket's width at the end, as a share of the rate that holds
CONFIRM_STEP = 0.05  # the confirming probe sits this share below the answer
CONFIRM_ROUNDS = 2
MAX_SIMULATIONS = 40  # simulations of one search (typically 11-13: saturation + 2-3 bracket + 7 bisect + 1 confirm)
ZERO_CHECK_HALVINGS = 3  # a bracket this far below saturation asks whether any rate can hold
ZERO_LOAD_RATE = 1e-6  # requests/s: mean gap 1e6 s, so requests do not meet
MAX_RATE = 1e6  # requests/s: beyond it the SLO is called unbounded
POINT_KEYS = ("ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p90_s", "tpot_p99_s", "e2e_p50_s",
              "e2e_p90_s", "e2e_p99_s", "throughput_requests_per_s", "goodput_requests_per_s")


@dataclass(frozen=True)
class Probe:
    rate: float
    stage: str  # bracket, bisect, confirm, zero-load
    result: ServeResult

    @property
    def met(self) -> bool:
        return meets(self.result.metrics, self.result.options.slo)

    def as_dict(self) -> dict[str, Any]:
        m = self.result.metrics
        return {"rate_requests_per_s": self.rate, "stage": self.stage, "meets_slo": self.met,
                **{k: m[k] for k in POINT_KEYS}}


@dataclass(frozen=True)
class Capacity:
    max_rate: float  # requests/s: the highest probed rate that holds, below which every probe held
    next_rate: float  # requests/s: the probe just above it, which missed
    probes: tuple[Probe, ...]  # in the order simulated
    monotone: bool  # False: a confirming probe missed below a rate that held
    at_max: ServeResult
    saturation_rate: float  # requests/s completed with every request at time 0
    simulations: int  # the probes and the saturation run

    def metrics_at(self, rate: float) -> dict[str, Any]:
        return next(p.result.metrics for p in self.probes if p.rate == rate)


def missed(metrics: dict[str, Any], slo: Slo) -> str:
    """'TTFT p99 0.62 s > 0.5 s; ...' for the targets a run misses."""
    return "; ".join(f"{LABELS[v['metric']]} p{v['percentile']} {v['value_s']:.3g} s > {v['limit_s']:g} s"
                     for v in verdicts(metrics, slo) if not v["met"])


class _Prober:
    """Simulates each rate once (cached), within the caps."""

    def __init__(self, run: Callable[[float], ServeResult], tokens_per_run: int, slo: Slo):
        self.run, self.tokens_per_run, self.slo = run, tokens_per_run, slo
        self.probes: dict[float, Probe] = {}
        self.simulations = 0

    def simulate(self, rate: float) -> ServeResult:
        self.simulations += 1
        n = self.simulations
        require(n <= MAX_SIMULATIONS, f"--max-rate: no answer within {MAX_SIMULATIONS} simulations")
        require(n * self.tokens_per_run <= MAX_OUTPUT_TOKENS,
                f"--max-rate: {n} simulations of {self.tokens_per_run:,} output tokens each pass the cap of "
                f"{MAX_OUTPUT_TOKENS:,} (fewer --requests or a shorter --output-len)")
        return self.run(rate)

    def __call__(self, rate: float, stage: str) -> Probe:
        if rate not in self.probes:
            self.probes[rate] = Probe(rate, stage, self.simulate(rate))
        return self.probes[rate]

    def check_reachable(self) -> None:
        zero = self(ZERO_LOAD_RATE, "zero-load")
        if not zero.met:
            raise MlsysError(f"SLO unreachable: with every request alone (rate -> 0), "
                             f"{missed(zero.result.metrics, self.slo)}")


def _bracket(probe: _Prober, start: float) -> tuple[float, float]:
    """(a rate that holds, a higher one that misses)."""
    rate = start
    if probe(rate, "bracket").met:
        while probe(rate, "bracket").met:
            require(rate < MAX_RATE, f"--max-rate: the SLO still holds at {rate:,.0f} requests/s; it does not bound the "
                                     "rate (tighter targets, or more --requests so that queues can build)")
            rate *= 2
        return rate / 2, rate
    halvings = 0
    while not probe(rate, "bracket").met:
        rate, halvings = rate / 2, halvings + 1
        if halvings == ZERO_CHECK_HALVINGS:
            probe.check_reachable()
        if rate <= ZERO_LOAD_RATE:
            return ZERO_LOAD_RATE, rate * 2
    return rate, rate * 2


def _bisect(probe: _Prober, lo: float, hi: float) -> tuple[float, float]:
    while hi - lo > REL_TOL * lo:
        mid = (lo + hi) / 2
        if probe(mid, "bisect").met:
            lo = mid
        else:
            hi = mid
    return lo, hi


def _confirmed(probe: _Prober, lo: float, hi: float) -> tuple[float, float, bool]:
    for _ in range(CONFIRM_ROUNDS):
        below = lo * (1 - CONFIRM_STEP)
        if below <= ZERO_LOAD_RATE or probe(below, "confirm").met:
            return lo, hi, True
        held = max((r for r, p in probe.probes.items() if r < below and p.met), default=None)
        if held is None:
            probe.check_reachable()
            held = ZERO_LOAD_RATE
        lo, hi = _bisect(probe, held, below)
    return lo, hi, False


def max_rate(spec: ModelSpec, ceilings: Ceilings, work: WorkloadSpec, opts: ServeOptions,
             draft: ModelSpec | None = None) -> Capacity:
    """The highest rate of `work`'s recipe whose simulated percentiles meet every target of opts.slo."""
    require(bool(opts.slo.terms), "--max-rate needs percentile targets, e.g. --slo ttft_p99=0.5,tpot_p99=0.05 "
                                  "(ttft=S alone is a per-request threshold for goodput)")
    require(not work.concurrency, "--max-rate varies the open-loop rate: it does not combine with --concurrency")
    opts.validate()
    cost = iteration_cost(spec, ceilings, opts)
    tokens = sum(o for _, _, o in replace(work, rate=1.0).build().requests)
    probe = _Prober(lambda r: simulate(spec, ceilings, replace(work, rate=r).build(), opts, cost, draft), tokens,
                    opts.slo)
    burst = probe.simulate(float("inf")).metrics
    require(not meets(burst, opts.slo), f"--max-rate: the SLO holds even with all {burst['requests']:,} requests "
            "sent at once (rate inf): no rate bounds it (tighter targets, or more --requests so that queues can build)")
    saturation = burst["throughput_requests_per_s"]
    lo, hi = _bisect(probe, *_bracket(probe, saturation))
    lo, hi, monotone = _confirmed(probe, lo, hi)
    return Capacity(lo, hi, tuple(probe.probes.values()), monotone, probe.probes[lo].result, saturation,
                    probe.simulations)
