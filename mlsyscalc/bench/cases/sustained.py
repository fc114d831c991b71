"""Sustained ceilings: each ceiling's workload run back to back until the card's power and clocks settle.

`mlsys bench ceilings` times short, L2-flushed bursts (do_bench), and between them the card rests.
An hours-long training run never rests: on an H200 an 8192^3 bf16 GEMM gives 783 TFLOP/s in bursts
but settles near 665 once it runs back to back, the SM clock at about 1,450 of 1,980 MHz with the
power-cap throttle reason set (docs/bench.md, "Sustained ceilings"). This module runs each workload
for `seconds` with no gap, times it in windows with CUDA events (two windows in flight, so the GPU never
waits for the host), samples the card through NVML on a thread beside it (SM and memory clocks, power,
temperature, throttle reasons), and reports the burst rate, the rate over the last half of the run
(the steady state) and what the card said while it ran.

Workloads (the ceilings calc.roofline.calibration prices): bf16 GEMMs at 8192^3 and 4096^3, an fp8 GEMM
(torch._scaled_mm) at 8192^3, SDPA forward at B4 H32 S4096 d128 (cuDNN, the attention ceiling) and a
2 GiB device copy (bytes read + written). Rates are FLOP/s, or B/s for the copy.
"""

from __future__ import annotations

import statistics
import threading
from functools import partial
import time
from dataclasses import dataclass
from typing import Any, Callable

from .. import harness

WINDOW_S = 0.25  # one timed window of back-to-back calls
SAMPLE_S = 0.05  # NVML sampling period
# NVML's clock-event (throttle) reason bits (nvml.h, nvmlClocksEventReason*)
THROTTLE_BITS = {0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                 0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
                 0x100: "display_clocks"}


@dataclass(frozen=True)
class Workload:
    name: str
    kind: str  # the ceiling it stands for: matmul, matmul_fp8, attention or memory
    dtype: str
    work: float  # FLOPs (or bytes for memory) of one call
    unit: str  # "flops" or "bytes"


def workloads(small: bool = False) -> list[tuple[Workload, Callable[[], Callable[[], Any]]]]:
    """(what is run, a builder returning the call) for each sustained ceiling; `small`: tiny sizes."""
    from .ceilings import _matmul_fn

    sizes = (256, 128) if small else (8192, 4096)
    out: list[tuple[Workload, Callable[[], Callable[[], Any]]]] = []
    for n in sizes:
        out.append((Workload(f"matmul_bf16_{n}", "matmul", "bf16", 2.0 * n ** 3, "flops"),
                    partial(_matmul_fn, "bf16", n, n, n)))
    if not small:
        n = sizes[0]
        out.append((Workload(f"matmul_fp8_{n}", "matmul_fp8", "fp8", 2.0 * n ** 3, "flops"),
                    partial(_matmul_fn, "fp8", n, n, n)))
    b, h, s, d = (1, 2, 128, 64) if small else (4, 32, 4096, 128)
    causal_flops = 4.0 * b * h * s * s * d / 2  # QK^T and PV, causal half
    out.append((Workload(f"attention_bf16_B{b}H{h}S{s}d{d}", "attention", "bf16", causal_flops, "flops"),
                partial(_attention_fn, b, h, s, d)))
    nbytes = 8 * 1024 ** 2 if small else 2 * 1024 ** 3
    out.append((Workload("copy", "memory", "float32", 2.0 * nbytes, "bytes"), partial(_copy_fn, nbytes)))
    return out


def _attention_fn(b: int, h: int, s: int, d: int) -> Callable[[], Any]:
    import torch
    import torch.nn.functional as F

    dev = harness.device()
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=dtype) for _ in range(3))
    return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _copy_fn(nbytes: int) -> Callable[[], Any]:
    import torch

    src = torch.randn(nbytes // 4, device=harness.device())
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


class CardSampler:
    """NVML samples of GPU 0 on a thread: (seconds since start, SM MHz, memory MHz, W, deg C, reason bits).
    Without NVML (no nvidia-ml-py, no driver, the interpreter) it records nothing and says why."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float, float, float, int]] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: Any = None
        self._handle: Any = None
        self.t0 = time.perf_counter()
        try:
            import pynvml  # nvidia-ml-py

            pynvml.nvmlInit()
            self._nvml, self._handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception as exc:  # noqa: BLE001 - no NVML here: the rates are still measured
            self.error = f"{type(exc).__name__}: {exc}"

    def card(self) -> dict[str, Any]:
        """The card's limits: power limit (W) and the highest SM clock (MHz)."""
        if self._nvml is None:
            return {}
        nv, h = self._nvml, self._handle
        return {"power_limit_W": nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
                "max_sm_clock_MHz": nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)}

    def _sample(self) -> None:
        nv, h = self._nvml, self._handle
        reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
        while not self._stop.is_set():
            self.samples.append((time.perf_counter() - self.t0, nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
                                 nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM), nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
                                 nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU), int(reasons(h))))
            self._stop.wait(SAMPLE_S)

    def __enter__(self) -> "CardSampler":
        if self._nvml is not None:
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def between(self, start: float, end: float) -> dict[str, Any]:
        """Median SM/memory clock, power and temperature, and every throttle reason seen, in [start, end] seconds."""
        rows = [s for s in self.samples if start <= s[0] <= end]
        if not rows:
            return {}
        med = lambda i: statistics.median(r[i] for r in rows)  # noqa: E731
        bits = 0
        for r in rows:
            bits |= r[5]
        return {"sm_clock_MHz": med(1), "sm_clock_min_MHz": min(r[1] for r in rows), "mem_clock_MHz": med(2),
                "power_W": med(3), "temperature_C": med(4),
                "throttle": [name for bit, name in THROTTLE_BITS.items() if bits & bit], "samples": len(rows)}


def run_back_to_back(fn: Callable[[], Any], seconds: float, calls_per_window: int,
                     clock: Callable[[], float]) -> list[tuple[float, float, float]]:
    """Call `fn` with no gap for `seconds`; one CUDA-event pair a window of `calls_per_window` calls,
    at most two windows in flight. Returns (window start s, end s, GPU ms) per window, times on `clock`."""
    import torch

    pending: list[tuple[Any, Any, float]] = []
    windows: list[tuple[float, float, float]] = []
    stop = clock() + seconds
    while clock() < stop or pending:
        if clock() < stop:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t_issue = clock()
            start.record()
            for _ in range(calls_per_window):
                fn()
            end.record()
            pending.append((start, end, t_issue))
        if len(pending) > 2 or (pending and clock() >= stop):
            s, e, t_issue = pending.pop(0)
            e.synchronize()
            windows.append((t_issue, clock(), s.elapsed_time(e)))
    return windows


def measure_workload(w: Workload, fn: Callable[[], Any], seconds: float, sampler: CardSampler) -> dict[str, Any]:
    """Burst rate (do_bench median), then `seconds` back to back: every window's rate, the steady rate (median
    of the windows in the run's last half) and the card's state over that half."""
    burst_ms = harness.time_ms(fn)
    calls = max(1, round(WINDOW_S * 1e3 / burst_ms))
    clock = lambda: time.perf_counter() - sampler.t0  # noqa: E731
    begin = clock()
    windows = run_back_to_back(fn, seconds, calls, clock)
    end = clock()
    rates = [(t1 - begin, calls * w.work / (ms * 1e-3)) for _, t1, ms in windows]
    half = [r for t, r in rates if t >= (end - begin) / 2] or [r for _, r in rates]
    burst = w.work / (burst_ms * 1e-3)
    steady = statistics.median(half)
    return {"name": w.name, "kind": w.kind, "dtype": w.dtype, "unit": w.unit, "work": w.work,
            "burst_rate": burst, "sustained_rate": steady, "sustained_over_burst": steady / burst,
            "seconds": end - begin, "calls_per_window": calls,
            "windows": [[round(t, 3), r] for t, r in rates],
            "card_burst": sampler.between(begin - 1.0, begin), "card_steady": sampler.between(begin + (end - begin) / 2, end)}


def measure(seconds: float = 20.0, small: bool = False, only: tuple[str, ...] = ()) -> dict[str, Any]:
    """The sustained record (docs/bench.md, "Sustained ceilings"): every workload's burst and steady rates, the
    card's clocks, power and throttle reasons while it ran."""
    env = dict(harness.env_metadata())
    results = []
    with CardSampler() as sampler:
        for w, build in workloads(small):
            if only and w.kind not in only and w.name not in only:
                continue
            try:
                results.append(measure_workload(w, build(), seconds, sampler))
            except Exception as exc:  # noqa: BLE001 - e.g. no fp8 on this card: record and go on
                results.append({"name": w.name, "kind": w.kind, "error": f"{type(exc).__name__}: {exc}"[:300]})
            time.sleep(0 if small else 2.0)  # let the card settle between workloads
        card = sampler.card()
        error = sampler.error
    return {"gpu": env.get("gpu"), "sm_count": env.get("sm_count"), "seconds_per_workload": seconds,
            "card": card, "nvml_error": error, "workloads": results, "env": env, "measured_at": harness.now()}


def datasheet_fractions(record: dict[str, Any]) -> dict[str, float]:
    """Per ceiling kind, the lowest steady rate of its workloads as a fraction of the card's datasheet (bf16 or
    fp8 dense peak, HBM bandwidth): the `sustained_fraction` object calc.roofline.calibration reads."""
    from ...calc.roofline.calibration import match_gpu

    spec = match_gpu(record.get("gpu") or "")
    out: dict[str, float] = {}
    for w in record.get("workloads", []):
        if "sustained_rate" not in w:
            continue
        peak = spec.memory_bandwidth_Bps if w["unit"] == "bytes" else spec.peak_flops(w["dtype"])
        out[w["kind"]] = min(out.get(w["kind"], 1.0), w["sustained_rate"] / peak)
    return out


def table_rows(record: dict[str, Any]) -> list[list[Any]]:
    """One table row a workload: burst and steady rate (TFLOP/s, or GB/s for the copy), their ratio, the steady
    SM clock, power and throttle reasons."""
    rows = []
    for w in record.get("workloads", []):
        if "error" in w:
            rows.append([w["name"], w["error"], None, None, None, None, ""])
            continue
        scale = 1e9 if w["unit"] == "bytes" else 1e12
        card = w.get("card_steady") or {}
        rows.append([w["name"], w["burst_rate"] / scale, w["sustained_rate"] / scale, w["sustained_over_burst"],
                     card.get("sm_clock_MHz"), card.get("power_W"), ",".join(card.get("throttle", []))])
    return rows
