"""Steady-state (sustained) ceilings: what kernels reach once a long run has brought the card to its power cap.

A roofline efficiency read from do_bench (short calls with an L2 flush between them) is a burst figure: the card
rests between calls and boosts its clock. A training step runs heavy kernels back to back for hundreds of
milliseconds, and an hours-long run does so without end; on a 700 W Hopper card the power cap then binds and the
SM clock falls. `mlsys bench ceilings --sustained` (bench.cases.sustained) runs each ceiling back to back and reads
the rate once it has settled. One H200 (torch 2.11.0+cu130, driver 580.159.04, code of fb21aea, 20 s a workload;
reports/matmul/runs/h200-sustained/ceilings.json), burst (do_bench) -> steady:

    bf16 GEMM 8192^3   672 -> 656 TFLOP/s   SM 1,425 MHz of 1,980, 693 W of 700, sw_power_cap
    bf16 GEMM 4096^3   710 -> 651 TFLOP/s   SM 1,470 MHz, 693 W, sw_power_cap
    fp8 GEMM 8192^3   1310 -> 1188 TFLOP/s  SM 1,305 MHz, 694 W, sw_power_cap
    SDPA fwd B4 H32 S4096 d128 causal (cuDNN)  519 -> 501 TFLOP/s  SM 1,620 MHz, 692 W, sw_power_cap
    2 GiB copy        4.27 -> 4.28 TB/s     SM 1,980 MHz, 675 W, no throttle

Every rate settled within the first 0.25 s window. The GEMMs settle at one rate whatever their burst rate (the
cap is a power, so it bounds FLOP/s, not a share of each shape's burst): their steady rate is kept as a fraction
of the datasheet peak, a cap on the efficiency (bf16 656 / 989.5 = 0.658, fp8 1188 / 1979 = 0.600). Attention's
steady rate is kept as its ratio to its own burst rate (0.966), since its burst rate depends on the shape and the
mask far more than on the clock. The copy does not throttle (0.892 of 4.8 TB/s, above the default memory
efficiency, so it changes nothing).

Which cards: the measurement is an H200's; the H100 SXM has the same GH100 die, SM count, clocks and 700 W limit
and takes the same figures (not measured on an H100). No other card has a measurement, so no other card is
derated; a calibration file with a `sustained` record (`mlsys bench ceilings --sustained --out FILE`) gives any
card its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import require
from ..validate import fraction

CLOCKS = ("sustained", "burst")  # an hours-long run's steady clocks, or do_bench's short bursts


@dataclass(frozen=True)
class SteadyState:
    """A card's steady-state ceilings (module docstring)."""

    matmul: float  # steady bf16/fp16 GEMM rate as a fraction of the datasheet dense peak (a cap on the efficiency)
    matmul_fp8: float | None  # steady fp8 GEMM rate as a fraction of the fp8 datasheet peak
    attention: float  # steady / burst rate of the flash attention kernel (a factor on its efficiencies)
    memory: float  # steady copy rate as a fraction of the datasheet bandwidth (a cap)
    source: str

    def __post_init__(self) -> None:
        for name in ("matmul", "attention", "memory") + (("matmul_fp8",) if self.matmul_fp8 is not None else ()):
            fraction(getattr(self, name), f"steady {name}")


MEASURED_H200 = "reports/matmul/runs/h200-sustained/ceilings.json (H200, torch 2.11, fb21aea)"
H200_STEADY = SteadyState(matmul=0.658, matmul_fp8=0.600, attention=0.966, memory=0.892, source=MEASURED_H200)
# GPU name -> its steady state; cards without a measurement are not derated
STEADY: Mapping[str, SteadyState] = {
    "H200": H200_STEADY,
    "H100-SXM": SteadyState(matmul=0.658, matmul_fp8=0.600, attention=0.966, memory=0.892,
                            source=MEASURED_H200 + "; an H200's figures (same GH100 die, SMs, clocks and 700 W limit)"),
}


def steady_from_record(record: Any, datasheet_flops: Mapping[str, float | None], datasheet_Bps: float,
                       where: str) -> SteadyState | None:
    """The steady state a calibration file's `sustained` record (bench.cases.sustained.measure) gives: each GEMM
    kind's lowest steady rate over the datasheet, attention's steady / burst ratio, the copy's steady rate over the
    datasheet bandwidth. None without a record; an error where it is not the record that command writes."""
    if record is None:
        return None
    require(isinstance(record, dict) and isinstance(record.get("workloads"), list),
            f"{where}: sustained must be the object `mlsys bench ceilings --sustained` writes (with workloads)")
    caps: dict[str, float] = {}
    for w in record["workloads"]:
        require(isinstance(w, dict), f"{where}: sustained.workloads must hold objects")
        if "error" in w:
            continue
        kind, rate, burst = w.get("kind"), _number(w.get("sustained_rate"), where), _number(w.get("burst_rate"), where)
        if kind == "attention":
            value = rate / burst
        elif kind == "memory":
            value = rate / datasheet_Bps
        elif kind in ("matmul", "matmul_fp8"):
            peak = datasheet_flops.get("fp8" if kind == "matmul_fp8" else "bf16")
            require(bool(peak), f"{where}: sustained {kind} needs a datasheet peak for this GPU")
            value = rate / float(peak or 1.0)
        else:
            continue
        caps[kind] = min(caps.get(kind, 1.0), value)
    require("matmul" in caps, f"{where}: sustained has no bf16 GEMM workload that finished")
    return SteadyState(matmul=min(caps["matmul"], 1.0), matmul_fp8=min(caps["matmul_fp8"], 1.0) if "matmul_fp8" in caps
                       else None, attention=min(caps.get("attention", 1.0), 1.0),
                       memory=min(caps.get("memory", 1.0), 1.0), source=where)


def _number(value: Any, where: str) -> float:
    require(isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 and value < float("inf"),
            f"{where}: sustained rates must be positive numbers, got {value!r}")
    return float(value)
