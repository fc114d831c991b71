"""Serving workloads: request lengths from a distribution and arrival times from a rate.

Lengths: `N` (fixed), `uniform:a,b` (integers a..b), `normal:mu,sd`, `lognormal:mu,sigma` (of the
natural log, as numpy's), or an empirical list of values (the CLI reads `csv:FILE:COLUMN`).
Continuous draws round to the nearest integer and clip at 1. Arrivals: a Poisson process at `rate`
requests/s, or a gamma renewal process of shape `burstiness` (mean gap 1/rate, coefficient of
variation 1/sqrt(burstiness): 1 is Poisson, below 1 burstier), as vLLM's benchmark_serving draws them.
A trace gives (arrival_s, prompt_len, output_len) directly. Everything draws from one seeded
random.Random, so a seed reproduces the workload. `concurrency` C makes it a closed loop of C clients
(vLLM's benchmark_serving --max-concurrency, genai-perf --concurrency): a request is sent when one of
the C before it has finished, or at its own arrival time if that is later (rate inf: all at time 0).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Sequence

from ...errors import MlsysError, require

DIST_PARAMS = {"uniform": 2, "normal": 2, "lognormal": 2}


@dataclass(frozen=True)
class LengthDist:
    kind: str  # "fixed", "uniform", "normal", "lognormal" or "empirical"
    params: tuple[float, ...]

    def draw(self, rng: random.Random) -> int:
        k, p = self.kind, self.params
        if k == "fixed":
            return int(p[0])
        if k == "uniform":
            return rng.randint(int(p[0]), int(p[1]))
        if k == "empirical":
            return int(p[rng.randrange(len(p))])
        value = rng.gauss(p[0], p[1]) if k == "normal" else rng.lognormvariate(p[0], p[1])
        return max(1, int(round(value)))

    @property
    def mean(self) -> float:
        k, p = self.kind, self.params
        if k == "fixed":
            return p[0]
        if k == "uniform":
            return (p[0] + p[1]) / 2
        if k == "empirical":
            return sum(p) / len(p)
        return p[0] if k == "normal" else math.exp(p[0] + p[1] ** 2 / 2)


def parse_length(text: str, what: str, values: tuple[int, ...] | None = None) -> LengthDist:
    """`N`, `uniform:a,b`, `normal:mu,sd`, `lognormal:mu,sigma`; `values` for an already-read column."""
    if values is not None:
        require(len(values) > 0 and min(values) >= 1, f"{what}: the column needs positive integer lengths")
        return LengthDist("empirical", tuple(int(v) for v in values))
    kind, sep, rest = text.partition(":")
    try:
        if not sep:
            n = int(kind)
            require(n >= 1, f"{what}: a length must be >= 1, got {n}")
            return LengthDist("fixed", (n,))
        require(kind in DIST_PARAMS, f"{what}: unknown distribution {kind!r} (fixed N, uniform:a,b, normal:mu,sd, "
                                     "lognormal:mu,sigma, csv:FILE:COLUMN)")
        params = tuple(float(x) for x in rest.split(","))
    except ValueError as exc:
        raise MlsysError(f"{what}: cannot parse {text!r} ({exc})") from None
    require(len(params) == DIST_PARAMS[kind], f"{what}: {kind} takes {DIST_PARAMS[kind]} numbers, got {text!r}")
    require(all(math.isfinite(x) for x in params), f"{what}: parameters must be finite, got {text!r}")
    if kind == "uniform":
        require(1 <= params[0] <= params[1] and params[0] == int(params[0]) and params[1] == int(params[1]),
                f"{what}: uniform:a,b needs integers 1 <= a <= b, got {text!r}")
    else:
        require(params[1] >= 0, f"{what}: the spread must be >= 0, got {text!r}")
        require(kind == "lognormal" or params[0] >= 1, f"{what}: the mean must be >= 1, got {text!r}")
    return LengthDist(kind, params)


Requests = Sequence[tuple[float, int, int]]  # (arrival_s, prompt tokens, output tokens), by arrival


@dataclass(frozen=True)
class Workload:
    """Requests sorted by arrival: (arrival_s, prompt_len, output_len) each."""

    requests: tuple[tuple[float, int, int], ...]
    source: str
    shared_prefix: int = 0  # every prompt starts with the same this-many tokens (a system prompt)
    concurrency: int = 0  # clients of a closed loop (0: open loop, every request at its arrival time)

    def __post_init__(self) -> None:
        require(len(self.requests) > 0, "the workload has no requests")
        require(isinstance(self.concurrency, int) and self.concurrency >= 0,
                f"--concurrency must be a non-negative integer, got {self.concurrency}")
        require(self.shared_prefix >= 0, f"--prefix-len must be >= 0, got {self.shared_prefix}")
        short = min(p for _, p, _ in self.requests)
        require(short >= self.shared_prefix, f"--prefix-len {self.shared_prefix} is longer than a {short}-token prompt")
        for arrival, prompt, output in self.requests:
            require(math.isfinite(arrival) and arrival >= 0, f"arrival times must be finite and >= 0, got {arrival}")
            require(prompt >= 1 and output >= 1, f"prompt and output lengths must be >= 1, got {prompt}, {output}")

    @property
    def duration_s(self) -> float:
        return self.requests[-1][0]


def synthetic(prompt: LengthDist, output: LengthDist, rate: float, requests: int, seed: int = 0,
              burstiness: float = 1.0, prefix: int = 0, concurrency: int = 0) -> Workload:
    """`requests` requests arriving at `rate` per second (Poisson, or gamma of shape `burstiness`);
    `prefix` shared tokens are put before every drawn prompt."""
    require(rate > 0 and not math.isnan(rate), f"--rate must be a positive number, got {rate}")
    require(requests >= 1, f"--requests must be >= 1, got {requests}")
    require(burstiness > 0 and math.isfinite(burstiness), f"--burstiness must be positive, got {burstiness}")
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(requests):  # rate inf: every request at time 0 (benchmark_serving's --request-rate inf)
        t += rng.gammavariate(burstiness, 1.0 / (rate * burstiness)) if math.isfinite(rate) else 0.0
        out.append((t, prefix + prompt.draw(rng), output.draw(rng)))
    shared = f", {prefix}-token shared prefix" if prefix else ""
    loop = f", {concurrency} clients" if concurrency else ""
    return Workload(tuple(out), f"rate {rate:g}/s, burstiness {burstiness:g}, seed {seed}{shared}{loop}", prefix,
                    concurrency)


def from_trace(rows: list[tuple[float, int, int]], source: str, prefix: int = 0, concurrency: int = 0) -> Workload:
    return Workload(tuple(sorted(rows)), source + (f", {concurrency} clients" if concurrency else ""), prefix,
                    concurrency)
